#!/usr/bin/env bash
# Installs what the tests need from Debian beyond Go and the control plane:
#   squid: internal/provider/kubernetes proves its generated squid.conf with
#     the real Squid (squid -k parse, and a Squid forwarding on loopback);
#     SKIP_SQUID_TESTS=1 skips it.
#   genisoimage (isoinfo) and xorriso: internal/provider/nocloud reads its
#     seed ISO back with real ISO readers; SKIP_ISO_TESTS=1 skips them.
# Idempotent: a second run installs nothing. Needs root (or sudo).
#
# The tests start their own Squid in a temporary directory, so a system Squid
# service would only hold port 3128 and burn CPU: it is stopped and disabled.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

# want BINARY PACKAGE SKIP_VARIABLE: install PACKAGE unless BINARY is there
# or SKIP_VARIABLE=1.
missing=()
want() {
  local bin=$1 pkg=$2 skip=$3
  if [ "${!skip:-}" = 1 ]; then
    echo "install-test-deps: $skip=1: not installing $pkg"
  elif command -v "$bin" >/dev/null 2>&1; then
    echo "install-test-deps: $pkg already installed: $(command -v "$bin")"
  else
    missing+=("$pkg")
  fi
}
want squid squid SKIP_SQUID_TESTS
want isoinfo genisoimage SKIP_ISO_TESTS
want xorriso xorriso SKIP_ISO_TESTS

if [ "${#missing[@]}" -gt 0 ]; then
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
  echo "install-test-deps: apt-get install -y --no-install-recommends ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
  echo "install-test-deps: installed ${missing[*]}"
fi
if command -v squid >/dev/null 2>&1; then
  echo "install-test-deps: $(command -v squid) ($(squid -v | head -n1))"
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
