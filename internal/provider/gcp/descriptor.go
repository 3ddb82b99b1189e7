package gcp

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"

// Descriptor is the gcp provider type as the rest of the program sees it
// (registry.Descriptors lists it). It runs Compute Engine VMs in one project
// through the Compute API: ready when the VM runs (tens of seconds), its
// firewall rule and insert made in the background.
func Descriptor() descriptor.Descriptor {
	return descriptor.Descriptor{
		TypeNames: []string{Type},
		Type:      descriptor.TypeOf(Parse, New, PollInterval),
		Profile:   Profile(),
		Guide:     "gcp-provider.md",
	}
}
