#!/usr/bin/env bash
# Builds the kubernetes provider's Squid image (make image-squid) from
# Debian's squid package on this machine: only what Squid needs to run as
# nonroot 65532:65532 on a read-only root, no shell, no squid.conf (the
# provider mounts the one it generates at /etc/squid-operator, and a
# Proxy's clientAuth users at /etc/squid-users; see
# internal/provider/kubernetes/pod.go and squid.go), labelled with the
# package's version. Written as an OCI archive by hack/tools/imagebuild;
# the same package versions and commit give the same digest.
#
# SQUID_IMG (egress-proxies-operator/squid:<squid version>) names the image;
# IMAGE_DIR (bin/image) receives squid.oci.tar and squid.digest;
# SOURCE_DATE_EPOCH overrides the commit time; IMAGE_LOAD=<containerd
# socket> imports the archive into its k8s.io namespace.
set -euo pipefail
# shellcheck source=hack/image/lib.sh
. "$(dirname "$0")/lib.sh"

if ! dpkg-query -W -f='${Status}' squid 2>/dev/null | grep -q 'install ok installed'; then
  echo "squid is not installed: installing Debian's package without starting it (hack/install-test-deps.sh)"
  SKIP_CLOUDINIT_TESTS=1 SKIP_ISO_TESTS=1 SKIP_LIBVIRT_SCHEMA_TESTS=1 "$root/hack/install-test-deps.sh"
fi
squid_version=$(dpkg-query -W -f='${Version}' squid)
# A tag allows [A-Za-z0-9_.-]: 5.7-2+deb12u6 is tagged 5.7-2_deb12u6; the
# label keeps the exact version.
img=${SQUID_IMG:-egress-proxies-operator/squid:${squid_version//[^A-Za-z0-9_.-]/_}}
dir=${IMAGE_DIR:-$root/bin/image}
archive=$dir/squid.oci.tar
work=$dir/squid
rm -rf "$work"
mkdir -p "$work"

tool=$(imagebuild_bin)
epoch=$(source_date_epoch)

passwd_files "$work"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' > "$work/hosts"

spec=$work/spec
{
  echo "# Squid $squid_version from Debian's packages on the build machine."
  echo "file /usr/sbin/squid 0755 0:0 /usr/sbin/squid"
  # unlinkd is started even with no cache_dir ("FATAL: unlinkd_program ...
  # No such file" without it). pinger is left out: it needs CAP_NET_RAW,
  # which a restricted Pod drops.
  echo "file /usr/lib/squid/unlinkd 0755 0:0 /usr/lib/squid/unlinkd"
  # The helper that checks a Proxy's clientAuth users against the mounted
  # htpasswd file (bcrypt entries), started by Squid itself.
  echo "file /usr/lib/squid/basic_ncsa_auth 0755 0:0 /usr/lib/squid/basic_ncsa_auth"
  # Every library the binaries load, at the path the loader looks in.
  { ldd /usr/sbin/squid; ldd /usr/lib/squid/unlinkd; ldd /usr/lib/squid/basic_ncsa_auth; } | awk '$2=="=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
    while read -r lib; do
      mode=0644; case "$lib" in */ld-linux*) mode=0755 ;; esac
      echo "file $lib $mode 0:0 $(readlink -f "$lib")"
    done
  echo "file /usr/share/squid/mime.conf 0644 0:0 /usr/share/squid/mime.conf"
  echo "tree /usr/share/squid/icons /usr/share/squid/icons"
  # Error pages: the generic English templates (no Accept-Language) and en
  # with its aliases (en-gb -> en, ...); other languages fall back to them.
  echo "tree /usr/share/squid/errors/templates /usr/share/squid-langpack/templates"
  echo "tree /usr/share/squid/errors/en /usr/share/squid-langpack/en"
  for l in /usr/share/squid-langpack/en-*; do
    [ -L "$l" ] && [ "$(readlink "$l")" = en ] && echo "symlink /usr/share/squid/errors/${l##*/} en"
  done
  echo "file /etc/squid/errorpage.css 0644 0:0 /etc/squid/errorpage.css"
  echo "file /etc/passwd 0644 0:0 $work/passwd"
  echo "file /etc/group 0644 0:0 $work/group"
  echo "file /etc/hosts 0644 0:0 $work/hosts"
  # Mount points of the Pod's volumes (the ConfigMap, the users' Secret and
  # five emptyDirs), owned by nonroot so the image also runs without them
  # on a writable root.
  echo "dir /etc/squid-operator 0755 0:0"
  echo "dir /etc/squid-users 0755 0:0"
  for d in /var/run/squid /var/spool/squid /var/cache/squid /var/log/squid; do
    echo "dir $d 0755 65532:65532"
  done
  echo "dir /tmp 1777 0:0"
} > "$spec"

# The Debian packages the rootfs came from, for the label; dpkg knows a
# file by the path it shipped it under, the spec's path or its target.
packages=$(awk '$1=="file" {print $2, $5}' "$spec" | grep -v " $work/" | while read -r path src; do
    dpkg -S "$path" 2>/dev/null || dpkg -S "$src" 2>/dev/null || { echo "no Debian package owns $path ($src)" >&2; exit 1; }
  done | cut -d: -f1 | sort -u | xargs dpkg-query -W -f='${Package}=${Version} ' | sed 's/ $//')

digest=$(SOURCE_DATE_EPOCH=$epoch "$tool" build --spec "$spec" --out "$archive" --ref "$img" \
  --platform linux/amd64 --user 65532:65532 --workdir / \
  --env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  --entrypoint /usr/sbin/squid --cmd -N --cmd -f --cmd /etc/squid-operator/squid.conf \
  --label org.opencontainers.image.title=egress-proxies-operator-squid \
  --label org.opencontainers.image.description="Squid from Debian's squid package for the kubernetes provider; the provider mounts squid.conf at /etc/squid-operator" \
  --label org.opencontainers.image.version="$squid_version" \
  --label org.opencontainers.image.revision="$(project_revision)" \
  --label org.opencontainers.image.source="$project_source" \
  --label org.opencontainers.image.created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" \
  --label dev.egress-proxies-operator.debian-packages="$packages")
echo "$digest" > "$dir/squid.digest"
echo "$img" > "$dir/squid.ref"
echo "image $img squid $squid_version digest $digest archive $archive"
load_image "$archive"
