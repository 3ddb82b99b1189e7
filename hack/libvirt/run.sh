#!/usr/bin/env bash
# Runs a command inside the libvirt test host's network namespace, with
# LIBVIRT_TEST_ENV naming its env file, so internal/testenv/libvirthost
# finds the host (and knows it is inside). Made for go test -exec:
#
#   go test -exec "$PWD/hack/libvirt/run.sh" ./test/libvirt/smoke -v
#
# go test builds in the host's namespace (the Go module proxy is out of
# the test namespace's reach) and only runs the test binary in there.
# Everything the binary reaches is then on the namespace's loopback:
# sshd, QEMU's port forwards, its own servers.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_root
[ $# -gt 0 ] || die "usage: $0 COMMAND [ARG...]"
[ -s "$LV_ENV_FILE" ] && netns_exists || die "the libvirt test host $LV_NAME is not up: make libvirt-up (hack/libvirt/up.sh)"
export LIBVIRT_TEST_ENV=$LV_ENV_FILE
exec ip netns exec "$LV_NETNS" "$@"
