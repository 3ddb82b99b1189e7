package main

import (
	"context"
	"fmt"
	"time"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The providers a run can soak (--provider).
const (
	providerKubernetes = "kubernetes"
	providerLibvirt    = "libvirt"
)

// backend is what a run needs of the provider it soaks: what stands in
// around it, the manager's providers config, the Proxies' spec, the count
// of what is left on it, and --inject-leak's instances made through the
// provider itself.
type backend interface {
	// prepare runs before the control plane: it finds the backend and
	// starts what the providers config must name (an image server).
	prepare(ctx context.Context) error
	// providersConfig is the manager's providers.yaml: one entry, entryName.
	providersConfig() string
	// namespaces are the ones the backend needs in the API server.
	namespaces() []string
	// start runs once the control plane is up (a stand-in kubelet).
	start(ctx context.Context) error
	// proxySpec is the spec of every new Proxy.
	proxySpec() egressv1.ProxySpec
	// kinds are the kinds of object count reports, in its order.
	kinds() []string
	// count lists what this installation left on the backend: by kind,
	// the objects whose UID names no Proxy of exists (UID -> name), and
	// the Proxies with more than one instance.
	count(ctx context.Context, exists map[string]string) (leaked map[string][]leak, duplicates []string, err error)
	// newInjector builds the provider --inject-leak creates through, as
	// the manager's entry is configured.
	newInjector() (provider.Provider, error)
	// settle waits, after the injector's Create of req, until the
	// instance is all there.
	settle(ctx context.Context, req provider.CreateRequest, inst provider.Instance) error
	// stop ends what prepare and start began, and removes what the run
	// left on the backend (after the count).
	stop(ctx context.Context) error
}

// leak is one object that outlived its Proxy.
type leak struct {
	desc string // names it for the report
	uid  string // its UID mark
}

// defaults are the flags whose best value depends on the provider, for
// those the command line did not set.
type defaults struct {
	cycles, concurrency, residents int
	residentMin, residentMax       time.Duration
	earlyMax                       time.Duration
	cycleTimeout, convergeTimeout  time.Duration
	// planWeights weigh the cycles' plans (cycles.go), in their order;
	// nil picks them alike.
	planWeights []int
}

// providerDefaults: the kubernetes provider's Pods are API objects, ready
// within a second; a libvirt guest boots under emulation on shared cores
// in one to ten minutes (Ready needs the guest agent's address), so fewer
// cycles run at once, a resident's replacement (a new guest) comes less
// often, the waits are longer, and half the cycles delete early: a delete
// within 20 s lands in the create steps (seed, overlay, define, start) or
// the boot, which is what the soak is for; a boot to Ready proves little
// more each time and costs minutes of CPU.
var providerDefaults = map[string]defaults{
	providerKubernetes: {
		cycles: 100, concurrency: 10, residents: 3,
		residentMin: 5 * time.Second, residentMax: 20 * time.Second,
		earlyMax:     3 * time.Second,
		cycleTimeout: 3 * time.Minute, convergeTimeout: 3 * time.Minute,
	},
	providerLibvirt: {
		cycles: 15, concurrency: 3, residents: 1,
		residentMin: 90 * time.Second, residentMax: 180 * time.Second,
		earlyMax:     20 * time.Second,
		cycleTimeout: 15 * time.Minute, convergeTimeout: 20 * time.Minute,
		// Ready then delete 1, delete early 3, change the spec 2.
		planWeights: []int{1, 3, 2},
	},
}

func (s *soak) newBackend() (backend, error) {
	switch s.opts.provider {
	case providerKubernetes:
		return &kubernetesBackend{s: s}, nil
	case providerLibvirt:
		return &libvirtBackend{s: s}, nil
	}
	return nil, fmt.Errorf("--provider %q: want %s or %s", s.opts.provider, providerKubernetes, providerLibvirt)
}
