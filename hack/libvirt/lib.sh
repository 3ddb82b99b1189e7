# Shared by the hack/libvirt scripts; sourced, not run.
#
# One test host per name (LIBVIRT_TEST_NAME): a network namespace of that
# name and one state directory hold everything up.sh starts and down.sh
# removes. Nothing outside them is changed, except /dev/kvm's group and
# mode (see up.sh) and the mount point /run/libvirt, created empty when the
# host has none.

set -euo pipefail

LV_NAME=${LIBVIRT_TEST_NAME:-egress-lv}
# Root-owned path components all the way up, so sshd's StrictModes holds;
# 0755 at the top so QEMU (user libvirt-qemu) can reach the pool below it.
LV_STATE=${LIBVIRT_TEST_STATE:-/run/egress-proxies-operator/libvirt-test/$LV_NAME}
LV_NETNS=$LV_NAME
LV_ENV_FILE=$LV_STATE/libvirt-test.env
LV_SSH_PORT=${LIBVIRT_TEST_SSH_PORT:-2222}
LV_POOL=${LIBVIRT_TEST_POOL:-egress-test}
LV_BRIDGE=${LIBVIRT_TEST_BRIDGE:-eplvbr0}

# Caches outside the work tree, kept across up and down: the guest image
# (build-guest.sh) and QEMU's capabilities as libvirtd probed them (up.sh).
LV_CACHE=${LIBVIRT_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies-operator/libvirt-guest}
LV_CAPS_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies-operator/libvirt-test/qemu-capabilities

log() { printf '%s [%s] %s\n' "$(date -u +%H:%M:%S)" "${0##*/}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() { [ "$(id -u)" -eq 0 ] || die "run as root (the test host starts privileged daemons in a network namespace)"; }

# pid_alive FILE: the pid in FILE is a running process.
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pidfile FILE: TERM the process in FILE, KILL it after 5 s; removes FILE.
stop_pidfile() {
	local f=$1 pid i
	if pid_alive "$f"; then
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || true
		for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			log "pid $pid ($f) did not stop on TERM: KILL"
			kill -9 "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$f"
}

netns_exists() { [ -e "/run/netns/$LV_NETNS" ]; }

# in_ns CMD...: CMD in the test namespace (ip netns exec also gives it a
# mount namespace of its own with a fresh /sys).
in_ns() { ip netns exec "$LV_NETNS" "$@"; }

# virsh_ns ARGS...: virsh against the test host's own libvirtd.
virsh_ns() { virsh -q -c "qemu:///system?socket=$LV_STATE/run/libvirt-sock" "$@"; }
