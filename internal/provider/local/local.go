// Package local is the embedded default provider. Each instance is an HTTP
// forward proxy (plain HTTP and CONNECT) served by the operator process
// itself, on its own loopback address taken from a configured range inside
// 127.0.0.0/8, so that every Proxy gets a distinct IP and listens on its own
// port the way a VM would. Destinations follow the entry's egress policy:
// loopback, link-local and private ranges are refused unless the entry
// allows them, CONNECT reaches port 443 only. It needs no cloud and no hypervisor: a newcomer
// can run the whole operator end to end, and the reconciler and the
// conformance suite get a real, fast backend.
//
// Instances live in memory only. After an operator restart they are gone and
// Get says NotFound; the reconciler then creates them again. That is by
// design: there is nothing to leak outside the process.
package local

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/echowatch"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// Type is the provider type name used in the providers config.
const Type = "local"

// PollInterval is the pace at which the reconciler should poll Get. Create
// returns a Running instance, so polling only happens after a failure.
const PollInterval = time.Second

// idPrefix starts every instance ID.
const idPrefix = "instances/"

// Provider serves instances on loopback addresses. It implements
// provider.Provider, provider.Checker and io.Closer.
type Provider struct {
	name   string
	opts   provider.Options
	cidr   netip.Prefix
	usable int

	// policy is the entry's destination policy; each instance narrows it
	// to its Proxy's rules (parseACL).
	policy *egress.Policy
	// upstream's lookup and dial are test seams, nil in production.
	upstream upstream
	// echo observes the egress address when the entry names an
	// egressIPEcho; nil when it names none. Every instance's proxy runs in
	// the operator's process and dials from its host, so all of them
	// egress from the address the echo answers this host: one watch,
	// asked directly (through an instance's listener the policy, which
	// refuses an internal echo to a proxy's clients, would refuse it).
	echo *echowatch.Watch

	// watch is the registry's InstanceWatcher callback (nil until set):
	// told when a listener stops by itself.
	watch atomic.Pointer[func(id string)]
	// fault is a test seam consulted at the start of every operation: a
	// non-nil error fails the call (see conformance_test.go). Nil in
	// production.
	fault func(ctx context.Context, op string) error
	// beforeCheckDial is a test seam Check calls before it dials each
	// instance's listener, outside p.mu (see check_test.go). Nil in
	// production.
	beforeCheckDial func(name string)

	mu        sync.Mutex
	instances map[string]*instance
	// bound is the instance listening on each address (an entry may be
	// stale: holds checks it), and low the lowest address that may be
	// free (bind).
	bound  map[netip.Addr]*instance
	low    netip.Addr
	closed bool
	// servers counts servers that have not finished draining, including
	// those of deleted instances whose Delete gave up on its ctx, so that
	// Close returns only when no handler is left running.
	servers sync.WaitGroup
}

// instance is one recorded instance. Every field is guarded by Provider.mu.
type instance struct {
	name      string
	marks     provider.Marks
	createdAt time.Time
	// ip and srv are set while the instance serves; a record with no srv is
	// Stopped, and Create adopts and starts it again.
	ip  netip.Addr
	srv *server
}

var (
	_ provider.Provider    = (*Provider)(nil)
	_ provider.Checker     = (*Provider)(nil)
	_ provider.OwnerLister = (*Provider)(nil)
	_ io.Closer            = (*Provider)(nil)
)

// New builds a provider named name (the configured name, used in every error
// and log line). It does no I/O: listeners open on Create.
func New(name string, cfg Config, opts provider.Options) (*Provider, error) {
	cfg.Default()
	if errs := cfg.Validate(nil); len(errs) > 0 {
		return nil, provider.Wrap(name, "new", provider.ErrPermanent, errs.ToAggregate())
	}
	cidr := netip.MustParsePrefix(cfg.BindCIDR) // Validate proved it parses
	p := &Provider{
		name:      name,
		opts:      opts,
		cidr:      cidr,
		usable:    usableAddresses(cidr),
		policy:    cfg.Settings.Policy(),
		instances: map[string]*instance{},
		bound:     map[netip.Addr]*instance{},
	}
	if e := p.policy.Echo(); !e.IsZero() {
		p.echo = echowatch.New(e, nil)
	}
	return p, nil
}

// Close shuts every listener and ends every connection and the echo's
// ask, then waits for the handlers and the echo's goroutine to return. The
// operator calls it at shutdown; later calls of any method fail with a
// Transient error.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	for _, in := range p.instances {
		if in.srv != nil {
			in.srv.close()
		}
	}
	p.mu.Unlock()
	// No echo goroutine starts once closed is set (Observe runs under p.mu
	// after the closed check), nor after Stop.
	if p.echo != nil {
		p.echo.Stop()
	}
	// No server is added once closed is set (start checks it under p.mu), so
	// this Wait cannot race an Add.
	p.servers.Wait()
	return nil
}

// WatchInstances implements provider.InstanceWatcher: a listener that
// stops by itself (its instance reads Stopped from then on) is told at
// once.
func (p *Provider) WatchInstances(changed func(id string)) { p.watch.Store(&changed) }

// changed tells the watcher, if any, that instance id changed.
func (p *Provider) changed(id string) {
	if f := p.watch.Load(); f != nil {
		(*f)(id)
	}
}

// instanceID is the ID of the instance named name.
func instanceID(name string) string { return idPrefix + name }

// parseID returns the instance name an ID carries, or a Permanent error
// naming the malformed ID.
func parseID(id string) (string, error) {
	name, ok := strings.CutPrefix(id, idPrefix)
	if !ok || name == "" || len(validation.IsDNS1123Label(name)) > 0 {
		return "", provider.Errorf(provider.ErrPermanent,
			"malformed instance ID %q: want %q followed by an instance name", id, idPrefix)
	}
	return name, nil
}

// errClosed is what every call after Close returns: the operator is shutting
// down, so this is Transient rather than a latch.
var errClosed = errors.New("provider is closed")

// begin starts operation op: a cancelled ctx or an injected fault ends it at
// once, before anything is touched.
func (p *Provider) begin(ctx context.Context, op string) error {
	if err := provider.CtxErr(ctx, p.name, op); err != nil {
		return err
	}
	if p.fault != nil {
		if err := p.fault(ctx, op); err != nil {
			return p.wrap(op, provider.ErrTransient, err)
		}
	}
	return nil
}

// ours says whether marks are this installation's managed mark.
func (p *Provider) ours(m provider.Marks) bool {
	return m.Managed && m.Installation == p.opts.InstallationID
}

// view is in.view with the egress address of a Running instance, the
// provider's echo observation (echowatch); the caller holds p.mu and has seen
// p.closed false.
func (p *Provider) view(in *instance) provider.Instance {
	v := in.view()
	if p.echo != nil && v.State == provider.StateRunning {
		v.Egress = p.echo.Observe()
	}
	return v
}

// view is the contract's picture of in; the caller holds p.mu.
func (in *instance) view() provider.Instance {
	v := provider.Instance{ID: instanceID(in.name), UID: in.marks.UID, CreatedAt: in.createdAt}
	if in.srv != nil && in.srv.alive() {
		// The serving signal is the listener itself: it answers while it
		// serves, and a listener that stopped is a Stopped instance.
		v.State, v.IP, v.Serving = provider.StateRunning, in.ip.String(), provider.ServingAnswering
	} else {
		v.State = provider.StateStopped
	}
	return v
}

// StopListener closes the listener of instance id behind the provider's
// back, as a listener that failed would stop: its instance reads Stopped,
// the watcher is told, and Create starts it again. It is for fault drills
// (test/drills); false when there is no such listener.
func (p *Provider) StopListener(id string) bool {
	name, err := parseID(id)
	if err != nil {
		return false
	}
	p.mu.Lock()
	in, ok := p.instances[name]
	var srv *server
	if ok {
		srv = in.srv
	}
	p.mu.Unlock()
	if srv == nil {
		return false
	}
	_ = srv.ln.Close() // Serve returns on its own, as on a failure
	return true
}
