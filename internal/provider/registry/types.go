package registry

import (
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/local"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox"
)

// DefaultTypes is the constructor map of every provider type the operator
// ships. It is the allow-list of the providers config's `type` field.
func DefaultTypes() map[string]Type {
	return map[string]Type{
		// local serves from the operator's own process: ready at once.
		"local": TypeOf(local.Parse, local.New, local.PollInterval),
		// kubernetes runs Squid Pods in the operator's cluster: ready in
		// seconds.
		"kubernetes": TypeOf(kubernetes.Parse, kubernetes.New, kubernetes.PollInterval),
		// kvm and kvm2 run QEMU VMs on libvirt hosts over SSH: one
		// implementation under both names (the seeds' two libvirt
		// providers), which mark their instances alike, so an entry
		// switched between them keeps its instances. Ready in a minute or
		// two (an image download first, once per host).
		libvirt.TypeKVM:  TypeOf(libvirt.Parse, libvirt.New, libvirt.PollInterval),
		libvirt.TypeKVM2: TypeOf(libvirt.Parse, libvirt.New, libvirt.PollInterval),
		// gcp runs Compute Engine VMs in one project through the Compute
		// API: ready when the VM runs (tens of seconds), its firewall rule
		// and insert made in the background.
		gcp.Type: TypeOf(gcp.Parse, gcp.New, gcp.PollInterval),
		// proxmox clones Proxmox VE templates over PVE's REST API: ready
		// in a minute or so (clone, seed upload, boot).
		proxmox.Type: TypeOf(proxmox.Parse, proxmox.New, proxmox.PollInterval),
	}
}
