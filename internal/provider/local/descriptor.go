package local

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"

// Descriptor is the local provider type as the rest of the program sees it
// (registry.Descriptors lists it). It serves from the operator's own
// process: ready at once.
func Descriptor() descriptor.Descriptor {
	return descriptor.Descriptor{
		TypeNames: []string{Type},
		Type:      descriptor.TypeOf(Parse, New, PollInterval),
		Profile:   Profile(),
		Guide:     "architecture.md#6-the-local-provider",
	}
}
