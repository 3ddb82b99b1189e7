#!/usr/bin/env bash
# Builds the e2e test's collector image: the binary build.sh makes (cached),
# run as nonroot 65532:65532 on a read-only root, entrypoint /otelcol, no
# shell, no configuration (the Pod mounts its ConfigMap: test/e2e/otelcol),
# written as an OCI archive by hack/tools/imagebuild like the operator's and
# the Squid image, and imported into containerd when IMAGE_LOAD names its
# socket.
#
# OTELCOL_IMG (egress-proxies-operator/otelcol:e2e) names the image;
# IMAGE_DIR (bin/image) receives otelcol.oci.tar and otelcol.digest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/image/lib.sh
. "$here/../../image/lib.sh"

img=${OTELCOL_IMG:-egress-proxies-operator/otelcol:e2e}
dir=${IMAGE_DIR:-$root/bin/image}
archive=$dir/otelcol.oci.tar
work=$dir/otelcol
rm -rf "$work"
mkdir -p "$work"

bin=$("$here/build.sh" | tail -n 1)
release=$(awk '$1=="go.opentelemetry.io/collector/otelcol"{print $2}' "$here/go.mod")
tool=$(imagebuild_bin)
epoch=$(source_date_epoch)
passwd_files "$work"

cat > "$work/spec" <<SPEC
# The collector's rootfs: the static binary and the nonroot user.
file /otelcol 0755 0:0 $bin
file /etc/passwd 0644 0:0 $work/passwd
file /etc/group 0644 0:0 $work/group
dir /etc/otelcol 0755 0:0
dir /tmp 1777 0:0
SPEC

digest=$(SOURCE_DATE_EPOCH=$epoch "$tool" build --spec "$work/spec" --out "$archive" --ref "$img" \
  --platform linux/amd64 --user 65532:65532 --entrypoint /otelcol --workdir / \
  --label org.opencontainers.image.title=otelcol-e2e \
  --label org.opencontainers.image.version="$release" \
  --label org.opencontainers.image.description="OpenTelemetry Collector $release (otlp receiver, file exporter) for the e2e test" \
  --label org.opencontainers.image.source="$project_source")
echo "$digest" > "$dir/otelcol.digest"
echo "image $img collector $release digest $digest archive $archive"
load_image "$archive"
