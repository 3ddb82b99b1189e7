#!/usr/bin/env bash
# Tears down the libvirt test host of up.sh: its guests, its libvirtd and
# sshd, every other process left in its network namespace (a test binary,
# a QEMU that outlived its daemon), the namespace, and the state dir with
# the pool, keys, logs and env file. Idempotent; works on a half-started or
# crashed host too. Processes are ended by pid only: the daemons' pid files
# and the pids of the namespace, which only this host's processes join.
#
# KEEP_LOGS=DIR copies the logs (libvirtd, sshd, QEMU, consoles) to DIR
# first, for a failed CI run.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
need_root

case $LV_STATE in
/ | /run | /tmp | /var | /root | "") die "refusing to remove state dir '$LV_STATE'" ;;
esac
run=$LV_STATE/run

if [ -n "${KEEP_LOGS:-}" ] && [ -d "$LV_STATE/log" ]; then
	mkdir -p "$KEEP_LOGS"
	cp -r "$LV_STATE/log/." "$KEEP_LOGS/" 2>/dev/null || true
	cp -r "$LV_STATE/libvirt/log/qemu" "$KEEP_LOGS/" 2>/dev/null || true
	log "logs kept in $KEEP_LOGS"
fi

# Guests first, through the daemon, so QEMU stops cleanly.
if pid_alive "$run/libvirtd.pid"; then
	for d in $(virsh_ns list --all --name 2>/dev/null); do
		virsh_ns destroy "$d" >/dev/null 2>&1 || true
		virsh_ns undefine "$d" --nvram --managed-save --snapshots-metadata >/dev/null 2>&1 ||
			virsh_ns undefine "$d" >/dev/null 2>&1 || true
		log "removed domain $d"
	done
fi
stop_pidfile "$run/sshd.pid"
stop_pidfile "$run/libvirtd.pid"

if netns_exists; then
	# Whatever still runs in the namespace is this host's.
	pids=$(ip netns pids "$LV_NETNS" 2>/dev/null || true)
	if [ -n "$pids" ]; then
		log "ending what is left in namespace $LV_NETNS: $(echo $pids)"
		kill $pids 2>/dev/null || true
		for i in $(seq 1 50); do
			[ -n "$(ip netns pids "$LV_NETNS" 2>/dev/null)" ] || break
			sleep 0.1
		done
		pids=$(ip netns pids "$LV_NETNS" 2>/dev/null || true)
		[ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
	fi
	ip netns del "$LV_NETNS" || die "could not delete namespace $LV_NETNS"
	log "removed namespace $LV_NETNS"
fi

if [ -e "$LV_STATE" ]; then
	rm -rf "$LV_STATE"
	log "removed $LV_STATE"
fi
log "down"
