#!/usr/bin/env bash
# containerd.sh up|down DIR: a private containerd for checking images, with
# no systemd: its socket, root and state all under DIR, so it never meets
# the machine's or a cluster's containerd. up prints the socket; down stops
# it by the PID up recorded and removes DIR. Needs root, containerd and runc
# (Debian's; installed here when missing).
set -euo pipefail
mode=${1:?usage: containerd.sh up|down DIR}
dir=${2:?usage: containerd.sh up|down DIR}
sock=$dir/containerd.sock

case "$mode" in
up)
  if ! command -v containerd >/dev/null || ! command -v runc >/dev/null; then
    echo "installing containerd and runc from Debian" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends containerd runc >&2
  fi
  if [ -f "$dir/containerd.pid" ] && kill -0 "$(cat "$dir/containerd.pid")" 2>/dev/null; then
    echo "$sock"; exit 0
  fi
  mkdir -p "$dir"
  # The CRI plugin is off: nothing here is a kubelet, and it would set up
  # CNI and a streaming server for no use.
  cat > "$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
TOML
  containerd --config "$dir/config.toml" > "$dir/containerd.log" 2>&1 &
  echo $! > "$dir/containerd.pid"
  for _ in $(seq 1 100); do
    if ctr -a "$sock" version >/dev/null 2>&1; then echo "$sock"; exit 0; fi
    kill -0 "$(cat "$dir/containerd.pid")" 2>/dev/null || break
    sleep 0.2
  done
  echo "containerd did not come up; its log:" >&2
  cat "$dir/containerd.log" >&2
  exit 1
  ;;
down)
  [ -d "$dir" ] || exit 0
  if [ -f "$dir/containerd.pid" ]; then
    pid=$(cat "$dir/containerd.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
    fi
  fi
  # Never delete through a mount a container left behind.
  if grep -q " $dir/" /proc/mounts; then
    echo "mounts under $dir remain; leaving it in place:" >&2
    grep " $dir/" /proc/mounts >&2
    exit 1
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: containerd.sh up|down DIR" >&2; exit 2 ;;
esac
