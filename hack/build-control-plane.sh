#!/usr/bin/env bash
# Builds kube-apiserver and etcd for envtest from the Go module proxy, once per
# version, into a cache outside the work tree. A second run is a no-op.
# setup-envtest's prebuilt downloads are unreachable here, hence the build.
#
# Modes: build (default) kube-apiserver and etcd for envtest; path prints the
# directory; cluster also builds kube-controller-manager, kube-scheduler,
# kubelet and kubectl (for the e2e cluster, hack/cluster/) into the same
# directory, in one go build so the packages they share compile once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kmod=$root/hack/tools/kube-apiserver
emod=$root/hack/tools/etcd
k8s=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$kmod/go.mod")
etcd=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$emod/go.mod")
major=${k8s#v}; major=${major%%.*}
minor=${k8s#v*.}; minor=${minor%%.*}
cache=${ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies-operator/envtest}
dest=$cache/k8s-$k8s-etcd-$etcd
mode=${1:-build}
if [ "$mode" = path ]; then echo "$dest"; exit 0; fi
mkdir -p "$dest"

export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

# progress: a line every 30 s while a long build runs, so CI logs show life.
with_progress() {
  local what=$1; shift
  local start=$SECONDS
  "$@" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30 & wait $! || true
    kill -0 "$pid" 2>/dev/null && echo "  ... still building $what ($((SECONDS-start))s)"
  done
  wait "$pid"
  echo "  built $what in $((SECONDS-start))s"
}

ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$k8s -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done

if [ ! -x "$dest/kube-apiserver" ]; then
  echo "building kube-apiserver $k8s into $dest (10-30 min on a cold 2-core machine)"
  with_progress kube-apiserver go build -C "$kmod" -trimpath -ldflags="$ldflags" -o "$dest/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  # Read the whole output first: grep -q closing the pipe early would kill
  # the writer with SIGPIPE, which pipefail turns into a failed build.
  got=$("$dest/kube-apiserver.tmp" --version)
  [ "$got" = "Kubernetes $k8s" ] || { echo "kube-apiserver reports '$got', want 'Kubernetes $k8s'" >&2; exit 1; }
  mv -f "$dest/kube-apiserver.tmp" "$dest/kube-apiserver"
fi
if [ ! -x "$dest/etcd" ]; then
  echo "building etcd $etcd into $dest"
  with_progress etcd go build -C "$emod" -trimpath -ldflags="-s -w" -o "$dest/etcd.tmp" go.etcd.io/etcd/server/v3
  got=$("$dest/etcd.tmp" --version)
  case "$got" in *"etcd Version: ${etcd#v}"*) ;; *) echo "etcd reports '$got', want ${etcd#v}" >&2; exit 1 ;; esac
  mv -f "$dest/etcd.tmp" "$dest/etcd"
fi
if [ "$mode" = cluster ]; then
  # Only the missing ones; one go build with -o to a directory writes one
  # binary per main package, sharing the compile of common packages.
  want=() pkgs=()
  for b in kube-controller-manager kube-scheduler kubelet kubectl; do
    [ -x "$dest/$b" ] || { want+=("$b"); pkgs+=("k8s.io/kubernetes/cmd/$b"); }
  done
  if [ ${#want[@]} -gt 0 ]; then
    tmp=$dest/.cluster-build.tmp
    rm -rf "$tmp"; mkdir -p "$tmp"
    echo "building ${want[*]} $k8s into $dest (25 min with an empty build cache on a busy 2-core machine, 4 min once kube-apiserver's packages are cached)"
    with_progress "${want[*]}" go build -C "$kmod" -trimpath -ldflags="$ldflags" -o "$tmp/" "${pkgs[@]}"
    for b in "${want[@]}"; do
      if [ "$b" = kubectl ]; then got=$("$tmp/$b" version --client 2>&1); want_v="Client Version: $k8s"
      else got=$("$tmp/$b" --version 2>&1); want_v="Kubernetes $k8s"; fi
      case "$got" in *"$want_v"*) ;; *) echo "$b reports '$got', want '$want_v'" >&2; exit 1 ;; esac
    done
    for b in "${want[@]}"; do mv -f "$tmp/$b" "$dest/$b"; done
    rm -rf "$tmp"
  fi
fi
if [ "${BUILD_KUBECTL:-0}" = 1 ] && [ ! -x "$dest/kubectl" ]; then
  echo "building kubectl $k8s into $dest"
  with_progress kubectl go build -C "$kmod" -trimpath -ldflags="$ldflags" -o "$dest/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
  mv -f "$dest/kubectl.tmp" "$dest/kubectl"
fi
echo "$dest"
