#!/usr/bin/env bash
# make test-e2e: the operator deployed as users deploy it, on the one-node
# e2e cluster (hack/cluster), and the Go end-to-end test (test/e2e) against it.
#   1. make cluster-up                   (etcd, kube-apiserver, controller-manager,
#                                         scheduler, containerd, kubelet; no kube-proxy, no DNS)
#   2. make image / make image-squid     both images built here and imported into the
#                                         cluster's containerd (nothing can be pulled)
#   3. the OpenTelemetry Collector       hack/tools/otelcol: built once per version (cached,
#                                         about 5 min cold), its image imported, test/e2e/otelcol
#                                         applied (a DaemonSet on the node's IP, port 4318)
#   4. kustomize build test/e2e/config | kubectl apply; the Deployment's rollout
#      (the operator exports its traces to the collector: test/e2e/config/otlp_patch.yaml)
#   5. go test ./test/e2e                E2E_RUN selects subtests (go test -run), E2E_TESTFLAGS adds flags
#   6. make cluster-down                 always, also after a failure (E2E_KEEP_CLUSTER=1 keeps it up)
# Needs root (the cluster). Prints each step's time at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=hack/cluster/lib.sh
source hack/cluster/lib.sh
KUSTOMIZE=${KUSTOMIZE:-$root/bin/kustomize-v5.8.1}
k=("${kubectl_cmd[@]}")
operator_ns=egress-proxies-operator-system
deployment=egress-proxies-operator-controller-manager
# The names test/e2e/config uses for the two images.
operator_img=egress-proxies-operator:e2e
squid_img=egress-proxies-operator/squid:e2e
otelcol_img=egress-proxies-operator/otelcol:e2e
otelcol_ns=otel-e2e

timings=()
step_start=$SECONDS
step() { printf '\n== e2e [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; step_start=$SECONDS; }
took() { timings+=("$(printf '%-44s %4ss' "$1" "$((SECONDS - step_start))")"); }

finish() {
  local rc=$?
  set +e
  if [ "$rc" != 0 ] && [ -f "$kubeconfig" ]; then
    echo "e2e: FAILED (exit $rc); the operator's state:" >&2
    "${k[@]}" -n "$operator_ns" get pods -o wide >&2
    for p in $("${k[@]}" -n "$operator_ns" get pods -o name 2>/dev/null); do
      echo "--- $p" >&2; "${k[@]}" -n "$operator_ns" logs "$p" --tail=40 >&2
    done
    "${k[@]}" get proxies -A -o wide >&2
    echo "--- the collector's own log (its OTLP JSON lines left out)" >&2
    "${k[@]}" -n "$otelcol_ns" logs -l app.kubernetes.io/name=otelcol --tail=-1 2>&1 | grep -v '^{' | tail -n 20 >&2
  fi
  if [ "${E2E_KEEP_CLUSTER:-0}" = 1 ]; then
    echo "e2e: E2E_KEEP_CLUSTER=1: the cluster stays up (KUBECONFIG=$kubeconfig); make cluster-down removes it"
  else
    step "make cluster-down"
    make --no-print-directory cluster-down
    took "cluster down"
  fi
  echo
  echo "e2e: timings"
  printf '  %s\n' "${timings[@]}"
  exit "$rc"
}
trap finish EXIT

step "make cluster-up"
make --no-print-directory cluster-up
took "cluster up"

step "images: make image and make image-squid, imported into the cluster's containerd"
# Every node's containerd (two with CLUSTER_NODES=2: hack/cluster/lib.sh).
sock=$(for sfx in "${node_suffixes[@]}"; do cluster_node "$sfx"; echo "$n_sock"; done | paste -sd' ')
make --no-print-directory image IMG="$operator_img" IMAGE_LOAD="$sock"
make --no-print-directory image-squid SQUID_IMG="$squid_img" IMAGE_LOAD="$sock"
echo "e2e: operator image $operator_img $(cat bin/image/manager.digest), Squid image $squid_img $(cat bin/image/squid.digest)"
"${ctr_cmd[@]}" images ls | grep -E "egress-proxies-operator|REF"
took "images (build + import)"

step "the OpenTelemetry Collector (hack/tools/otelcol): built (cached), its image imported, test/e2e/otelcol applied"
otelcol_start=$SECONDS
otelcol_bin=$(hack/tools/otelcol/build.sh | tail -n 1)
timings+=("$(printf '%-44s %4ss' "collector build (hack/tools/otelcol)" "$((SECONDS - otelcol_start))")")
OTELCOL_IMG="$otelcol_img" IMAGE_LOAD="$sock" hack/tools/otelcol/image.sh
echo "e2e: collector $("$otelcol_bin" --version), image $otelcol_img $(cat bin/image/otelcol.digest)"
"${k[@]}" apply --server-side -f test/e2e/otelcol/otelcol.yaml
"${k[@]}" -n "$otelcol_ns" rollout status daemonset/otelcol --timeout=120s
took "collector (build + image + deploy)"

step "deploy: kustomize build test/e2e/config | kubectl apply"
"$KUSTOMIZE" build test/e2e/config | "${k[@]}" apply --server-side -f -
if [ ${#node_suffixes[@]} -gt 1 ]; then
  # The operator stays on the first node: the drill (ProxyGroupNodeLost)
  # stops the second, and measures a member's loss, not a leader's.
  "${k[@]}" -n "$operator_ns" patch "deployment/$deployment" --type merge \
    -p "{\"spec\":{\"template\":{\"spec\":{\"nodeSelector\":{\"kubernetes.io/hostname\":\"$node_name\"}}}}}"
fi
"${k[@]}" wait --for=condition=Established crd/proxies.egress.proxy-operator.dev crd/providerhealths.egress.proxy-operator.dev --timeout=60s
"${k[@]}" -n "$operator_ns" rollout status "deployment/$deployment" --timeout=300s
"${k[@]}" -n "$operator_ns" get pods -o wide
took "deploy (apply -> Deployment available)"

step "go test ./test/e2e (E2E_RUN=${E2E_RUN:-all})"
if [ ${#node_suffixes[@]} -gt 1 ]; then
  # ProxyGroupNodeLost's node and how to lose it; it is skipped without.
  cluster_node -b
  export E2E_LOSE_NODE=$root/hack/cluster/lose-node.sh E2E_LOST_NODE=$n_name
fi
# shellcheck disable=SC2086 # E2E_TESTFLAGS is a list of flags
E2E_KUBECONFIG=$kubeconfig E2E_KUBECTL=$bin/kubectl E2E_BUSYBOX_IMAGE=$busybox_image \
  go test ./test/e2e -count=1 -v -timeout 30m -run "TestE2E${E2E_RUN:+/$E2E_RUN}" ${E2E_TESTFLAGS:-}
took "go test ./test/e2e"
