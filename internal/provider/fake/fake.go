package fake

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// idPrefix starts every ID: "fake/<instance name>".
const idPrefix = "fake/"

// ID returns the ID the fake gives the instance named name, for tests that
// expect one.
func ID(name string) string { return idPrefix + name }

// parseID returns the instance name in id; a malformed ID is Permanent, as
// no retry can make it valid.
func parseID(id string) (string, error) {
	name, ok := strings.CutPrefix(id, idPrefix)
	if !ok {
		return "", provider.Errorf(provider.ErrPermanent, "malformed id %q: want %s<name>", id, idPrefix)
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return "", provider.Errorf(provider.ErrPermanent, "malformed id %q: %s", id, strings.Join(errs, "; "))
	}
	return name, nil
}

// Provider is one configured fake provider, bound to one installation, over
// a Backend it may share with others. Its knobs and records are safe for
// concurrent use; Reset clears them.
type Provider struct {
	name         string
	installation string
	backend      *Backend

	mu               sync.Mutex
	queued           map[string][]error
	persistent       map[string]error
	gates            map[string]*gate
	provisioningGets int
	deletingGets     int
	checkResult      provider.CheckResult
	calls            map[string]int
	createRequests   []provider.CreateRequest
	secondary        secondaryRecords

	slow  slowMode  // HoldCreate, Crash: slow.go
	chaos chaosMode // SetChaos: chaos.go
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Checker  = (*Provider)(nil)
)

// New returns a fake provider named name (the configured name its errors
// carry) over backend, marking and listing instances with
// opts.InstallationID. A nil backend gets the provider a fresh one of its
// own.
func New(name string, backend *Backend, opts provider.Options) *Provider {
	if backend == nil {
		backend = NewBackend()
	}
	p := &Provider{name: name, installation: opts.InstallationID, backend: backend}
	p.resetLocked()
	return p
}

// DefaultCheckResult is what Check reports until SetCheckResult.
func DefaultCheckResult() provider.CheckResult {
	return provider.CheckResult{
		Healthy: true, Reason: provider.ReasonHealthy, Message: "fake backend reachable",
		Target: "fake", Address: "in-memory",
	}
}

// Name is the configured name the provider was built with.
func (p *Provider) Name() string { return p.name }

// Backend is the world this provider runs on.
func (p *Provider) Backend() *Backend { return p.backend }

// --- knobs ---

// FailNext queues err for the next call of op (a provider.Op* name);
// queued errors are used in order, one per call, before any SetError. The
// call returns err wrapped with this provider's name and op; an err without
// a class (a bare provider.ErrQuotaExceeded counts as classed) is
// Transient, as an unknown backend error would be.
func (p *Provider) FailNext(op string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queued[op] = append(p.queued[op], err)
}

// SetError makes every call of op fail with err until Reset or
// SetError(op, nil).
func (p *Provider) SetError(op string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.persistent, op)
		return
	}
	p.persistent[op] = err
}

// SetProvisioningGets makes the instances the next Creates make (or the
// Stopped ones they start) report Provisioning, without an IP, for n Gets
// before Running; Create then returns at once, like a provider that
// submits. 0, the default, makes them Running when Create returns, like a
// provider that blocks.
func (p *Provider) SetProvisioningGets(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.provisioningGets = max(n, 0)
}

// SetDeleteReturnsEarly makes Delete return before the instance is gone:
// the next deletingGets Gets still see it (Terminated, no IP), ListByTag
// lists it until then, and a Create of its name is Transient; the Get after
// those is NotFound. 0, the default, makes Delete finish before it returns.
func (p *Provider) SetDeleteReturnsEarly(deletingGets int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deletingGets = max(deletingGets, 0)
}

// Block makes every call of op (including OpCheck) hang until release is
// called or the call's ctx ends; the call is counted before it hangs, so a
// test can wait for Calls(op) to know it is parked. release may be called
// more than once; Reset releases every block.
func (p *Provider) Block(op string) (release func()) {
	g := &gate{ch: make(chan struct{})}
	p.mu.Lock()
	p.gates[op] = g
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		if p.gates[op] == g {
			delete(p.gates, op)
		}
		p.mu.Unlock()
		g.open()
	}
}

// gate holds the calls of one Block; both its release and Reset open it,
// hence the once.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// SetCheckResult sets what Check reports while nothing fails.
func (p *Provider) SetCheckResult(r provider.CheckResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.Details = maps.Clone(r.Details)
	p.checkResult = r
}

// SetState forces an instance's state behind the provider's back; see
// Backend.SetState.
func (p *Provider) SetState(name string, state provider.State) bool {
	return p.backend.SetState(name, state)
}

// Remove deletes an instance behind the provider's back; see
// Backend.Remove.
func (p *Provider) Remove(name string) bool { return p.backend.Remove(name) }

// --- records ---

// Calls returns how many calls of op (a provider.Op* name) the provider
// received, failed and cancelled ones included.
func (p *Provider) Calls(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[op]
}

// CreateRequests returns every request Create received, in order, failed
// ones included.
func (p *Provider) CreateRequests() []provider.CreateRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]provider.CreateRequest, len(p.createRequests))
	for i, r := range p.createRequests {
		r.AllowedSourceRanges = slices.Clone(r.AllowedSourceRanges)
		out[i] = r
	}
	return out
}

// Reset clears every knob and record and releases every Block and every
// HoldCreate (the held steps then finish their instances). The
// backend's instances stay: they are the world, not the provider's script.
func (p *Provider) Reset() {
	p.releaseHolds()
	p.chaos.reset()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.gates {
		g.open()
	}
	p.resetLocked()
}

// resetLocked puts every knob and record back to its default.
func (p *Provider) resetLocked() {
	p.queued = map[string][]error{}
	p.persistent = map[string]error{}
	p.gates = map[string]*gate{}
	p.provisioningGets, p.deletingGets = 0, 0
	p.checkResult = DefaultCheckResult()
	p.calls = map[string]int{}
	p.createRequests = nil
	p.secondary = secondaryRecords{}
}
