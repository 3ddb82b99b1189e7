#!/usr/bin/env bash
# Installs what the tests need from Debian beyond Go and the control plane:
# squid, so that internal/provider/kubernetes proves its generated squid.conf
# with the real Squid (squid -k parse, and a Squid forwarding on loopback).
# Idempotent: a second run installs nothing. Needs root (or sudo).
#
# The tests start their own Squid in a temporary directory, so a system Squid
# service would only hold port 3128 and burn CPU: it is stopped and disabled.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

if command -v squid >/dev/null 2>&1; then
  echo "install-test-deps: squid already installed: $(command -v squid) ($(squid -v | head -n1))"
else
  # policy-rc.d answering 101 keeps the package's maintainer scripts from
  # starting the service during the install (removed again on exit).
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    echo "install-test-deps: writing $policy so the install starts no service"
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 0755 "$policy"
    created_policy=1
  fi
  trap '[ "$created_policy" = 1 ] && $SUDO rm -f "$policy"' EXIT
  echo "install-test-deps: apt-get update"
  $SUDO apt-get update
  echo "install-test-deps: apt-get install -y --no-install-recommends squid"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends squid
  echo "install-test-deps: installed $(command -v squid) ($(squid -v | head -n1))"
fi

# Stop and disable a system Squid service if the package (or an earlier run
# without the policy) started one; the tests never use it.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  if systemctl is-active --quiet squid 2>/dev/null; then
    echo "install-test-deps: stopping the squid service"
    $SUDO systemctl stop squid
  fi
  if systemctl is-enabled --quiet squid 2>/dev/null; then
    echo "install-test-deps: disabling the squid service"
    $SUDO systemctl disable squid
  fi
elif command -v service >/dev/null 2>&1 && [ -x /etc/init.d/squid ]; then
  if $SUDO service squid status >/dev/null 2>&1; then
    echo "install-test-deps: stopping the squid service"
    $SUDO service squid stop || true
  fi
fi
echo "install-test-deps: done"
