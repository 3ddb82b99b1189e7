#!/usr/bin/env bash
# Installs, from Debian, what the libvirt test host (up.sh) and the guest
# image build (build-guest.sh) need: libvirtd, QEMU, OpenSSH, mmdebstrap,
# passt and the disk tools. Idempotent: a second run installs nothing.
#
# It starts no service and leaves none enabled that it did not find
# enabled: the test host starts its own libvirtd and sshd inside a network
# namespace (up.sh), and a system libvirtd would start libvirt's `default`
# NAT network, which the tests must never have. So:
# - a policy-rc.d answering 101 keeps the maintainer scripts from starting
#   anything during the install (as hack/install-test-deps.sh does);
# - the services of the packages this run installed are stopped and
#   disabled afterwards (a service that was there before is left alone);
# - the `default` network's autostart link is removed, and the run fails if
#   a system libvirtd, or its bridge virbr0, turns out to be up.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_root

have_systemd() { [ -d /run/systemd/system ]; }

pkgs=(libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils
	openssh-server openssh-client mmdebstrap passt e2fsprogs
	iproute2 util-linux fdisk mtools dosfstools syslinux syslinux-common)
# Without systemd as PID 1, the sysv flavour of libvirt's service files
# satisfies libvirt-daemon-system; the default alternative would pull
# systemd itself into a container.
have_systemd || pkgs+=(libvirt-daemon-system-sysv)

# The packages this script installed (not those it found), one a line.
installed_list=/var/lib/egress-proxies-operator/libvirt-test-installed-packages

missing=()
for p in "${pkgs[@]}"; do
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	log "all ${#pkgs[@]} packages already installed"
else
	policy=/usr/sbin/policy-rc.d created_policy=0
	if [ ! -e "$policy" ]; then
		log "writing $policy so the install starts no service"
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 0755 "$policy"
		created_policy=1
		trap 'rm -f "$policy"' EXIT
	fi
	log "apt-get update"
	apt-get -o DPkg::Lock::Timeout=600 -q update
	log "apt-get install --no-install-recommends ${missing[*]}"
	# --no-install-recommends leaves out dnsmasq (libvirt's NAT networks'
	# DHCP), which the tests never want.
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q -y \
		install --no-install-recommends "${missing[@]}"
	if [ "$created_policy" = 1 ]; then rm -f "$policy"; trap - EXIT; fi

	# Remembered, so every later run keeps their services off too.
	mkdir -p "$(dirname "$installed_list")"
	printf '%s\n' "${missing[@]}" >>"$installed_list"
fi

# The services of the packages this script installed: stopped and
# disabled, on every run (a package upgrade may enable them again).
# Services that were there before it are left alone.
units=()
if [ -s "$installed_list" ]; then
	while read -r p; do
		case $p in
		libvirt-daemon-system | libvirt-daemon-system-sysv)
			units+=(libvirtd.service virtlogd.service virtlockd.service libvirt-guests.service
				libvirtd.socket libvirtd-ro.socket libvirtd-admin.socket
				virtlogd.socket virtlogd-admin.socket virtlockd.socket virtlockd-admin.socket) ;;
		openssh-server) units+=(ssh.service ssh.socket) ;;
		esac
	done <"$installed_list"
fi
for u in "${units[@]}"; do
	if have_systemd; then
		if systemctl is-active --quiet "$u" 2>/dev/null; then
			log "stopping $u (installed by this script)"
			systemctl stop "$u" || true
		fi
		sc=(systemctl)
	else
		# Without a running systemd, systemctl edits the unit links offline.
		sc=(systemctl --root=/)
	fi
	if command -v systemctl >/dev/null 2>&1 && [ "$("${sc[@]}" is-enabled "$u" 2>/dev/null)" = enabled ]; then
		log "disabling $u (installed by this script)"
		"${sc[@]}" disable --quiet "$u" 2>/dev/null || true
	fi
	n=${u%.service}
	if [ "$n" != "$u" ] && [ -x "/etc/init.d/$n" ] && ls /etc/rc[2-5].d/S??"$n" >/dev/null 2>&1; then
		log "removing the sysv start links of $n (installed by this script)"
		update-rc.d -f "$n" remove >/dev/null
	fi
done

# libvirt's `default` NAT network: never autostarted by a system libvirtd.
# (The test host's own libvirtd reads a private copy of /etc/libvirt
# without it, see up.sh.)
if [ -e /etc/libvirt/qemu/networks/autostart/default.xml ]; then
	log "removing the autostart link of libvirt's default network"
	rm -f /etc/libvirt/qemu/networks/autostart/default.xml
fi

# Nothing of the above may be running in the host's namespaces.
fail=0
if ip link show virbr0 >/dev/null 2>&1; then
	log "error: virbr0 (libvirt's default network) exists in the host namespace"
	fail=1
fi
for pf in /run/libvirtd.pid /run/virtlogd.pid; do
	if pid_alive "$pf"; then
		log "error: a system daemon runs ($pf, pid $(cat "$pf")); the test host never uses it"
		fail=1
	fi
done
[ "$fail" = 0 ] || exit 1

log "libvirtd $(libvirtd --version | awk '{print $NF}'), $(qemu-system-x86_64 --version | head -n1), $(ssh -V 2>&1), mmdebstrap $(mmdebstrap --version | awk '{print $NF}')"
