package kubernetes

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"

// Descriptor is the kubernetes provider type as the rest of the program sees
// it (registry.Descriptors lists it). It runs Squid Pods in the operator's
// cluster: ready in seconds.
func Descriptor() descriptor.Descriptor {
	return descriptor.Descriptor{
		TypeNames: []string{Type},
		Type:      descriptor.TypeOf(Parse, New, PollInterval),
		Profile:   Profile(),
		Guide:     "kubernetes-provider.md",
		// The Role in the operator's namespace, or the ClusterRole for Pods in
		// each Proxy's own namespace (docs/kubernetes-provider.md).
		Components: []string{"kubernetes-provider", "kubernetes-provider-cluster-wide"},
	}
}
