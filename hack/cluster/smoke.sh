#!/usr/bin/env bash
# Smoke check of a running e2e cluster (make cluster-up first):
#  1. the node is Ready;
#  2. a Pod from the locally imported busybox image runs as uid 65532 with a
#     read-only root, under a namespace enforcing Pod Security "restricted",
#     writes to an emptyDir and to its log, and serves HTTP on its Pod IP;
#  3. a second Pod fetches that page by Pod IP over the bridge (no Service:
#     the cluster runs no kube-proxy) and prints the first Pod's token;
#  4. a Pod reaches the API server at the "kubernetes" Service's ClusterIP,
#     and its projected service-account token (read with kubectl exec)
#     authenticates as its ServiceAccount: in-cluster config works;
#  5. deleting an owner ConfigMap makes the garbage collector delete its
#     dependent.
# Exits non-zero on the first check that fails. Traffic stays on the bridge.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
k=("${kubectl_cmd[@]}")
ns=cluster-smoke
token=smoke-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
fail() { echo "cluster-smoke: FAIL: $*" >&2; exit 1; }
ok() { echo "cluster-smoke: ok: $*"; }
[ -f "$kubeconfig" ] || fail "no cluster at $state (make cluster-up)"

cleanup() { "${k[@]}" delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT
if "${k[@]}" get namespace "$ns" >/dev/null 2>&1; then
  "${k[@]}" delete namespace "$ns" --timeout=120s >/dev/null
fi

for sfx in "${node_suffixes[@]}"; do
  cluster_node "$sfx"
  "${k[@]}" wait --for=condition=Ready "node/$n_name" --timeout=60s >/dev/null || fail "node $n_name not Ready"
  ok "node $n_name Ready"
done
# The server on the last node, the clients on the first (the scheduler
# places them by nodeSelector): with a second node (CLUSTER_NODES=2) Pod
# to Pod crosses from one node's Pods to the other's.
server_node=$n_name

"${k[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels:
    pod-security.kubernetes.io/enforce: restricted
YAML
"${k[@]}" -n "$ns" wait --for=create serviceaccount/default --timeout=60s >/dev/null

# restricted_pod NAME RESTARTPOLICY AUTOMOUNT SCRIPT [EXTRA]: a Pod spec
# Pod Security "restricted" admits, on the local busybox image, read-only
# root, running SCRIPT with busybox sh; EXTRA is more of the container.
restricted_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $ns
  labels: {app: $1}
spec:
  nodeSelector: {kubernetes.io/hostname: ${pod_node:-$node_name}}
  restartPolicy: $2
  activeDeadlineSeconds: 300
  automountServiceAccountToken: $3
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: main
    image: $busybox_image
    imagePullPolicy: Never
    command: ["/bin/busybox", "sh", "-c"]
    args:
    - |
$(sed 's/^/      /' <<<"$4")
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
${5:-}
YAML
}

t0=$SECONDS
pod_node=$server_node restricted_pod server Always false '
busybox id
if busybox touch /probe 2>/dev/null; then echo root-writable; else echo root-read-only; fi
echo '"$token"' > /srv/index.html
echo serving
exec busybox httpd -f -p 8080 -h /srv' '    ports: [{containerPort: 8080}]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
    volumeMounts: [{name: srv, mountPath: /srv}]
  volumes: [{name: srv, emptyDir: {}}]' | "${k[@]}" apply -f - >/dev/null
"${k[@]}" -n "$ns" wait --for=condition=Ready pod/server --timeout=120s >/dev/null || {
  "${k[@]}" -n "$ns" describe pod server >&2; fail "Pod server not Ready"; }
ok "Pod server Ready $((SECONDS - t0))s after apply"
ip=$("${k[@]}" -n "$ns" get pod server -o jsonpath='{.status.podIP}')
case "$ip" in "$pod_net".*) ok "Pod server has IP $ip on the bridge ($pod_subnet)" ;; *) fail "Pod server IP '$ip' is not in $pod_subnet" ;; esac
logs=$("${k[@]}" -n "$ns" logs server)
grep -q '^uid=65532' <<<"$logs" || fail "server does not run as uid 65532: $logs"
grep -qx 'root-read-only' <<<"$logs" || fail "server's root is not read-only: $logs"
grep -qx 'serving' <<<"$logs" || fail "server's log lacks its lines: $logs"
ok "server runs as $(grep '^uid=' <<<"$logs" | cut -d' ' -f1), root read-only, its log reached kubectl logs"

t0=$SECONDS
# No wget -T: Debian's busybox-static 1.35 wget segfaults with it; the
# Pod's activeDeadlineSeconds bounds a hang instead.
restricted_pod client Never false "busybox wget -q -O - http://$ip:8080/index.html" | "${k[@]}" apply -f - >/dev/null
"${k[@]}" -n "$ns" wait --for=jsonpath='{.status.phase}'=Succeeded pod/client --timeout=120s >/dev/null || {
  "${k[@]}" -n "$ns" logs client >&2 || true; fail "Pod client did not succeed"; }
got=$("${k[@]}" -n "$ns" logs client)
[ "$got" = "$token" ] || fail "client fetched '$got', want '$token'"
ok "client Pod on node $node_name fetched the server's token from $ip:8080 on node $server_node ($((SECONDS - t0))s)"

# The "kubernetes" Service's ClusterIP answers from a Pod (kube-apiserver
# listens on it): a plain-HTTP request gets Go's TLS server's answer to one.
# (busybox's own TLS cannot talk to it, so no HTTPS from the Pod.) Then the
# Pod's projected service-account token, read through kubectl exec (kubelet's
# streaming), authenticates at the API server as the Pod's ServiceAccount.
t0=$SECONDS
restricted_pod apiclient Always true '
printf "GET / HTTP/1.0\r\n\r\n" | busybox nc "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT"
echo "from $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
exec busybox sleep 3600' | "${k[@]}" apply -f - >/dev/null
"${k[@]}" -n "$ns" wait --for=condition=Ready pod/apiclient --timeout=120s >/dev/null || fail "Pod apiclient not Ready"
apiclient_answered() { "${k[@]}" -n "$ns" logs apiclient | grep -q "from $service_ip:$apiserver_port"; }
for _ in $(seq 1 30); do apiclient_answered && break; sleep 1; done
got=$("${k[@]}" -n "$ns" logs apiclient)
grep -q 'Client sent an HTTP request to an HTTPS server' <<<"$got" || fail "Pod apiclient did not reach the API server at $service_ip:$apiserver_port: $got"
ok "a Pod reached the API server at the kubernetes Service's ClusterIP $service_ip:$apiserver_port"
# The token stays in this variable: never printed.
sa_token=$("${k[@]}" -n "$ns" exec apiclient -- /bin/busybox cat /var/run/secrets/kubernetes.io/serviceaccount/token)
who=$(curl -fsS --cacert "$state/pki/ca.crt" -H "Authorization: Bearer $sa_token" -H 'Content-Type: application/json' \
  -d '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' \
  "https://$service_ip:$apiserver_port/apis/authentication.k8s.io/v1/selfsubjectreviews" | jq -r .status.userInfo.username)
unset sa_token
[ "$who" = "system:serviceaccount:$ns:default" ] || fail "the Pod's token authenticated as '$who'"
ok "the Pod's projected token (read with kubectl exec) authenticates as $who ($((SECONDS - t0))s)"

"${k[@]}" -n "$ns" create configmap owner --from-literal=role=owner >/dev/null
uid=$("${k[@]}" -n "$ns" get configmap owner -o jsonpath='{.metadata.uid}')
"${k[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  namespace: $ns
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: $uid}]
data: {role: dependent}
YAML
"${k[@]}" -n "$ns" get configmap dependent >/dev/null || fail "dependent ConfigMap was not created"
t0=$SECONDS
"${k[@]}" -n "$ns" delete configmap owner --wait >/dev/null
"${k[@]}" -n "$ns" wait --for=delete configmap/dependent --timeout=60s >/dev/null 2>&1 ||
  fail "the garbage collector did not delete ConfigMap dependent of the deleted owner"
ok "garbage collector deleted the dependent ConfigMap $((SECONDS - t0))s after its owner"

"${k[@]}" delete namespace "$ns" --timeout=120s >/dev/null
trap - EXIT
echo "cluster-smoke: PASS"
