// Package providertest is the provider contract as a conformance suite. A
// provider's test builds a Harness over its own backend double (or the real
// backend) and calls Run; every rule of the contract that a backend can
// break is one named subtest, so a provider gets the contract tests for
// free and a failure names the rule.
package providertest

import (
	"context"
	"testing"
	"time"

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

// Inspector is an optional extension of Backend: a backend that can read an
// instance by name, whoever owns it, lets the suite prove that refused and
// foreign instances are left exactly as they were. Without it the suite
// proves the same indirectly (a second Create is still refused, which it
// would not be had the instance been deleted or re-marked).
type Inspector interface {
	// Inspect reports whether an instance named name exists and its marks
	// (nil when it carries none).
	Inspect(t *testing.T, name string) (marks *provider.Marks, exists bool)
}

// Stopper is an optional extension of Backend: a backend that can stop an
// instance behind the provider's back lets the suite prove that Create
// starts a Stopped instance it adopts.
type Stopper interface {
	// Stop puts the instance with this ID in the state the provider reports
	// as provider.StateStopped.
	Stop(t *testing.T, id string)
}

// Harness is what a provider's test gives the suite.
type Harness struct {
	// Name is the configured provider name the provider was built with.
	Name string
	// Type is the provider type, the name of its logger; empty means Name.
	Type string
	// New builds a fresh provider (and its backend) marked with the given
	// installation identity. The suite puts it behind the method boundary
	// (provider.WithBoundary(Name, Type, p)), as the registry does, so the
	// cases test the path the controllers call. Providers log through the
	// logger in each call's ctx (logr.FromContextOrDiscard); the suite puts
	// a capturing one there and reads it for leaked secrets, and in the leak
	// case it reads the global loggers too (see captureGlobalLogs: the test
	// binary must not call ctrl.SetLogger or klog.SetLogger itself).
	New func(t *testing.T, installation string) (provider.Provider, Backend)
	// Request returns a valid CreateRequest for this provider (placement,
	// port) for a Proxy with the given name and UID. The suite fills Name
	// (with provider.InstanceName), ProxyName and UID when they are empty,
	// and may append to CloudInit.
	Request func(t *testing.T, proxyName, uid string) provider.CreateRequest
	// WaitRunning polls Get until the instance runs, playing whatever part
	// of the world the backend needs (a kubelet marking a Pod Ready).
	// Nil means Get is polled with the provider alone.
	WaitRunning func(ctx context.Context, t *testing.T, p provider.Provider, id string) provider.Instance

	// StaticAddress is the address the StaticAddressIsTheInstanceAddress
	// case creates an instance with (CreateRequest.StaticAddress). A
	// harness sets it when the provider's profile says static-address:
	// pool and its backend's instances sit where such an address takes
	// effect: a double (StaticAddressFor gives the documentation-range
	// one), or a real host whose guests are on a network the test owns.
	// Nil skips the case, as for a provider whose profile says none, or the
	// real libvirt test host, whose guests are on QEMU's user-mode network.
	StaticAddress *provider.StaticAddress

	// PollTimeout bounds every wait for the backend to catch up (an
	// instance to run, a Delete that returned early to finish). Zero means
	// DefaultPollTimeout; a real backend that boots VMs sets minutes.
	PollTimeout time.Duration
	// CallTimeout bounds each single provider call, so that a hung call
	// fails its case by name instead of the whole test binary. Zero means
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// ClockSkew is how far the backend's clock (and its timestamp
	// resolution) may differ from the test's when CreatedAt is checked.
	// Zero means DefaultClockSkew.
	ClockSkew time.Duration
}

// Defaults for the Harness's bounds; they are liveness limits for a fast
// in-memory or loopback backend, not speed assertions.
const (
	DefaultPollTimeout = 30 * time.Second
	DefaultCallTimeout = 2 * time.Minute
	// DefaultClockSkew covers backends that store whole seconds
	// (Kubernetes' CreationTimestamp).
	DefaultClockSkew = 2 * time.Second
)

func (h Harness) typeName() string {
	if h.Type != "" {
		return h.Type
	}
	return h.Name
}

func (h Harness) pollTimeout() time.Duration { return orDefault(h.PollTimeout, DefaultPollTimeout) }
func (h Harness) callTimeout() time.Duration { return orDefault(h.CallTimeout, DefaultCallTimeout) }
func (h Harness) clockSkew() time.Duration   { return orDefault(h.ClockSkew, DefaultClockSkew) }

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
