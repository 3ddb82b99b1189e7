# Sourced by the hack/image scripts: the pinned image builder and the
# inputs every image's labels and timestamps come from.
# shellcheck shell=bash

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tooldir=$root/hack/tools/imagebuild

# imagebuild_bin prints the path of hack/tools/imagebuild built with its own
# go.mod/go.sum, cached outside the work tree under the hash of its sources
# and the Go version: a second run builds nothing.
imagebuild_bin() {
  local key cache bin
  key=$( (cd "$tooldir" && cat go.mod go.sum $(ls ./*.go | grep -v _test.go); go version) | sha256sum | cut -c1-16)
  cache=${IMAGEBUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies-operator/imagebuild}
  bin=$cache/$key/imagebuild
  if [ ! -x "$bin" ]; then
    echo "building imagebuild ($key) into $cache/$key" >&2
    mkdir -p "$cache/$key"
    GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
      go build -C "$tooldir" -trimpath -o "$bin.tmp" .
    mv -f "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

# The image's creation time: SOURCE_DATE_EPOCH when given, else the last
# commit's time, so two builds of one commit agree.
source_date_epoch() {
  if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then echo "$SOURCE_DATE_EPOCH"; return; fi
  git -C "$root" log -1 --format=%ct 2>/dev/null || { echo "no SOURCE_DATE_EPOCH and no git history" >&2; return 1; }
}

# The project's version: VERSION when given, else `git describe` (a tag, or
# the commit, with -dirty when the tree has changes).
project_version() {
  if [ -n "${VERSION:-}" ]; then echo "$VERSION"; return; fi
  git -C "$root" describe --tags --always --dirty 2>/dev/null || echo unknown
}

project_revision() {
  git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown
}

project_source=https://github.com/egress-proxies-operator/egress-proxies-operator

# passwd_files DIR writes passwd and group with root and nonroot (65532),
# the user our images run as (the same as distroless's nonroot).
passwd_files() {
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$1/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$1/group"
}

# load_image ARCHIVE: imports the archive into containerd's k8s.io
# namespace (the one the kubelet uses) when IMAGE_LOAD names its socket
# (or several, space-separated: one per node).
load_image() {
  local sock
  for sock in ${IMAGE_LOAD:-}; do
    echo "importing $1 into containerd at $sock (namespace k8s.io)"
    ctr -a "$sock" -n k8s.io images import "$1"
  done
}
