#!/usr/bin/env bash
# Imports image archives (docker-archive, or an OCI archive whose index
# names its image) into the running e2e cluster's containerd (each node's,
# with a second node up), in the k8s.io
# namespace kubelet uses, and lists what it now holds. Pods then use the
# image by that name with imagePullPolicy: Never or IfNotPresent (nothing
# can be pulled here).
# usage: hack/cluster/load.sh ARCHIVE...   (CTR_IMPORT_FLAGS=--all-platforms
# for an archive whose config names no platform, as crane's do)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
if [ $# -eq 0 ] || [ -z "$1" ]; then echo "usage: $0 ARCHIVE... (make cluster-load IMAGE_ARCHIVE=path.tar)" >&2; exit 2; fi
pid_alive containerd || { echo "cluster: no e2e cluster is up (make cluster-up)" >&2; exit 1; }
for a in "$@"; do
  [ -f "$a" ] || { echo "cluster: no such archive: $a" >&2; exit 1; }
done
for sfx in "${all_node_suffixes[@]}"; do
  pid_alive "containerd$sfx" || continue
  cluster_node "$sfx"
  for a in "$@"; do
    # shellcheck disable=SC2086
    ctr -a "$n_sock" -n k8s.io images import ${CTR_IMPORT_FLAGS:-} "$a"
  done
  echo "node $n_name:"
  ctr -a "$n_sock" -n k8s.io images ls -q | grep -v "^sha256:"
done
