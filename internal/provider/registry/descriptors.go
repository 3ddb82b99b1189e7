package registry

import (
	"slices"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/local"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox"
)

// Descriptors lists every provider package the operator ships, one
// descriptor each, in the order docs/providers.md shows them (the embedded
// default, the cluster, the cloud, the hypervisors). It is the only list
// of provider packages: DefaultTypes, hack/providers-doc and the tests
// read it, so adding a provider adds one line here
// (docs/provider-contract.md, "Adding a provider").
func Descriptors() []descriptor.Descriptor {
	return []descriptor.Descriptor{
		local.Descriptor(),
		kubernetes.Descriptor(),
		gcp.Descriptor(),
		libvirt.Descriptor(),
		proxmox.Descriptor(),
	}
}

// DefaultTypes is the constructor map of every provider type the operator
// ships, keyed by type name, from Descriptors. It is the allow-list of the
// providers config's `type` field.
func DefaultTypes() map[string]Type {
	types := map[string]Type{}
	for _, d := range Descriptors() {
		t := d.Type
		// Whether entries may have an addressPool is the profile's
		// static-address axis, said once there.
		t.AddressPools = slices.Contains(d.Profile.StaticAddress.Values, profile.StaticAddressPool)
		for _, name := range d.TypeNames {
			types[name] = t
		}
	}
	return types
}
