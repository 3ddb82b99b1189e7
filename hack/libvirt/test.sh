#!/usr/bin/env bash
# `make test-libvirt`: builds the guest (cached), brings the libvirt test
# host up, runs go test on the packages in PKG inside its namespace, and
# tears the host down afterwards, on failure and on interrupt too.
#
#   PKG            packages to test (default ./test/libvirt/...: the smoke
#                  test, the conformance suite, the end-to-end test)
#   TESTFLAGS      extra go test flags (e.g. -run TestX); -v -count=1 always
#   LIBVIRT_TEST_TIMEOUT     go test's -timeout (default 40m: the suites
#                  boot a dozen guests under emulation)
#   LIBVIRT_TEST_KEEP_UP=1   leave the host up afterwards (make libvirt-down)
# On failure the tails of libvirtd's, sshd's and QEMU's logs are printed
# before the teardown.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
need_root
cd "$here/../.."
pkgs=${PKG:-./test/libvirt/...}

dump_logs() {
	local f
	for f in "$LV_STATE/log/libvirtd.log" "$LV_STATE/log/sshd.log" "$LV_STATE"/libvirt/log/qemu/*.log; do
		[ -s "$f" ] || continue
		echo "----- last 40 lines of $f"
		tail -n 40 "$f"
	done
}
finish() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "$rc" -ne 0 ]; then dump_logs || true; fi
	if [ "${LIBVIRT_TEST_KEEP_UP:-}" = 1 ]; then
		log "LIBVIRT_TEST_KEEP_UP=1: the host stays up (make libvirt-down removes it)"
	else
		"$here/down.sh" || rc=1
	fi
	exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

t=$SECONDS
"$here/build-guest.sh"
log "guest ready in $((SECONDS - t)) s"
t=$SECONDS
"$here/up.sh"
log "host up in $((SECONDS - t)) s"
t=$SECONDS
# shellcheck disable=SC2086 # PKG and TESTFLAGS are word lists
go test -exec "$here/run.sh" -count=1 -v -timeout "${LIBVIRT_TEST_TIMEOUT:-40m}" ${TESTFLAGS:-} $pkgs
log "go test $pkgs passed in $((SECONDS - t)) s"
