#!/usr/bin/env bash
# make image-test: proves both images are what docs/images.md says.
#  1. imagebuild's own tests (hack/tools/imagebuild).
#  2. Each image built twice into two directories: one digest, one archive.
#  3. The configs and layers: platform, user, entrypoint, labels, the files
#     the images need and no shell anywhere.
#  4. A private containerd (hack/image/containerd.sh, under /tmp/images-ctr)
#     imports both under their digests; the operator's image runs /manager
#     as 65532 on a read-only root; the Squid image runs the kubernetes
#     provider's own Pod and config and forwards a request on loopback
#     (test/image/squidcheck). containerd is stopped by its PID at the end,
#     also on failure.
# Needs root (containerd), Debian's squid, containerd and runc, and
# KUBEBUILDER_ASSETS (the envtest control plane the provider runs against).
set -euo pipefail
# shellcheck source=hack/image/lib.sh
. "$(dirname "$0")/lib.sh"

work=${IMAGE_TEST_DIR:-/tmp/images-test}
ctrdir=${IMAGE_CTR_DIR:-/tmp/images-ctr}
start=$SECONDS
step() { echo "== $* ($((SECONDS-start))s)"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "imagebuild's own tests"
(cd "$tooldir" && GOWORK=off go test -count=1 ./...)
tool=$(imagebuild_bin)

step "building each image twice, into $work/1 and $work/2"
rm -rf "$work"
for n in 1 2; do
  IMAGE_DIR=$work/$n "$root/hack/image/manager.sh"
  IMAGE_DIR=$work/$n "$root/hack/image/squid.sh"
done
for img in manager squid; do
  d1=$(cat "$work/1/$img.digest") d2=$(cat "$work/2/$img.digest")
  [ "$d1" = "$d2" ] || fail "$img: two builds gave $d1 and $d2"
  cmp -s "$work/1/$img.oci.tar" "$work/2/$img.oci.tar" || fail "$img: same digest $d1 but the archives differ"
  echo "$img: $d1, the same twice ($(du -h "$work/1/$img.oci.tar" | cut -f1) archive)"
done

step "checking the configs and layers"
no_shell() {
  local found
  found=$("$tool" inspect "$1" | jq -r '.files[] | select(.type != "dir") | .path' | grep -E '/(sh|bash|dash|ash|busybox)$' || true)
  [ -z "$found" ] || fail "$1 holds a shell: $found"
}
"$tool" check --platform linux/amd64 --user 65532:65532 --entrypoint /manager \
  --label org.opencontainers.image.version="$(project_version)" \
  --label org.opencontainers.image.revision="$(project_revision)" \
  --label org.opencontainers.image.source="$project_source" \
  --present /manager --present /etc/ssl/certs/ca-certificates.crt --present /tmp \
  --absent /bin --absent /bin/sh --absent /lib64 "$work/1/manager.oci.tar"
no_shell "$work/1/manager.oci.tar"
"$tool" check --platform linux/amd64 --user 65532:65532 --entrypoint /usr/sbin/squid \
  --label org.opencontainers.image.version="$(dpkg-query -W -f='${Version}' squid)" \
  --label org.opencontainers.image.source="$project_source" \
  --present /usr/sbin/squid --present /usr/lib/squid/unlinkd --present /usr/share/squid/mime.conf \
  --present /usr/share/squid/errors/templates/ERR_ACCESS_DENIED --present /etc/squid/errorpage.css \
  --present /etc/squid-operator --present /tmp \
  --absent /etc/squid/squid.conf --absent /usr/lib/squid/pinger --absent /bin/sh "$work/1/squid.oci.tar"
no_shell "$work/1/squid.oci.tar"

step "starting a private containerd in $ctrdir"
trap '"$root/hack/image/containerd.sh" down "$ctrdir"' EXIT
sock=$("$root/hack/image/containerd.sh" up "$ctrdir")
ctr=(ctr -a "$sock" -n k8s.io)
for img in manager squid; do
  IMAGE_LOAD=$sock load_image "$work/1/$img.oci.tar"
  ref=$("$tool" inspect "$work/1/$img.oci.tar" | jq -r .ref)
  got=$("${ctr[@]}" images ls "name==$ref" | awk 'NR>1 {print $3}')
  [ "$got" = "$(cat "$work/1/$img.digest")" ] || fail "containerd has $ref at '$got', want $(cat "$work/1/$img.digest")"
  echo "containerd: $ref $got"
done

step "running the operator's image: /manager --help as 65532 on a read-only root"
mref=$("$tool" inspect "$work/1/manager.oci.tar" | jq -r .ref)
out=$("${ctr[@]}" run --rm --read-only "$mref" "image-test-manager-$$" /manager --help 2>&1) || fail "/manager --help: $out"
grep -q -- '-gc-grace' <<<"$out" || fail "/manager --help printed no usage: $out"
echo "/manager --help: usage printed"

step "running the Squid image as the kubernetes provider's Pod (test/image/squidcheck)"
[ -n "${KUBEBUILDER_ASSETS:-}" ] || fail "KUBEBUILDER_ASSETS is not set (make image-test sets it)"
SQUID_IMAGE_CTR_SOCKET=$sock SQUID_IMAGE_REF=$("$tool" inspect "$work/1/squid.oci.tar" | jq -r .ref) \
  go test -C "$root" ./test/image/squidcheck/ -run TestSquidImageRunsTheProvidersPod -count=1 -v ${IMAGE_TEST_FLAGS:-}

step "all image checks passed"
