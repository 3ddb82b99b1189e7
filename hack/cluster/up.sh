#!/usr/bin/env bash
# Brings up the e2e cluster: one node on this machine (two with
# CLUSTER_NODES=2: lib.sh), every process started here, everything under
# $state (lib.sh; default /tmp/egress-cluster).
#   etcd, kube-apiserver            the envtest binaries (build-control-plane.sh)
#   kube-controller-manager         garbage collector, service-account tokens, ...
#   kube-scheduler
#   containerd + runc               Debian's, own root/state/socket, CRI plugin on
#   kubelet                         node $node_name, Ready (and $node_name-b, its own
#                                   containerd and kubelet, with CLUSTER_NODES=2)
#   CNI                             bridge $bridge + host-local on $pod_subnet:
#                                   no masquerade, no NAT, no route off the machine
# No kube-proxy and no DNS: Pods reach each other by Pod IP; of the
# ClusterIPs only the "kubernetes" Service's answers, because kube-apiserver
# listens on it ($service_ip:$apiserver_port, an address on the bridge), so
# in-cluster clients (the operator) use their default config.
# Idempotent: a cluster that is already up is left as it is; a half-up one
# is taken down first. Prints the kubeconfig path last. Needs root.
# CLUSTER_CONTROLLERS overrides kube-controller-manager's --controllers
# (default '*'; e.g. '*,-garbage-collector-controller' to show that
# hack/cluster/smoke.sh fails without the garbage collector).
# CLUSTER_KEEP_ON_FAILURE=1 leaves a failed start as it is for a look.
set -Eeuo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
start=$SECONDS

[ "$(id -u)" = 0 ] || { echo "cluster: up needs root (bridge, cgroups, containerd)" >&2; exit 1; }

components=(etcd kube-apiserver kube-controller-manager kube-scheduler)
for sfx in "${node_suffixes[@]}"; do components+=("containerd$sfx" "kubelet$sfx"); done
all_up() {
  local c
  for c in "${components[@]}"; do pid_alive "$c" || return 1; done
  "${kubectl_cmd[@]}" get --raw /readyz >/dev/null 2>&1
}
if all_up; then
  log "already up ($state)"
  echo "KUBECONFIG=$kubeconfig"
  exit 0
fi
if [ -e "$state" ] || ip link show "$bridge" >/dev/null 2>&1; then
  log "a half-up cluster is in the way: taking it down first"
  "$here/down.sh"
fi

"$here/install.sh"
"$root/hack/build-control-plane.sh" cluster
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  [ -x "$bin/$b" ] || { echo "cluster: $bin/$b missing after build-control-plane.sh cluster" >&2; exit 1; }
done

on_failure() {
  local rc=$?
  echo "cluster: up failed (exit $rc); last log lines:" >&2
  for f in "$state"/logs/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f" >&2; tail -n 15 "$f" >&2
  done
  if [ "${CLUSTER_KEEP_ON_FAILURE:-0}" = 1 ]; then
    echo "cluster: CLUSTER_KEEP_ON_FAILURE=1: left as it is; make cluster-down removes it" >&2
  else
    "$here/down.sh" >&2 || true
  fi
  exit "$rc"
}
trap on_failure ERR

mkdir -p "$state"/{pki,logs,pids,etcd,images}
chmod 0700 "$state/pki"

# What down.sh must put back: the sysctls kubelet rewrites at start
# (setupKernelTunables: overcommit, panic, keys) and ip_forward, and which
# of kubelet's iptables chains were there before (those it leaves alone).
for k in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward; do
  echo "$k=$(sysctl -n "$k")"
done >"$state/sysctl.saved"
{ iptables-save 2>/dev/null | sed -n 's/^:\(KUBE-[A-Z-]*\) .*/ipv4 \1/p'
  ip6tables-save 2>/dev/null | sed -n 's/^:\(KUBE-[A-Z-]*\) .*/ipv6 \1/p'; } | sort -u >"$state/iptables-chains.before"

for d in "${kubelet_host_dirs[@]}"; do [ -e "$d" ] || echo "$d"; done >"$state/host-dirs.created"

# --- certificates: a CA, one client certificate per component, serving
# certificates for kube-apiserver and kubelet, the service-account key pair.
pki=$state/pki
log "certificates"
openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key" 2>/dev/null
openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=egress-e2e-ca" -days 7 -out "$pki/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
# cert NAME SUBJECT [SANS]: $pki/NAME.{key,crt}, signed by the CA.
cert() {
  local name=$1 subj=$2 sans=${3:-}
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$name.key" 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -z "$sans" ] || echo "subjectAltName=$sans"
  } >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 7 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}
cert apiserver "/CN=kube-apiserver" \
  "IP:$node_ip,IP:127.0.0.1,IP:$service_ip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert admin "/O=system:masters/CN=egress-e2e-admin"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

# write_kubeconfig FILE CERTNAME
write_kubeconfig() {
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: egress-e2e
  cluster:
    server: https://$service_ip:$apiserver_port
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: egress-e2e
  context: {cluster: egress-e2e, user: $2}
current-context: egress-e2e
KC
  chmod 0600 "$1"
}
write_kubeconfig "$kubeconfig" admin
write_kubeconfig "$state/controller-manager.kubeconfig" controller-manager
write_kubeconfig "$state/scheduler.kubeconfig" scheduler

# run NAME CMD...: starts CMD in its own session, detached from this
# shell, output to $state/logs/NAME.log, PID to $state/pids/NAME.pid.
run() {
  local name=$1; shift
  setsid "$@" </dev/null >"$state/logs/$name.log" 2>&1 &
  echo $! >"$state/pids/$name.pid"
}
# wait_until DESC SECONDS CMD...: polls CMD every second.
wait_until() {
  local desc=$1 limit=$2 t0=$SECONDS; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $((SECONDS - t0)) -ge "$limit" ]; then
      echo "cluster: $desc: not after ${limit}s" >&2; return 1
    fi
    if [ -n "${watch_pid:-}" ] && ! pid_alive "$watch_pid"; then
      echo "cluster: $desc: $watch_pid exited" >&2; return 1
    fi
    sleep 1
  done
  log "$desc ($((SECONDS - t0))s)"
}

# --- the bridge, made here with the node's address and the "kubernetes"
# Service's, so kubelet and kube-apiserver can listen on them before any
# Pod exists. The CNI bridge plugin
# finds it by name and only attaches the Pods' veths.
ip link add "$bridge" type bridge
ip addr add "$node_ip/24" dev "$bridge"
ip addr add "$service_ip/32" dev "$bridge"
for sfx in "${node_suffixes[@]}"; do
  cluster_node "$sfx"; [ "$n_ip" = "$node_ip" ] || ip addr add "$n_ip/24" dev "$bridge"
done
ip link set "$bridge" up

# --- etcd, kube-apiserver
watch_pid=etcd
run etcd "$bin/etcd" --name e2e --data-dir "$state/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_client_port" --advertise-client-urls "http://127.0.0.1:$etcd_client_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "e2e=http://127.0.0.1:$etcd_peer_port" --unsafe-no-fsync
wait_until "etcd healthy" 60 curl -fsS "http://127.0.0.1:$etcd_client_port/health"

watch_pid=kube-apiserver
run kube-apiserver "$bin/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_client_port" \
  --bind-address "$service_ip" --advertise-address "$service_ip" --secure-port "$apiserver_port" \
  --cert-dir "$state/apiserver" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-cluster-ip-range "$service_cidr" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
  --profiling=false
wait_until "kube-apiserver ready" 120 "${kubectl_cmd[@]}" get --raw /readyz

# --- controller-manager, scheduler (one of each: no leader election)
watch_pid=kube-controller-manager
run kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig "$state/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$state/controller-manager.kubeconfig" --authorization-kubeconfig "$state/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10257 --cert-dir "$state/controller-manager" \
  --flex-volume-plugin-dir "$state/controller-manager/volume-plugins" \
  --leader-elect=false --use-service-account-credentials \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --controllers "${CLUSTER_CONTROLLERS:-*}" --profiling=false
watch_pid=kube-scheduler
run kube-scheduler "$bin/kube-scheduler" \
  --kubeconfig "$state/scheduler.kubeconfig" \
  --authentication-kubeconfig "$state/scheduler.kubeconfig" --authorization-kubeconfig "$state/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false
watch_pid=kube-controller-manager
wait_until "kube-controller-manager healthy" 60 curl -fsSk https://127.0.0.1:10257/healthz
watch_pid=kube-scheduler
wait_until "kube-scheduler healthy" 60 curl -fsSk https://127.0.0.1:10259/healthz

# start_node SUFFIX: the node's containerd (its own root, state and
# socket; the CRI plugin uses the local pause image and the node's CNI
# config), the images, and its kubelet, Ready (lib.sh's cluster_node).
start_node() {
  cluster_node "$1"
  local sfx=$1
  mkdir -p "$n_dir"/{containerd,cni/net.d,cni/ipam,kubelet,pod-logs}
  cat >"$n_dir/containerd/config.toml" <<TOML
version = 2
root = "$n_dir/containerd/root"
state = "$n_dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$n_sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$n_dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  netns_mounts_under_state_dir = true
  # No CAP_SYS_RESOURCE on this kind of machine: a Pod may not get a lower
  # oom_score_adj than containerd's own (runc fails with "can't get final
  # child's PID from pipe" otherwise).
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$n_dir/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "$n_dir/containerd/runc"
        SystemdCgroup = false
TOML
  # bridge + host-local, nothing else: no portmap, no masquerade, no default
  # route; besides the subnet's own, one route to the API server's address
  # through the first node (delivered locally: nothing is forwarded).
  # isGateway false: the bridge already has the node's address, and the
  # plugin then leaves ip_forward alone. Each node hands out its own part
  # of the subnet from its own dataDir.
  cat >"$n_dir/cni/net.d/10-egress-e2e.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "egress-e2e$sfx",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$n_dir/cni/ipam",
        "ranges": [[{"subnet": "$pod_subnet", "rangeStart": "$pod_net.$n_first", "rangeEnd": "$pod_net.$n_last", "gateway": "$node_ip"}]],
        "routes": [{"dst": "$service_ip/32", "gw": "$node_ip"}]
      }
    }
  ]
}
JSON
  watch_pid=containerd$sfx
  run "containerd$sfx" containerd --config "$n_dir/containerd/config.toml"
  local ctr=(ctr -a "$n_sock" -n k8s.io)
  wait_until "containerd$sfx serving" 60 "${ctr[@]}" version
  for img in pause busybox; do "${ctr[@]}" images import "$state/images/$img.tar" >/dev/null; done
  log "imported $pause_image and $busybox_image into containerd$sfx's k8s.io namespace"

  # kubelet, in its own cgroup root under every v1 hierarchy.
  for h in /sys/fs/cgroup/*/; do
    case "$h" in */unified/) continue ;; esac
    mkdir -p "$h$n_cgroup"
    if [ -f "${h}cpuset.cpus" ]; then
      cat "${h}cpuset.cpus" >"$h$n_cgroup/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h$n_cgroup/cpuset.mems"
    fi
  done
  cert "kubelet$sfx" "/O=system:nodes/CN=system:node:$n_name"
  cert "kubelet$sfx-serving" "/CN=$n_name" "IP:$n_ip,DNS:$n_name"
  write_kubeconfig "$state/kubelet$sfx.kubeconfig" "kubelet$sfx"
  cat >"$n_dir/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $n_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $n_healthz
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet$sfx-serving.crt
tlsPrivateKeyFile: $pki/kubelet$sfx-serving.key
cgroupDriver: cgroupfs
cgroupRoot: /$n_cgroup
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$n_sock
imageServiceEndpoint: unix://$n_sock
podLogsDir: $n_dir/pod-logs
volumePluginDir: $n_dir/kubelet/volume-plugins
resolvConf: $state/resolv.conf
clusterDomain: cluster.local
maxPods: 30
serializeImagePulls: false
rotateCertificates: false
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
YAML
  watch_pid=kubelet$sfx
  run "kubelet$sfx" "$bin/kubelet" --config "$n_dir/kubelet/config.yaml" --kubeconfig "$state/kubelet$sfx.kubeconfig" \
    --root-dir "$n_dir/kubelet" --cert-dir "$n_dir/kubelet/pki" \
    --hostname-override "$n_name" --node-ip "$n_ip"
  wait_until "kubelet$sfx healthy" 120 curl -fsS "http://127.0.0.1:$n_healthz/healthz"
  wait_until "node $n_name Ready" 180 "${kubectl_cmd[@]}" wait --for=condition=Ready "node/$n_name" --timeout=5s
}

"$here/images.sh" "$state/images"
# Pods resolve nothing unless a test serves DNS on the node's bridge
# address (test/e2e's PartnerAPISample does, for its own names): nothing
# else listens there, and nothing forwards a query anywhere.
echo "nameserver $node_ip" >"$state/resolv.conf"
for sfx in "${node_suffixes[@]}"; do start_node "$sfx"; done
watch_pid=
wait_until "default ServiceAccount" 60 "${kubectl_cmd[@]}" -n default get serviceaccount default
trap - ERR
log "up in $((SECONDS - start))s: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet; node(s) $("${kubectl_cmd[@]}" get nodes -o name | sed 's|^node/||' | paste -sd' '); Pods on $pod_subnet (bridge $bridge), API server https://$service_ip:$apiserver_port"
echo "KUBECONFIG=$kubeconfig"
