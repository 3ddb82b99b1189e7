#!/usr/bin/env bash
# Takes the e2e cluster down and removes everything it made: its processes
# (by the PIDs up.sh recorded, checked against the state directory on their
# command line), every container (by the PIDs in its cgroups), containerd's
# shims (by their socket argument), the mounts under $state (overlays, shm,
# Pod network namespaces, volumes), kubelet's cgroups, the bridge, the
# iptables chains kubelet added, kubelet's /var/log/containers links, and
# the state directory. Restores the sysctls kubelet rewrote.
# Idempotent: with nothing up it does nothing. Needs root.
# CLUSTER_LOG_ARCHIVE=DIR copies the components' logs there first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

[ "$(id -u)" = 0 ] || { echo "cluster: down needs root" >&2; exit 1; }

# Every node's (lib.sh: a second one may have run whatever CLUSTER_NODES says now).
cgroup_dirs() { node_cgroup_dirs "${all_node_suffixes[@]}"; }
if [ ! -e "$state" ] && ! ip link show "$bridge" >/dev/null 2>&1 && [ -z "$(cgroup_dirs)" ]; then
  log "nothing to take down"
  exit 0
fi
t0=$SECONDS

# stop NAME...: SIGTERM to each (only if the PID is ours), up to 15 s for
# all of them, then SIGKILL to what is left.
stop() {
  local name pid i left names=() pids=()
  for name in "$@"; do
    pid_alive "$name" || continue
    pid=$(cat "$state/pids/$name.pid")
    kill -TERM "$pid" 2>/dev/null || true
    names+=("$name") pids+=("$pid")
  done
  [ ${#names[@]} -gt 0 ] || return 0
  for i in $(seq 1 60); do
    left=0
    for name in "${names[@]}"; do pid_alive "$name" && left=1; done
    [ "$left" = 1 ] || break
    sleep 0.25
  done
  for i in "${!names[@]}"; do
    if pid_alive "${names[$i]}"; then
      log "${names[$i]} (${pids[$i]}) did not stop on SIGTERM: SIGKILL"; kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
    log "stopped ${names[$i]} (${pids[$i]})"
  done
}

if [ -n "${CLUSTER_LOG_ARCHIVE:-}" ] && [ -d "$state/logs" ]; then
  mkdir -p "$CLUSTER_LOG_ARCHIVE" && cp -a "$state/logs/." "$CLUSTER_LOG_ARCHIVE/"
fi

# kubelet first, so nothing restarts the containers; then the containers,
# through containerd while it still runs.
# shellcheck disable=SC2046 # one name per node
stop $(printf 'kubelet%s ' "${all_node_suffixes[@]}")
for sfx in "${all_node_suffixes[@]}"; do
  pid_alive "containerd$sfx" || continue
  cluster_node "$sfx"
  ctr=(ctr -a "$n_sock" -n k8s.io)
  for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
    "${ctr[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
    "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
  done
done
# Whatever is left in kubelet's cgroups is a container process of ours.
# shellcheck disable=SC2046 # one argument per directory
kill_cgroup_procs $(cgroup_dirs)
# shellcheck disable=SC2046 # one name per node
stop $(printf 'containerd%s ' "${all_node_suffixes[@]}")
kill_shims "$state/*containerd.sock"
stop kube-scheduler kube-controller-manager kube-apiserver
stop etcd

# Mounts under the state directory, deepest first (Pod netns, shm, overlay
# rootfs, kubelet's volumes).
if [ -e "$state" ]; then
  for _ in 1 2 3; do
    mounts=$(awk -v s="$state/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r)
    [ -n "$mounts" ] || break
    for m in $mounts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
fi

# kubelet's cgroups, leaves first.
for d in $(cgroup_dirs); do
  find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  [ ! -d "$d" ] || log "warning: $d is still there (processes left in it?)"
done

if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge"; log "deleted bridge $bridge"; fi

# kubelet's iptables chains (initNetworkUtil): KUBE-IPTABLES-HINT,
# KUBE-KUBELET-CANARY, and KUBE-FIREWALL with its INPUT/OUTPUT jumps; only
# the ones that were not there before up.sh.
before=$state/iptables-chains.before
had() { [ -f "$before" ] && grep -qx "$1 $2" "$before"; }
for fam in ipv4 ipv6; do
  ipt=iptables; [ "$fam" = ipv4 ] || ipt=ip6tables
  command -v "$ipt" >/dev/null 2>&1 || continue
  if ! had "$fam" KUBE-FIREWALL && $ipt -t filter -S KUBE-FIREWALL >/dev/null 2>&1; then
    while $ipt -t filter -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
    while $ipt -t filter -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
    $ipt -t filter -F KUBE-FIREWALL && $ipt -t filter -X KUBE-FIREWALL && log "removed $fam filter KUBE-FIREWALL"
  fi
  for chain in mangle:KUBE-IPTABLES-HINT mangle:KUBE-KUBELET-CANARY nat:KUBE-KUBELET-CANARY filter:KUBE-KUBELET-CANARY; do
    t=${chain%%:*} c=${chain#*:}
    had "$fam" "$c" && continue
    if $ipt -t "$t" -S "$c" >/dev/null 2>&1; then
      $ipt -t "$t" -F "$c" && $ipt -t "$t" -X "$c" && log "removed $fam $t $c"
    fi
  done
done

if [ -f "$state/sysctl.saved" ]; then
  while IFS='=' read -r k v; do
    [ "$(sysctl -n "$k")" = "$v" ] || { sysctl -qw "$k=$v"; log "restored $k=$v"; }
  done <"$state/sysctl.saved"
fi

# kubelet links every container's log into /var/log/containers.
if [ -d /var/log/containers ]; then
  for l in /var/log/containers/*.log; do
    [ -L "$l" ] || continue
    case "$(readlink "$l")" in "$state"/*) rm -f "$l" ;; esac
  done
fi

# What kubelet made outside its root dir, where up.sh found nothing.
if [ -f "$state/host-dirs.created" ]; then
  while read -r d; do
    case "$d" in /var/lib/kubelet) rm -rf "$d" ;; /var/log/containers) rmdir "$d" 2>/dev/null || true ;; esac
  done <"$state/host-dirs.created"
fi

# libcni caches each attachment's result in /var/lib/cni/results (not
# configurable in containerd 1.6): ours are named after our network, or
# after one of our sandboxes for containerd's loopback.
if [ -d /var/lib/cni/results ]; then
  for f in /var/lib/cni/results/*; do
    [ -e "$f" ] || continue
    n=${f##*/}
    case "$n" in
      egress-e2e-*) rm -f "$f" ;;
      cni-loopback-*-lo)
        id=${n#cni-loopback-}; id=${id%-lo}
        for sfx in "${all_node_suffixes[@]}"; do
          cluster_node "$sfx"
          [ ! -d "$n_dir/containerd/root/io.containerd.grpc.v1.cri/sandboxes/$id" ] || rm -f "$f"
        done ;;
    esac
  done
fi
# Directories containerd's shims (/run/containerd/{s,fifo,runc}, fixed in
# 1.6) and libcni make outside the state directory: removed only when they
# hold no file at all and no other containerd runs (another one on this
# machine shares /run/containerd).
other_containerd() {
  local p
  for p in /proc/[0-9]*; do [ "$(readlink "$p/exe" 2>/dev/null)" = /usr/bin/containerd ] && return 0; done
  return 1
}
[ -d /var/lib/cni ] && [ -z "$(find /var/lib/cni -not -type d)" ] && rm -rf /var/lib/cni
if [ -d /run/containerd ] && [ -z "$(find /run/containerd -not -type d)" ] && ! other_containerd; then rm -rf /run/containerd; fi

rm -rf "$state"
log "down in $((SECONDS - t0))s"
