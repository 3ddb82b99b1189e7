package local

import (
	"context"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
)

// TestConformance runs the shared contract suite against real listeners on
// loopback.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Name: testProviderName,
		Type: Type,
		New: func(t *testing.T, installation string) (provider.Provider, providertest.Backend) {
			p := newTestProvider(t, installation, 24)
			return p, newTestBackend(p)
		},
		Request: func(_ *testing.T, proxyName, uid string) provider.CreateRequest {
			return provider.CreateRequest{Namespace: "conformance", ProxyName: proxyName, UID: uid, Port: testPort()}
		},
	})
}

// testBackend acts on the provider's memory and listeners behind its back.
type testBackend struct {
	p      *Provider
	faults providertest.Faults
}

var (
	_ providertest.Backend   = (*testBackend)(nil)
	_ providertest.Inspector = (*testBackend)(nil)
	_ providertest.Stopper   = (*testBackend)(nil)
)

// newTestBackend installs the backend as p's fault seam.
func newTestBackend(p *Provider) *testBackend {
	b := &testBackend{p: p}
	p.fault = b.fault
	return b
}

// fault is the Provider's test seam: a queued failure first, then a hold.
func (b *testBackend) fault(ctx context.Context, op string) error {
	injected, err := b.faults.Next(ctx, op)
	if err != nil {
		return err
	}
	return injected
}

func (b *testBackend) Vanish(t *testing.T, id string) { stopServer(t, b.p, id, true) }

// Plant makes a serving instance, as a human starting one would.
func (b *testBackend) Plant(t *testing.T, name string, marks *provider.Marks) {
	plant(t, b.p, name, marks, testPort())
}

// FailNext queues a failure that already carries its class: local has no
// backend API whose errors need mapping, so the seam stands for a failure
// the provider classified at its source.
func (b *testBackend) FailNext(_ *testing.T, op string, class error) {
	b.faults.FailNext(op, provider.Errorf(class, "injected %s failure", op))
}

func (b *testBackend) Block(_ *testing.T, op string) func() { return b.faults.Block(op) }

func (b *testBackend) Inspect(_ *testing.T, name string) (*provider.Marks, bool) {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	in, ok := b.p.instances[name]
	if !ok {
		return nil, false
	}
	if in.marks == (provider.Marks{}) {
		return nil, true
	}
	m := in.marks
	return &m, true
}

func (b *testBackend) Stop(t *testing.T, id string) { stopServer(t, b.p, id, false) }
