#!/usr/bin/env bash
# Regenerate hack/tools/kube-apiserver/go.mod for a new Kubernetes version.
# usage: hack/tools/gen-kube-apiserver-mod.sh 1.37.2
set -euo pipefail
K=${1:?k8s version, e.g. 1.37.2}; S=0.${K#1.}
dir=$(cd "$(dirname "$0")/kube-apiserver" && pwd)
modfile=$(go mod download -json "k8s.io/kubernetes@v$K" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
{
  printf 'module github.com/egress-proxies-operator/egress-proxies-operator/hack/tools/kube-apiserver\n\ngo %s\n\n' "$(awk '$1=="go"{print $2}' "$modfile")"
  printf 'tool k8s.io/kubernetes/cmd/kube-apiserver\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K"
  # every staging module k8s.io/kubernetes replaces with ./staging/...; skip ones never published
  sed -n '/^replace (/,/^)/p' "$modfile" | awk '/=> *\.\/staging/{print $1}' | grep -v -e sample-cli-plugin -e sample-controller |
    while read -r m; do printf '\t%s => %s v%s\n' "$m" "$m" "$S"; done
  printf ')\n'
} > "$dir/go.mod"
rm -f "$dir/go.sum"
(cd "$dir" && GOWORK=off go mod tidy)
