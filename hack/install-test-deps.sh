#!/usr/bin/env bash
# Installs what the tests need from Debian beyond Go and the control plane:
# - squid, so that internal/provider/squid and internal/provider/kubernetes
#   prove the generated squid.conf with the real Squid (squid -k parse, and
#   a Squid forwarding on loopback);
# - cloud-init, so that internal/provider/squid proves the generated
#   cloud-config with the real `cloud-init schema`;
# - genisoimage (isoinfo) and xorriso, so that internal/provider/nocloud
#   reads its seed ISO back with real ISO readers;
# - keepalived, so that internal/provider/vrrp runs the generated VRRP
#   configuration with the real keepalived (members in network namespaces
#   of the test's own; its service is disabled);
# - libvirt-clients (virt-xml-validate) and libxml2-utils (xmllint, which it
#   runs), so that internal/provider/libvirt checks the XML it builds with
#   libvirt's own schemas (the clients only: no daemon is installed).
# Idempotent: a second run installs nothing. Needs root (or sudo).
# SKIP_SQUID_TESTS=1 / SKIP_CLOUDINIT_TESTS=1 / SKIP_ISO_TESTS=1 /
# SKIP_VRRP_TESTS=1 / SKIP_LIBVIRT_SCHEMA_TESTS=1 leave the
# package out (the tests that need it then skip; without the variable they
# fail).
#
# Neither package may run a service here: the tests start their own Squid
# in a temporary directory (a system Squid would only hold port 3128), and
# cloud-init on a machine that is not a cloud guest would rewrite its
# network, hostname and users at the next boot. So the install starts no
# service, the squid service is stopped and disabled, and cloud-init is
# disabled altogether (/etc/cloud/cloud-init.disabled, and its units).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
have_systemd() { command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; }

# apt_install PKG: installs one package without starting its services.
updated=0
apt_install() {
  # policy-rc.d answering 101 keeps the package's maintainer scripts from
  # starting the service during the install (removed again afterwards).
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [ ! -e "$policy" ]; then
    echo "install-test-deps: writing $policy so the install starts no service"
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 0755 "$policy"
    created_policy=1
  fi
  if [ "$updated" = 0 ]; then
    echo "install-test-deps: apt-get update"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update
    updated=1
  fi
  echo "install-test-deps: apt-get install -y --no-install-recommends $1"
  local rc=0
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$1" || rc=$?
  if [ "$created_policy" = 1 ]; then $SUDO rm -f "$policy"; fi
  return "$rc"
}

# quiet_service NAME: stops and disables a package's service (one an
# earlier run without the policy started); the tests start their own.
quiet_service() {
  if have_systemd; then
    if systemctl is-active --quiet "$1" 2>/dev/null; then
      echo "install-test-deps: stopping the $1 service"
      $SUDO systemctl stop "$1"
    fi
    if systemctl is-enabled --quiet "$1" 2>/dev/null; then
      echo "install-test-deps: disabling the $1 service"
      $SUDO systemctl disable "$1"
    fi
  elif command -v service >/dev/null 2>&1 && [ -x "/etc/init.d/$1" ]; then
    if $SUDO service "$1" status >/dev/null 2>&1; then
      echo "install-test-deps: stopping the $1 service"
      $SUDO service "$1" stop || true
    fi
  fi
}

if [ "${SKIP_SQUID_TESTS:-}" = 1 ]; then
  echo "install-test-deps: SKIP_SQUID_TESTS=1: not installing squid"
elif command -v squid >/dev/null 2>&1 || [ -x /usr/sbin/squid ]; then
  echo "install-test-deps: squid already installed: $(command -v squid || echo /usr/sbin/squid) ($(/usr/sbin/squid -v | head -n1))"
else
  apt_install squid
  echo "install-test-deps: installed /usr/sbin/squid ($(/usr/sbin/squid -v | head -n1))"
fi

# The ISO readers run no service.
if [ "${SKIP_ISO_TESTS:-}" = 1 ]; then
  echo "install-test-deps: SKIP_ISO_TESTS=1: not installing genisoimage and xorriso"
else
  for pair in isoinfo:genisoimage xorriso:xorriso; do
    bin=${pair%%:*} pkg=${pair#*:}
    if command -v "$bin" >/dev/null 2>&1; then
      echo "install-test-deps: $pkg already installed: $(command -v "$bin")"
    else
      apt_install "$pkg"
    fi
  done
fi

# keepalived: the tests start their own, in their own namespaces; the
# package's service would hold a VRRP instance on this machine.
if [ "${SKIP_VRRP_TESTS:-}" = 1 ]; then
  echo "install-test-deps: SKIP_VRRP_TESTS=1: not installing keepalived"
elif [ -x /usr/sbin/keepalived ]; then
  echo "install-test-deps: keepalived already installed: /usr/sbin/keepalived ($(/usr/sbin/keepalived --version 2>&1 | head -n1))"
else
  apt_install keepalived
  echo "install-test-deps: installed /usr/sbin/keepalived ($(/usr/sbin/keepalived --version 2>&1 | head -n1))"
fi
if [ -x /usr/sbin/keepalived ]; then quiet_service keepalived; fi

# libvirt's schema check: clients and XML tools, no service.
if [ "${SKIP_LIBVIRT_SCHEMA_TESTS:-}" = 1 ]; then
  echo "install-test-deps: SKIP_LIBVIRT_SCHEMA_TESTS=1: not installing libvirt-clients and libxml2-utils"
else
  for pair in virt-xml-validate:libvirt-clients xmllint:libxml2-utils; do
    bin=${pair%%:*} pkg=${pair#*:}
    if command -v "$bin" >/dev/null 2>&1; then
      echo "install-test-deps: $pkg already installed: $(command -v "$bin")"
    else
      apt_install "$pkg"
    fi
  done
fi

# Stop and disable a system Squid service if the package (or an earlier run
# without the policy) started one; the tests never use it.
if [ -x /usr/sbin/squid ]; then
  quiet_service squid
fi

if [ "${SKIP_CLOUDINIT_TESTS:-}" = 1 ]; then
  echo "install-test-deps: SKIP_CLOUDINIT_TESTS=1: not installing cloud-init"
else
  if command -v cloud-init >/dev/null 2>&1; then
    echo "install-test-deps: cloud-init already installed: $(command -v cloud-init) ($(cloud-init --version 2>&1))"
  else
    # Written before the install, so cloud-init is off from its first moment:
    # its systemd generator reads this file at boot and enables nothing.
    $SUDO mkdir -p /etc/cloud
    $SUDO touch /etc/cloud/cloud-init.disabled
    apt_install cloud-init
    echo "install-test-deps: installed $(command -v cloud-init) ($(cloud-init --version 2>&1))"
  fi
  # Kept on every run, in case something removed it.
  if [ ! -e /etc/cloud/cloud-init.disabled ]; then
    echo "install-test-deps: writing /etc/cloud/cloud-init.disabled"
    $SUDO touch /etc/cloud/cloud-init.disabled
  fi
  # The tests only run `cloud-init schema`; no cloud-init unit may be
  # enabled or running on this machine. systemctl disable works on the unit
  # files without a running systemd too.
  for unit in cloud-init-local.service cloud-init.service cloud-config.service cloud-final.service \
    cloud-init-hotplugd.socket; do
    [ -e "/lib/systemd/system/$unit" ] || [ -e "/usr/lib/systemd/system/$unit" ] || continue
    if have_systemd && systemctl is-active --quiet "$unit" 2>/dev/null; then
      echo "install-test-deps: stopping $unit"
      $SUDO systemctl stop "$unit"
    fi
    if [ "$(systemctl is-enabled "$unit" 2>/dev/null)" = enabled ]; then
      echo "install-test-deps: disabling $unit"
      $SUDO systemctl disable "$unit" 2>/dev/null || true
    fi
  done
fi
echo "install-test-deps: done"
