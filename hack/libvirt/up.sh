#!/usr/bin/env bash
# Brings up the libvirt test host: a real libvirtd (QEMU driver) and an
# OpenSSH server, both inside a network namespace this script creates, and
# writes the env file the Go tests read ($LV_STATE/libvirt-test.env).
#
# Containment first: the namespace has loopback and an IP-less bridge and
# no route out, so nothing a guest does (QEMU's user-mode networking can
# reach whatever the daemon's namespace can) leaves it. libvirt's default
# NAT network does not exist in this daemon; no NAT rule is ever written.
#
# The daemon is private: it runs in a mount namespace of its own where
# /etc/libvirt (a copy without the default network), /var/lib/libvirt,
# /var/cache/libvirt, /var/log/libvirt and /run/libvirt are directories of
# the state dir, its socket and pid file are in the state dir, and a system
# libvirtd (or another test host) is never touched.
#
# The tests run inside the namespace too (hack/libvirt/run.sh, which
# `make test-libvirt` passes to go test -exec): sshd, QEMU's port forwards
# and the tests' own servers are all on the namespace's loopback.
#
# Idempotent: when everything is up, a second run only checks it; when a
# part is missing, it tears down what is left (down.sh) and starts afresh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
need_root
for t in libvirtd virsh sshd ssh-keygen ip unshare qemu-system-x86_64; do
	command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || die "$t is missing: run hack/libvirt/install.sh"
done
started=$SECONDS

run=$LV_STATE/run
sshdir=$LV_STATE/ssh
logdir=$LV_STATE/log
pool_dir=$LV_STATE/pool

up_ok() {
	[ -s "$LV_ENV_FILE" ] && netns_exists && pid_alive "$run/libvirtd.pid" && pid_alive "$run/sshd.pid" &&
		virsh_ns version >/dev/null 2>&1
}
if up_ok; then
	log "already up ($LV_ENV_FILE)"
	exit 0
fi
if netns_exists || [ -e "$LV_STATE" ]; then
	log "a partial test host is left: tearing it down first"
	"$here/down.sh"
fi

# --- the domain type ---------------------------------------------------------
# kvm only where hardware virtualisation really works: /dev/kvm alone is not
# enough (these machines have kvm_pvm, a software hypervisor, whose guests
# never boot usefully).
domain_type=${LIBVIRT_TEST_DOMAIN_TYPE:-}
why="LIBVIRT_TEST_DOMAIN_TYPE"
if [ -z "$domain_type" ]; then
	if [ ! -c /dev/kvm ]; then
		domain_type=qemu why="no /dev/kvm"
	elif [ -d /sys/module/kvm_pvm ]; then
		domain_type=qemu why="/dev/kvm is kvm_pvm (software)"
	elif ! grep -qE '^flags.* (vmx|svm)( |$)' /proc/cpuinfo; then
		domain_type=qemu why="the CPU shows no vmx or svm"
	else
		domain_type=kvm why="vmx/svm and /dev/kvm"
	fi
fi
case $domain_type in kvm | qemu) ;; *) die "domain type $domain_type: use kvm or qemu" ;; esac
log "domain type $domain_type ($why)"

# Without udev, /dev/kvm is root:root 0600: libvirt then finds KVM gone at
# every call and probes QEMU again (4 s each), even for type='qemu'. Give
# it udev's root:kvm 0660. Left so on down: it is what udev would do.
if [ -c /dev/kvm ] && getent group kvm >/dev/null; then
	chgrp kvm /dev/kvm
	chmod 0660 /dev/kvm
fi

# --- state dir ---------------------------------------------------------------
# Root-owned 0755 up to the state dir (sshd's StrictModes; QEMU, running as
# libvirt-qemu, must reach the pool); keys and config 0700.
mkdir -p "$LV_STATE"
d=$LV_STATE
while [ "$d" != / ]; do chmod go-w "$d"; d=$(dirname "$d"); done
chmod 0755 "$LV_STATE"
mkdir -p "$run" "$logdir" "$LV_STATE/libvirt"/{etc,lib,cache,log,run} "$pool_dir"
install -d -m 0700 "$sshdir"
chmod 0711 "$pool_dir"

# --- network namespace: loopback and an IP-less bridge, no route ----------------
ip netns add "$LV_NETNS"
echo "$LV_NETNS" >"$run/netns"
ip -n "$LV_NETNS" link set lo up
# IPv6 off for everything created in the namespace from now on (taps would
# otherwise get link-local addresses); these sysctls are the namespace's own.
in_ns sysctl -qw net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.all.disable_ipv6=1
ip -n "$LV_NETNS" link add "$LV_BRIDGE" type bridge stp_state 0
ip -n "$LV_NETNS" link set "$LV_BRIDGE" up
# No route at all in the main tables: nothing can be sent anywhere but
# loopback and the bridge's own segment.
routes=$(ip -n "$LV_NETNS" -4 route show; ip -n "$LV_NETNS" -6 route show)
[ -z "$routes" ] || die "the namespace has routes, it must have none: $routes"

# --- the private libvirt -------------------------------------------------------
lv=$LV_STATE/libvirt
cp -a /etc/libvirt/. "$lv/etc/"
# No default network: this daemon has no network at all unless a test
# defines one.
rm -f "$lv/etc/qemu/networks/default.xml" "$lv/etc/qemu/networks/autostart/"*.xml
rm -rf "$lv/etc/qemu/"*.xml "$lv/etc/storage" "$lv/etc/secrets"
cat >>"$lv/etc/libvirtd.conf" <<EOF

# --- hack/libvirt/up.sh: the test host's private daemon ---
unix_sock_dir = "$run"
unix_sock_group = "root"
unix_sock_ro_perms = "0700"
unix_sock_rw_perms = "0700"
unix_sock_admin_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
listen_tls = 0
listen_tcp = 0
log_outputs = "3:file:$logdir/libvirtd.log"
EOF
cat >>"$lv/etc/qemu.conf" <<EOF

# --- hack/libvirt/up.sh: the test host's private daemon ---
# QEMU writes its own log and console files: no virtlogd to run.
stdio_handler = "file"
EOF
# /var/lib/libvirt as the package lays it out, empty.
install -d -m 0755 "$lv/lib"
install -d -m 0711 "$lv/lib/images" "$lv/lib/boot"
install -d -m 0751 -o libvirt-qemu -g libvirt-qemu "$lv/lib/qemu"
install -d -m 0711 "$lv/cache/qemu"
install -d -m 0755 "$lv/cache/qemu/capabilities"
install -d -m 0755 "$lv/log/qemu"
# The mount point for the private /run/libvirt; the host has none when no
# system libvirtd ever ran. Left in place on down (an empty directory).
if [ ! -d /run/libvirt ]; then
	mkdir -p /run/libvirt
fi

# QEMU's capabilities, probed by libvirtd at its first start (about 9 s),
# are kept between hosts; libvirtd probes again when QEMU or libvirt
# changed. Copied in and out, so two hosts never write the same files.
if [ -d "$LV_CAPS_CACHE" ]; then
	cp -a "$LV_CAPS_CACHE/." "$lv/cache/qemu/capabilities/"
fi
log "starting libvirtd in namespace $LV_NETNS"
in_ns unshare --mount --propagation private sh -euc '
	lv=$1; run=$2
	mount --bind "$lv/etc" /etc/libvirt
	mount --bind "$lv/lib" /var/lib/libvirt
	mount --bind "$lv/cache" /var/cache/libvirt
	mount --bind "$lv/log" /var/log/libvirt
	mount --bind "$lv/run" /run/libvirt
	exec libvirtd --daemon --pid-file "$run/libvirtd.pid" --config "$lv/etc/libvirtd.conf"
' sh "$lv" "$run"
for i in $(seq 1 150); do
	virsh_ns version >/dev/null 2>&1 && break
	sleep 0.2
done
virsh_ns version >/dev/null || die "libvirtd did not answer on $run/libvirt-sock (log: $logdir/libvirtd.log)"
mkdir -p "$LV_CAPS_CACHE"
cp -a "$lv/cache/qemu/capabilities/." "$LV_CAPS_CACHE/"
if [ -n "$(virsh_ns net-list --all --name)" ]; then
	die "the test libvirtd has networks, it must have none: $(virsh_ns net-list --all --name | tr '\n' ' ')"
fi

# --- the dir pool ---------------------------------------------------------------
virsh_ns pool-define-as "$LV_POOL" dir --target "$pool_dir" >/dev/null
virsh_ns pool-start "$LV_POOL" >/dev/null

# --- sshd on the namespace's loopback, keys made here ---------------------------
ssh-keygen -q -t ed25519 -N '' -C "libvirt-test host $LV_NAME" -f "$sshdir/host_ed25519"
ssh-keygen -q -t ed25519 -N '' -C "libvirt-test client $LV_NAME" -f "$sshdir/id_ed25519"
install -m 0600 "$sshdir/id_ed25519.pub" "$sshdir/authorized_keys"
echo "[127.0.0.1]:$LV_SSH_PORT $(cut -d' ' -f1,2 "$sshdir/host_ed25519.pub")" >"$sshdir/known_hosts"
cat >"$sshdir/sshd_config" <<EOF
# The libvirt test host's sshd (hack/libvirt/up.sh): loopback of namespace
# $LV_NETNS, one throwaway key, root only.
ListenAddress 127.0.0.1:$LV_SSH_PORT
HostKey $sshdir/host_ed25519
PidFile $run/sshd.pid
AuthorizedKeysFile $sshdir/authorized_keys
AllowUsers root
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The provider reaches libvirtd's socket through a direct-streamlocal
# channel. OpenSSH's "AllowTcpForwarding no" refuses that too, so local
# forwarding stays on; nothing listens for remote forwards.
AllowTcpForwarding local
AllowStreamLocalForwarding local
GatewayPorts no
PermitTunnel no
X11Forwarding no
AllowAgentForwarding no
PrintMotd no
# Connection tests open many sessions at once.
MaxStartups 64:30:128
MaxSessions 64
LogLevel VERBOSE
EOF
# sshd's privilege-separation directory, made by systemd elsewhere.
mkdir -p /run/sshd
/usr/sbin/sshd -t -f "$sshdir/sshd_config"
in_ns /usr/sbin/sshd -f "$sshdir/sshd_config" -E "$logdir/sshd.log"
for i in $(seq 1 50); do pid_alive "$run/sshd.pid" && break; sleep 0.1; done
pid_alive "$run/sshd.pid" || die "sshd did not start (log: $logdir/sshd.log)"
# The client key, the pinned host key and the command path work.
in_ns ssh -F none -o BatchMode=yes -o StrictHostKeyChecking=yes \
	-o UserKnownHostsFile="$sshdir/known_hosts" -o GlobalKnownHostsFile=/dev/null \
	-i "$sshdir/id_ed25519" -p "$LV_SSH_PORT" root@127.0.0.1 true ||
	die "ssh root@127.0.0.1:$LV_SSH_PORT with the test key failed (log: $logdir/sshd.log)"

# --- the env file -------------------------------------------------------------
# KEY=VALUE lines, no quoting (no value holds a space): sourced by the
# scripts, read by internal/testenv/libvirthost.
guest_dir=$("$here/build-guest.sh" path)
cat >"$LV_ENV_FILE.tmp" <<EOF
LIBVIRT_TEST_NAME=$LV_NAME
LIBVIRT_TEST_NETNS=$LV_NETNS
LIBVIRT_TEST_STATE=$LV_STATE
LIBVIRT_TEST_SSH_ADDR=127.0.0.1:$LV_SSH_PORT
LIBVIRT_TEST_SSH_USER=root
LIBVIRT_TEST_SSH_KEY=$sshdir/id_ed25519
LIBVIRT_TEST_SSH_KNOWN_HOSTS=$sshdir/known_hosts
LIBVIRT_TEST_SOCKET=$run/libvirt-sock
LIBVIRT_TEST_URI=qemu:///system
LIBVIRT_TEST_POOL=$LV_POOL
LIBVIRT_TEST_POOL_PATH=$pool_dir
LIBVIRT_TEST_BRIDGE=$LV_BRIDGE
LIBVIRT_TEST_DOMAIN_TYPE=$domain_type
LIBVIRT_TEST_LOG_DIR=$logdir
LIBVIRT_TEST_QEMU_LOG_DIR=$lv/log/qemu
LIBVIRT_TEST_GUEST_DIR=$guest_dir
EOF
mv "$LV_ENV_FILE.tmp" "$LV_ENV_FILE"
log "up in $((SECONDS - started)) s: libvirtd $(cat "$run/libvirtd.pid"), sshd $(cat "$run/sshd.pid") on 127.0.0.1:$LV_SSH_PORT in namespace $LV_NETNS, pool $LV_POOL, bridge $LV_BRIDGE"
log "env file: $LV_ENV_FILE"
