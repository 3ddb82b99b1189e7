#!/usr/bin/env bash
# Builds the e2e test's OpenTelemetry Collector (this tools module: the otlp
# receiver and the file exporter, main.go) from the Go module proxy, once per
# version, into a cache outside the work tree, and prints the binary's path
# last. A second run is a no-op. About 5 minutes on a cold 2-core machine.
#
#   hack/tools/otelcol/build.sh          build if missing, print the path
#   hack/tools/otelcol/build.sh path     print the path only
#
# The cache key is the collector release (otelcol's version in go.mod) and
# the hash of this module's go.mod, go.sum and main.go plus the Go version,
# so any change to what is built builds anew.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
release=$(awk '$1=="go.opentelemetry.io/collector/otelcol"{print $2}' "$here/go.mod")
[ -n "$release" ] || { echo "otelcol: no go.opentelemetry.io/collector/otelcol in $here/go.mod" >&2; exit 1; }
key=$( (cd "$here" && cat go.mod go.sum main.go; go version) | sha256sum | cut -c1-12)
cache=${OTELCOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies-operator/otelcol}
dest=$cache/$release-$key
bin=$dest/otelcol
if [ "${1:-build}" = path ]; then echo "$bin"; exit 0; fi

if [ ! -x "$bin" ]; then
  mkdir -p "$dest"
  echo "otelcol: building the collector $release ($key) into $dest (about 5 min on a cold 2-core machine)" >&2
  start=$SECONDS
  GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
    go build -C "$here" -trimpath -ldflags="-s -w -X main.version=$release" -o "$bin.tmp" . &
  pid=$!
  # A line every 30 s, so a CI log shows the build is alive.
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30 & wait $! || true
    kill -0 "$pid" 2>/dev/null && echo "otelcol:   ... still building ($((SECONDS - start))s)" >&2
  done
  wait "$pid"
  got=$("$bin.tmp" --version)
  case "$got" in *"$release"*) ;; *) echo "otelcol: the build reports '$got', want $release" >&2; exit 1 ;; esac
  mv -f "$bin.tmp" "$bin"
  echo "otelcol: built $release in $((SECONDS - start))s" >&2
else
  echo "otelcol: $release cached at $bin" >&2
fi
echo "$bin"
