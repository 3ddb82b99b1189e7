package registry

import (
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/local"
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
	}
}
