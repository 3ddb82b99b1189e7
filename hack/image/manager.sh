#!/usr/bin/env bash
# Builds the operator's image (make image): ./cmd as a static binary
# (CGO_ENABLED=0, what `make build` builds), run as nonroot 65532:65532,
# entrypoint /manager, no shell, OCI labels from git, written as an OCI
# archive by hack/tools/imagebuild with no registry and no daemon. The same
# commit and tree give the same digest (docs/images.md).
#
# IMG (egress-proxies-operator:dev) names the image; IMAGE_DIR (bin/image)
# receives manager.oci.tar and manager.digest; IMAGE_PLATFORM (linux/amd64);
# VERSION and SOURCE_DATE_EPOCH override git describe and the commit time;
# IMAGE_LOAD=<containerd socket> imports the archive into its k8s.io
# namespace.
set -euo pipefail
# shellcheck source=hack/image/lib.sh
. "$(dirname "$0")/lib.sh"

img=${IMG:-egress-proxies-operator:dev}
dir=${IMAGE_DIR:-$root/bin/image}
platform=${IMAGE_PLATFORM:-linux/amd64}
archive=$dir/manager.oci.tar
work=$dir/manager
mkdir -p "$work"

tool=$(imagebuild_bin)
epoch=$(source_date_epoch)
version=$(project_version)

echo "building ./cmd for $platform (CGO_ENABLED=0)"
# -trimpath and no VCS stamp: the binary depends on the sources and the Go
# version only, not on where the tree is checked out.
CGO_ENABLED=0 GOOS=${platform%%/*} GOARCH=${platform#*/} GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
  go build -C "$root" -trimpath -ldflags="-s -w" -o "$work/manager" ./cmd
passwd_files "$work"

cat > "$work/spec" <<SPEC
# The operator's rootfs: the binary, the nonroot user, the CA bundle its
# cloud clients verify TLS with, and a writable /tmp. No shell, no libc.
file /manager 0755 0:0 $work/manager
file /etc/passwd 0644 0:0 $work/passwd
file /etc/group 0644 0:0 $work/group
file /etc/ssl/certs/ca-certificates.crt 0644 0:0 /etc/ssl/certs/ca-certificates.crt
dir /tmp 1777 0:0
dir /home/nonroot 0700 65532:65532
SPEC

digest=$(SOURCE_DATE_EPOCH=$epoch "$tool" build --spec "$work/spec" --out "$archive" --ref "$img" \
  --platform "$platform" --user 65532:65532 --entrypoint /manager --workdir / \
  --label org.opencontainers.image.title=egress-proxies-operator \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.revision="$(project_revision)" \
  --label org.opencontainers.image.source="$project_source" \
  --label org.opencontainers.image.created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)")
echo "$digest" > "$dir/manager.digest"
echo "image $img version $version digest $digest archive $archive"
load_image "$archive"
