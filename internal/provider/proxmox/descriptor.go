package proxmox

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"

// Descriptor is the proxmox provider type as the rest of the program sees it
// (registry.Descriptors lists it). It clones Proxmox VE templates over PVE's
// REST API: ready in a minute or so (clone, seed upload, boot).
func Descriptor() descriptor.Descriptor {
	return descriptor.Descriptor{
		TypeNames: []string{Type},
		Type:      descriptor.TypeOf(Parse, New, PollInterval),
		Profile:   Profile(),
		Guide:     "proxmox-provider.md",
	}
}
