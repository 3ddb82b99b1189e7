package providertest

import (
	"context"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Backend lets the suite act on a provider's backend behind the provider's
// back, the way the world does: someone deletes an instance, someone made an
// instance with the same name, the backend fails.
type Backend interface {
	// Vanish removes the instance with this ID outside the provider, as a
	// human or a crashed host would.
	Vanish(t *testing.T, id string)
	// Plant makes an instance named name outside the provider, so that
	// Create finds it. marks nil means an instance with no marks at all.
	Plant(t *testing.T, name string, marks *provider.Marks)
	// FailNext makes the backend fail the next call of op (one of the
	// provider.Op* names) in a way the provider must classify as class.
	FailNext(t *testing.T, op string, class error)
	// Block makes the backend hang every call of op until release is
	// called, so the suite can prove that ctx ends a call that is stuck.
	// A backend that cannot hang returns nil and the case is skipped.
	Block(t *testing.T, op string) (release func())
}

// Harness is what a provider's test gives the suite.
type Harness struct {
	// Name is the configured provider name the provider was built with.
	Name string
	// New builds a fresh provider (and its backend) marked with the given
	// installation identity. Providers log through the logger in each call's
	// ctx (logr.FromContextOrDiscard); the suite puts a capturing one there
	// and reads it for leaked secrets.
	New func(t *testing.T, installation string) (provider.Provider, Backend)
	// Request returns a valid CreateRequest for this provider (placement,
	// port) for a Proxy with the given name and UID.
	Request func(t *testing.T, proxyName, uid string) provider.CreateRequest
	// WaitRunning polls Get until the instance runs, playing whatever part
	// of the world the backend needs (a kubelet marking a Pod Ready).
	// Nil means Get is polled with the provider alone.
	WaitRunning func(ctx context.Context, t *testing.T, p provider.Provider, id string) provider.Instance
}
