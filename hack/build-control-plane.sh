#!/usr/bin/env bash
# Builds kube-apiserver and etcd for envtest from the Go module proxy, once per
# version, into a cache outside the work tree. A second run is a no-op.
# setup-envtest's prebuilt downloads are unreachable here, hence the build.
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
if [ "${BUILD_KUBECTL:-0}" = 1 ] && [ ! -x "$dest/kubectl" ]; then
  echo "building kubectl $k8s into $dest"
  with_progress kubectl go build -C "$kmod" -trimpath -ldflags="$ldflags" -o "$dest/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
  mv -f "$dest/kubectl.tmp" "$dest/kubectl"
fi
echo "$dest"
