# shellcheck shell=bash disable=SC2034 # sourced: the variables are used by the scripts
# Shared settings of the e2e cluster (sourced by up.sh, down.sh, smoke.sh,
# images.sh, load.sh). Everything the cluster creates lives under $state,
# except what the kernel keeps elsewhere (the bridge, cgroups, sysctls),
# which down.sh removes or restores by these same names.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
state=${CLUSTER_STATE:-/tmp/egress-cluster}
bin=$("$root/hack/build-control-plane.sh" path)

node_name=egress-e2e
# The Pods' subnet is local to this machine: the bridge carries it, no
# route leads anywhere else. The bridge's own address is the node's IP;
# kube-apiserver and kubelet listen there so Pods can reach them.
pod_net=${CLUSTER_POD_NET:-10.244.77}
pod_subnet=$pod_net.0/24
node_ip=$pod_net.1
bridge=egress-e2e0
# Service ClusterIPs are allocated but nothing routes them (no kube-proxy),
# except the first, the "kubernetes" Service's: kube-apiserver listens on
# that very address (on the bridge) and port, and Pods have a route to it
# through the node's address, so in-cluster clients work without NAT.
service_cidr=10.96.77.0/24
service_ip=10.96.77.1
apiserver_port=443
etcd_client_port=12379
etcd_peer_port=12380
# kubelet's cgroups go under this root, in every cgroup v1 hierarchy.
cgroup_root=egress-e2e
# CLUSTER_NODES=2 adds a second node (issue 24's node-lost drill): its own
# containerd and kubelet on this machine, the next address on the same
# bridge (the Pods of both reach each other with no route), the upper half
# of the Pod range. Two kubelets cannot share one containerd (each would
# collect the other's sandboxes as unknown).
node_suffixes=("")
[ "${CLUSTER_NODES:-1}" -lt 2 ] || node_suffixes+=("-b")
all_node_suffixes=("" "-b")
# Names kubelet's Images are imported as (containerd's k8s.io namespace).
pause_image=docker.io/local/pause:e2e
busybox_image=docker.io/local/busybox:e2e

kubeconfig=$state/kubeconfig
ctr_cmd=(ctr -a "$state/containerd/containerd.sock" -n k8s.io)
# cluster_node SUFFIX: the node's settings ("" the first node, "-b" the second):
# n_name, n_ip, n_dir (its containerd, CNI, kubelet and Pod logs under it),
# n_sock, n_cgroup, n_healthz (kubelet's healthz port on 127.0.0.1), the
# Pod addresses it hands out (n_first..n_last); its processes' PID files
# are containerd$SUFFIX and kubelet$SUFFIX.
cluster_node() {
  n_name=$node_name$1 n_cgroup=$cgroup_root$1
  case "$1" in
    "") n_ip=$node_ip n_dir=$state n_healthz=10248 n_first=10 n_last=127 ;;
    -b) n_ip=$pod_net.2 n_dir=$state/node-b n_healthz=10247 n_first=130 n_last=250 ;;
    *) echo "cluster: no node $1" >&2; return 1 ;;
  esac
  n_sock=$n_dir/containerd/containerd.sock
}
# node_cgroup_dirs SUFFIX...: the nodes' kubelet cgroup roots that exist,
# one per cgroup v1 hierarchy.
node_cgroup_dirs() {
  local h sfx
  for sfx in "$@"; do
    for h in /sys/fs/cgroup/*/"$cgroup_root$sfx"; do [ -d "$h" ] && echo "$h"; done
  done
  return 0
}
# kill_cgroup_procs DIR...: SIGKILL to every process in the cgroups under
# the DIRs (a node's containers), up to three rounds half a second apart;
# a cgroup that goes while it is read is no failure.
kill_cgroup_procs() {
  local procs
  for _ in 1 2 3; do
    # shellcheck disable=SC2046 # one argument per cgroup.procs file
    procs=$(cat $(for d in "$@"; do find "$d" -name cgroup.procs 2>/dev/null; done) /dev/null 2>/dev/null | sort -u || true)
    [ -n "$procs" ] || return 0
    # shellcheck disable=SC2086 # one argument per PID
    kill -KILL $procs 2>/dev/null || true
    sleep 0.5
  done
}
# kill_shims PATTERN: SIGKILL to the containerd-shim processes whose
# -address matches PATTERN (a shell pattern: the shims outlive containerd
# by design, and ours name our sockets).
kill_shims() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    # shellcheck disable=SC2254 # $1 is a pattern
    case "$cmd" in *containerd-shim*"-address "$1*)
      log "stopping shim ${p#/proc/}"; kill -KILL "${p#/proc/}" 2>/dev/null || true ;;
    esac
  done
}
kubectl_cmd=("$bin/kubectl" --kubeconfig "$kubeconfig" --cache-dir "$state/kubectl-cache")
# Paths kubelet makes whatever its --root-dir (device-plugins socket, the
# container log links); down.sh removes those up.sh found missing.
kubelet_host_dirs=(/var/lib/kubelet /var/log/containers)

log() { echo "cluster: $*"; }

# pid_alive NAME: the process in $state/pids/NAME.pid runs and is ours
# (its command line names the state directory, so a reused PID is not).
pid_alive() {
  local f=$state/pids/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$state"
}
