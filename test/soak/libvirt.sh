#!/usr/bin/env bash
# `make soak SOAK_PROVIDER=libvirt`: builds the guest (cached), brings the
# libvirt test host up (hack/libvirt, docs/testing.md), runs the soak
# command given as arguments inside the host's network namespace, and tears
# the host down afterwards, on failure and on interrupt too. Inside, the
# control plane, the manager, sshd and the soak's image server share the
# namespace's loopback, and the guests reach nothing (no route out).
#
#   LIBVIRT_TEST_KEEP_UP=1   leave the host up afterwards (make libvirt-down)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lv=$here/../../hack/libvirt
. "$lv/lib.sh"
need_root
[ $# -gt 0 ] || die "usage: $0 SOAK-COMMAND [ARG...]"

finish() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "${LIBVIRT_TEST_KEEP_UP:-}" = 1 ]; then
		log "LIBVIRT_TEST_KEEP_UP=1: the host stays up (make libvirt-down removes it)"
	else
		"$lv/down.sh" || rc=1
	fi
	exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

t=$SECONDS
"$lv/build-guest.sh"
log "guest ready in $((SECONDS - t)) s"
t=$SECONDS
"$lv/up.sh"
log "host up in $((SECONDS - t)) s"
"$lv/run.sh" "$@"
