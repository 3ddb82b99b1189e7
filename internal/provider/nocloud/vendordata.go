package nocloud

import (
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// GuestAgentVendorData is the vendor-data of the VM providers whose
// hypervisor reads the VM's addresses through the QEMU guest agent
// (libvirt, Proxmox): a script (cloud-init runs a vendor-data starting with
// "#!" once per instance) that installs qemu-guest-agent with the
// distribution's package manager (apt-get on Debian and Ubuntu, dnf or yum
// on the RHEL family), then enables and starts it. It fetches nothing but
// those packages, skips the install when qemu-ga is already there, and exits
// non-zero (so `cloud-init status` reports it) when the agent can be neither
// installed nor started. A user-data can switch vendor-data off
// (vendor_data: {enabled: false}); the provider then cannot learn the address.
//
// It is not secret; it is typed Sensitive because Seed.VendorData is.
const GuestAgentVendorData provider.Sensitive = `#!/bin/sh
# egress-proxies-operator vendor-data: install and start the QEMU guest
# agent, through which the hypervisor reads this VM's addresses.
# Idempotent; fetches nothing but the distribution's own packages.
set -u

log() { echo "qemu-guest-agent vendor-data: $*" >&2; }

install_agent() {
	if command -v apt-get >/dev/null 2>&1; then
		export DEBIAN_FRONTEND=noninteractive
		# Wait for a boot-time apt run (unattended-upgrades) instead of failing.
		apt_get() { apt-get -o DPkg::Lock::Timeout=300 -y "$@"; }
		apt_get install --no-install-recommends qemu-guest-agent && return 0
		# Cloud images often ship without package lists.
		apt_get update && apt_get install --no-install-recommends qemu-guest-agent
	elif command -v dnf >/dev/null 2>&1; then
		dnf install -y qemu-guest-agent
	elif command -v yum >/dev/null 2>&1; then
		yum install -y qemu-guest-agent
	else
		log "no apt-get, dnf or yum: cannot install qemu-guest-agent"
		return 1
	fi
}

if command -v qemu-ga >/dev/null 2>&1; then
	log "qemu-ga is installed"
elif ! install_agent; then
	log "installing qemu-guest-agent failed"
	exit 1
fi

if command -v systemctl >/dev/null 2>&1; then
	# Debian's unit is static (udev starts it when the virtio port appears),
	# so enable may refuse it; start is what counts. is-enabled first: an
	# enable that syncs a SysV script runs update-rc.d, about 20 s on an
	# emulated guest, for nothing on a unit enabled or static already.
	systemctl is-enabled --quiet qemu-guest-agent ||
		systemctl enable qemu-guest-agent >/dev/null 2>&1 || true
	if ! systemctl start qemu-guest-agent; then
		log "starting qemu-guest-agent failed: does the VM have the guest agent channel?"
		exit 1
	fi
elif command -v service >/dev/null 2>&1; then
	if ! service qemu-guest-agent start; then
		log "starting qemu-guest-agent failed"
		exit 1
	fi
else
	log "neither systemctl nor service: cannot start qemu-guest-agent"
	exit 1
fi
log "qemu-guest-agent started"
`

// VendorData is the vendor-data of a VM: a script that, with a reporter,
// installs the serving reporter so configured (servingreport; a provider
// publishes to the file the hypervisor reads through the guest agent) and,
// with installAgent, then installs and starts the QEMU guest agent as
// GuestAgentVendorData does. The reporter comes first: its install never
// fails the script, and the agent's may. A provider asks for the reporter
// only for a Proxy's own cloud-init: the generated cloud-config installs
// it already, earlier (squid.CloudConfigParams.Reporter). Empty when it
// asks for neither.
func VendorData(reporter *servingreport.Config, installAgent bool) provider.Sensitive {
	switch {
	case reporter == nil && !installAgent:
		return ""
	case reporter == nil:
		return GuestAgentVendorData
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString(servingreport.Installer(*reporter))
	if installAgent {
		_, agent, _ := strings.Cut(GuestAgentVendorData.Reveal(), "\n")
		b.WriteString(agent)
	}
	return provider.Sensitive(b.String())
}

// OwnCloudInitReporter is the reporter a VM's vendor-data installs: one
// publishing to the guest-agent file for a Proxy that brings its own
// cloud-init, none otherwise (the generated cloud-config installs it,
// earlier: squid.CloudConfigParams.Reporter).
func OwnCloudInitReporter(req provider.CreateRequest, dest *egress.Policy) *servingreport.Config {
	if req.CloudInit == "" {
		return nil
	}
	return &servingreport.Config{Port: req.Port, Publish: servingreport.PublishFile, Echo: dest.Echo()}
}
