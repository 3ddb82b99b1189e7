#!/usr/bin/env bash
# Loses the e2e cluster's second node (CLUSTER_NODES=2) as a machine that
# stops loses it: SIGKILL to its kubelet, to every process in its cgroups
# (its Pods' containers), to its containerd and its shims. Nothing tells the
# API server: the Node object and its Pods stay as they were, until the
# node lifecycle controller finds the node's heartbeats missing. Used by
# test/e2e's ProxyGroupNodeLost (make drill-node-lost); down.sh removes
# what is left (mounts, cgroups). Needs root.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "cluster: lose-node needs root" >&2; exit 1; }
cluster_node -b
pid_alive kubelet-b || { echo "cluster: node $n_name is not up (CLUSTER_NODES=2 make cluster-up)" >&2; exit 1; }
kill -KILL "$(cat "$state/pids/kubelet-b.pid")" || true
# shellcheck disable=SC2046 # one argument per directory
kill_cgroup_procs $(node_cgroup_dirs -b)
kill_shims "$n_sock"
if pid_alive containerd-b; then kill -KILL "$(cat "$state/pids/containerd-b.pid")" || true; fi
log "node $n_name lost: its kubelet, containers, shims and containerd killed"
