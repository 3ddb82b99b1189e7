#!/usr/bin/env bash
# Builds the e2e cluster's own images as docker-archives, without a
# registry, a daemon or a build tool: one layer tarball, a config and a
# manifest, written byte for byte the same on every run (sorted tar, mtime
# 0, numeric owners), so the digests are stable.
#   pause   the sandbox image (hack/cluster/pause, a static Go binary)
#   busybox Debian's busybox-static as /bin/busybox, uid 65532, for the
#           smoke Pods (hack/cluster/smoke.sh)
# usage: hack/cluster/images.sh OUTDIR   (writes OUTDIR/{pause,busybox}.tar)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
out=${1:?output directory}
mkdir -p "$out"
work=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# docker_archive NAME REPOTAG ROOTFS CONFIGJSON: writes $out/NAME.tar.
docker_archive() {
  local name=$1 tag=$2 rootfs=$3 config=$4 d=$work/$1-img diff
  mkdir -p "$d"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$d/layer.tar" .
  diff=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$config" "$diff" >"$d/config.json"
  printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$tag" >"$d/manifest.json"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$d" -cf "$out/$name.tar.tmp" manifest.json config.json layer.tar
  mv -f "$out/$name.tar.tmp" "$out/$name.tar"
  echo "cluster: image $tag: config sha256:$(sha256sum "$d/config.json" | cut -d' ' -f1)"
}

# pause: /pause only; 65535 as the upstream pause image runs.
p=$work/pause-root
mkdir -p "$p"
CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -C "$root" -trimpath -ldflags='-s -w' -o "$p/pause" ./hack/cluster/pause
docker_archive pause "${pause_image#docker.io/}" "$p" '{"User":"65535:65535","Entrypoint":["/pause"]}'

# busybox: the static busybox, passwd/group for the non-root user, a /tmp.
b=$work/busybox-root
mkdir -p "$b/bin" "$b/etc" "$b/tmp"
chmod 1777 "$b/tmp"
# ldd fails on a static binary; read its answer rather than its status.
case "$(ldd /bin/busybox 2>&1 || true)" in *"not a dynamic executable"*) ;;
  *) echo "cluster: /bin/busybox is missing or not static (run hack/cluster/install.sh)" >&2; exit 1 ;; esac
cp /bin/busybox "$b/bin/busybox"
printf 'root:x:0:0:root:/:/bin/sh\nnonroot:x:65532:65532:nonroot:/tmp:/bin/sh\n' >"$b/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$b/etc/group"
docker_archive busybox "${busybox_image#docker.io/}" "$b" '{"User":"65532:65532","Entrypoint":["/bin/busybox"],"Env":["PATH=/bin"]}'
