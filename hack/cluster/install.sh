#!/usr/bin/env bash
# Installs what the e2e cluster (hack/cluster/up.sh) needs from Debian:
# containerd (the CRI runtime kubelet talks to), runc (its OCI runtime),
# containernetworking-plugins (bridge, host-local, loopback) and
# busybox-static (the test images' only binary; hack/cluster/images.sh).
# kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kubelet and
# kubectl come from hack/build-control-plane.sh cluster, not from here.
#
# No service may start: the cluster runs its own containerd under its state
# directory and a system one would hold /run/containerd. So a policy-rc.d
# answering 101 is in place during the install (removed again if we wrote
# it), and a containerd service the package started is stopped.
# Idempotent: a second run installs nothing. Needs root (or sudo).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
have_systemd() { command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; }

# binary:package pairs; a package is installed only when its binary is missing.
pairs=(
  /usr/bin/containerd:containerd
  /usr/sbin/runc:runc
  /usr/lib/cni/bridge:containernetworking-plugins
  /bin/busybox:busybox-static
)
missing=()
for pair in "${pairs[@]}"; do
  bin=${pair%%:*} pkg=${pair#*:}
  if [ "$pkg" = busybox-static ]; then
    # busybox (dynamic) also installs /bin/busybox; the images need the static one.
    # (Debian's busybox-static replaces the busybox package when installed.)
    if [ "$(dpkg-query -W -f='${Status}' busybox-static 2>/dev/null)" = "install ok installed" ]; then
      echo "cluster-install: $pkg already installed: $bin"
    else
      missing+=("$pkg")
    fi
  elif [ -x "$bin" ]; then
    echo "cluster-install: $pkg already installed: $bin"
  else
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  policy=/usr/sbin/policy-rc.d created_policy=0
  if [ ! -e "$policy" ]; then
    echo "cluster-install: writing $policy so the install starts no service"
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 0755 "$policy"
    created_policy=1
  fi
  rc=0
  echo "cluster-install: apt-get update"
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update || rc=$?
  if [ "$rc" = 0 ]; then
    echo "cluster-install: apt-get install -y --no-install-recommends ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" || rc=$?
  fi
  if [ "$created_policy" = 1 ]; then $SUDO rm -f "$policy"; fi
  [ "$rc" = 0 ] || exit "$rc"
fi
# A system containerd would own /run/containerd and the default socket;
# the cluster's own one lives under its state directory instead. The
# package enables its unit; when this script installed it, disable it again
# (systemctl disable works on the unit files without a running systemd) so
# no boot starts it. A containerd that was there before is left alone.
case " ${missing[*]} " in *" containerd "*)
  if have_systemd && systemctl is-active --quiet containerd 2>/dev/null; then
    echo "cluster-install: stopping the containerd service"; $SUDO systemctl stop containerd
  fi
  if [ "$(systemctl is-enabled containerd 2>/dev/null)" = enabled ]; then
    echo "cluster-install: disabling the containerd service"; $SUDO systemctl disable containerd 2>/dev/null || true
  fi
esac
echo "cluster-install: $(containerd --version), $(runc --version | head -n1), $(/usr/lib/cni/bridge --version 2>&1 | head -n1 || true), $(/bin/busybox | head -n1)"
