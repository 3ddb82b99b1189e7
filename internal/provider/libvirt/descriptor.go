package libvirt

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"

// Descriptor is the libvirt provider as the rest of the program sees it
// (registry.Descriptors lists it), under two type names: one
// implementation (the earlier kvm and kvm2 providers) that marks its
// instances alike under both, so an entry switched between them keeps its
// instances. It runs QEMU VMs on libvirt hosts over SSH: ready in a minute
// or two (an image download first, once per host).
func Descriptor() descriptor.Descriptor {
	return descriptor.Descriptor{
		TypeNames: []string{TypeKVM, TypeKVM2},
		Type:      descriptor.TypeOf(Parse, New, PollInterval),
		Profile:   Profile(),
		Guide:     "libvirt-provider.md",
	}
}
