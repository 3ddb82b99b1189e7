#!/usr/bin/env bash
# Builds the libvirt tests' guest: a Debian 12 VM image with real cloud-init,
# the QEMU guest agent, Squid and keepalived (a group member's, issue 24)
# preinstalled, from Debian packages only (mmdebstrap from this machine's
# configured apt sources), so a guest needs no network to become a working
# proxy.
#
#   build-guest.sh        build it unless the cache holds this version
#   build-guest.sh path   print the cache directory of this version
#
# The result is cached outside the work tree, keyed by a version that
# changes whenever this script changes:
#   $LIBVIRT_GUEST_CACHE (default ~/.cache/egress-proxies-operator/libvirt-guest)/<key>/
#     guest.qcow2         the disk: MBR, a FAT boot partition (SYSLINUX,
#                         kernel, initrd) and an ext4 root labelled
#                         egress-root; boots under SeaBIOS from the disk,
#                         the way the provider boots its images
#     guest.qcow2.sha256  its sha256 (what an image catalogue entry needs)
#     vmlinuz initrd.img cmdline   the same kernel, initrd and command line,
#                         for a domain that boots the kernel directly
#     packages.txt        the packages and versions in the image
#
# The image, tuned for emulation (type='qemu', no KVM here):
# - en_US.UTF-8 generated and set as the default locale, so cloud-init's
#   locale module does nothing (unset, it runs locale-gen at first boot:
#   16 s under emulation; missing, cloud-init ends in error);
# - qemu-guest-agent starts without default dependencies, so it answers
#   about 20 s earlier than after cloud-init's network stage;
# - systemd-networkd enabled (cloud-init 22.4 renders networkd config but
#   does not enable it), udev present (it starts qemu-guest-agent);
# - NoCloud only in cloud-init's datasource list; no resolv.conf, so a
#   lookup fails at once instead of timing out in a guest with no way out;
# - no apt timers, no root password, no SSH server; an empty machine-id.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# The version key: the Debian release and a digest of this script.
self=$(readlink -f "$0")
LV_GUEST_KEY=debian12-$(sha256sum "$self" | cut -c1-12)
out=$LV_CACHE/$LV_GUEST_KEY

if [ "${1:-}" = path ]; then
	echo "$out"
	exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [path]"

if [ -s "$out/guest.qcow2" ] && [ -s "$out/guest.qcow2.sha256" ]; then
	log "guest $LV_GUEST_KEY is cached: $out/guest.qcow2"
	exit 0
fi
need_root
for t in mmdebstrap mkfs.ext4 mkfs.vfat mcopy syslinux sfdisk qemu-img; do
	command -v "$t" >/dev/null 2>&1 || die "$t is missing: run hack/libvirt/install.sh"
done

mkdir -p "$LV_CACHE"
# One build at a time per cache; a second caller waits, then finds it built.
exec 9>"$LV_CACHE/.lock"
if ! flock -n 9; then
	log "another build holds $LV_CACHE/.lock; waiting"
	flock 9
fi
if [ -s "$out/guest.qcow2" ] && [ -s "$out/guest.qcow2.sha256" ]; then
	log "guest $LV_GUEST_KEY is cached: $out/guest.qcow2"
	exit 0
fi

work=$(mktemp -d "$LV_CACHE/.build-$LV_GUEST_KEY.XXXXXX")
heartbeat=
cleanup() {
	[ -z "$heartbeat" ] || kill "$heartbeat" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

started=$SECONDS
# step NAME CMD...: runs CMD, printing a line every 30 s while it runs and
# its duration at the end.
step() {
	local name=$1 s=$SECONDS
	shift
	log "$name ..."
	(while sleep 30; do log "$name: still running, $((SECONDS - s)) s"; done) &
	heartbeat=$!
	"$@"
	kill "$heartbeat" 2>/dev/null || true
	wait "$heartbeat" 2>/dev/null || true
	heartbeat=
	log "$name: done in $((SECONDS - s)) s"
}

root=$work/rootfs
packages=linux-image-cloud-amd64,systemd-sysv,udev,dbus,iproute2,e2fsprogs,netbase,locales,cloud-init,qemu-guest-agent,squid,keepalived

rootfs() {
	# No mirror argument: mmdebstrap takes the host's apt sources.
	mmdebstrap --mode=root --variant=minbase --format=directory -q \
		--aptopt='APT::Install-Recommends "false"' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--include="$packages" \
		bookworm "$root"
}

customize() {
	local r=$root
	echo "LABEL=egress-root / ext4 defaults,errors=remount-ro 0 1" >"$r/etc/fstab"
	sed -i 's/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/' "$r/etc/locale.gen"
	chroot "$r" locale-gen >/dev/null
	chroot "$r" update-locale LANG=en_US.UTF-8
	chroot "$r" systemctl enable --quiet systemd-networkd.service
	for t in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
		chroot "$r" systemctl disable --quiet "$t" 2>/dev/null || true
	done
	mkdir -p "$r/etc/systemd/system/qemu-guest-agent.service.d"
	cat >"$r/etc/systemd/system/qemu-guest-agent.service.d/early.conf" <<-'UNIT'
		# Answer the host as soon as the virtio port is there, not after
		# cloud-init's network stage (sysinit.target).
		[Unit]
		DefaultDependencies=no
		Conflicts=shutdown.target
		Before=shutdown.target
	UNIT
	cat >"$r/etc/cloud/cloud.cfg.d/90-egress-test-guest.cfg" <<-'CFG'
		# The libvirt tests boot this image with a NoCloud seed only.
		# (No SSH server in the image: cc_ssh's warnings about ssh-keygen
		# are harmless; ssh_genkeytypes: [] would fail the schema.)
		datasource_list: [NoCloud, None]
	CFG
	rm -f "$r/etc/hostname" "$r/etc/resolv.conf"
	: >"$r/etc/machine-id"
	rm -f "$r/var/lib/dbus/machine-id"
	rm -rf "$r/var/lib/apt/lists/"* "$r/var/cache/apt/"*.bin
	chroot "$r" dpkg-query -W -f='${Package} ${Version}\n' >"$work/packages.txt"
}

# The disk: MBR with SYSLINUX's boot code, partition 1 FAT (active; kernel,
# initrd, SYSLINUX), partition 2 ext4 root. Built without loop devices:
# each file system is written into the image at its partition's offset.
disk_size_mib=4096
boot_start=2048                          # sectors (1 MiB)
boot_sectors=$((128 * 2048))             # 128 MiB
root_start=$((boot_start + boot_sectors))
root_sectors=$((disk_size_mib * 2048 - root_start))
cmdline="root=LABEL=egress-root rw console=ttyS0,115200 mitigations=off"

disk() {
	local img=$work/disk.raw kernel initrd
	kernel=$(ls "$root"/boot/vmlinuz-* | head -n1)
	initrd=$(ls "$root"/boot/initrd.img-* | head -n1)
	cp "$kernel" "$work/vmlinuz"
	cp "$initrd" "$work/initrd.img"
	echo "$cmdline" >"$work/cmdline"

	truncate -s "${disk_size_mib}M" "$img"
	sfdisk --quiet --label dos "$img" <<-EOF
		start=$boot_start, size=$boot_sectors, type=c, bootable
		start=$root_start, size=$root_sectors, type=83
	EOF
	dd if=/usr/lib/syslinux/mbr/mbr.bin of="$img" bs=440 count=1 conv=notrunc status=none

	local fat=$work/boot.fat
	mkfs.vfat -F 32 -n EGRESSBOOT -h "$boot_start" -C "$fat" $((boot_sectors / 2)) >/dev/null
	syslinux --install "$fat"
	cat >"$work/syslinux.cfg" <<-EOF
		SERIAL 0 115200
		DEFAULT debian
		PROMPT 0
		TIMEOUT 0
		LABEL debian
		  KERNEL vmlinuz
		  INITRD initrd.img
		  APPEND $cmdline
	EOF
	mcopy -o -i "$fat" "$work/vmlinuz" "$work/initrd.img" "$work/syslinux.cfg" ::/
	dd if="$fat" of="$img" bs=1M seek=$((boot_start / 2048)) conv=notrunc status=none
	rm -f "$fat"

	mkfs.ext4 -q -L egress-root -d "$root" -E offset=$((root_start * 512)) \
		"$img" $((root_sectors / 2))k
}

compress() {
	qemu-img convert -f raw -O qcow2 -c "$work/disk.raw" "$work/guest.qcow2"
	rm -f "$work/disk.raw"
}

log "building guest $LV_GUEST_KEY into $out"
step "mmdebstrap bookworm (${packages//,/ })" rootfs
step "customize the root file system" customize
log "root file system: $(du -sh "$root" | cut -f1), $(wc -l <"$work/packages.txt") packages"
step "write the disk image (MBR, FAT boot, ext4 root)" disk
rm -rf "$root"
step "compress into qcow2" compress
(cd "$work" && sha256sum guest.qcow2 >guest.qcow2.sha256)

# Published all at once: a cut-off build leaves no half image in the cache.
rm -rf "$out"
mkdir -p "$out"
mv "$work/guest.qcow2" "$work/guest.qcow2.sha256" "$work/vmlinuz" "$work/initrd.img" \
	"$work/cmdline" "$work/packages.txt" "$out/"
log "guest $LV_GUEST_KEY built in $((SECONDS - started)) s: $out/guest.qcow2 ($(du -h "$out/guest.qcow2" | cut -f1), virtual ${disk_size_mib} MiB)"
others=$(cd "$LV_CACHE" && ls -d debian12-* 2>/dev/null | grep -vx "$LV_GUEST_KEY" || true)
[ -z "$others" ] || log "older guest versions in $LV_CACHE (remove when unused): $others"
