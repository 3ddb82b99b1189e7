package gcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/inflight"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/keyedlock"
)

// Type is the provider type name (its Descriptor).
const Type = "gcp"

// PollInterval is the pace at which the reconciler polls Get while an
// instance provisions: a Compute Engine VM reaches RUNNING in tens of
// seconds.
const PollInterval = 10 * time.Second

// Provider runs instances as Compute Engine VMs in one project. It
// implements provider.Provider, provider.Checker, provider.SecondaryLister
// (the managed firewall rules and reserved egress addresses),
// provider.EgressAddressMover (address.go) and io.Closer.
type Provider struct {
	name string
	opts provider.Options
	cfg  Config
	// dest is what the instances' Squid lets clients reach.
	dest *egress.Policy
	// netProject and netPath are the network's project (the firewall
	// rules' project, the host project of a Shared VPC) and path; sub is
	// the subnetwork, nil for the network's default.
	netProject, netPath string
	sub                 *subnet

	creds *credentialSource
	calls callRegistry

	// names serialises Create, Delete and DeleteSecondary of one instance
	// name; steps runs each Create's slow part (the firewall rule, the
	// insert and its operation) in the background; creating says which
	// zone and Proxy each running step is for, so that ListByTag lists an
	// instance from its first moment.
	names    keyedlock.Locks
	steps    *inflight.Table
	creating inflight.Set[creatingInstance]
	// deleting runs each Delete's slow part (its operation followed to
	// the end, then the firewall rule): while it runs Delete submits
	// nothing more (overlapping deletes draw 403 rateLimitExceeded), and
	// Get never reads the instance as Running.
	deleting *inflight.Table
	// sentInserts are the inserts of create steps cancelled before they
	// saw them end, for the Delete that cancelled them (meetInsert).
	sentInserts inflight.Set[sentInsert]

	// mu guards the memory below, which a restart may lose: it only
	// makes answers more precise, and nothing is wrong without it.
	mu sync.Mutex
	// inserts are the insert attempts of names whose last insert failed:
	// each failed operation moves the next insert to a new request ID
	// (the same ID would only replay the failed operation), and Get reads
	// an instance whose insert failed as Stopped, so that the reconciler's
	// next Create tries again without an "instance lost" event.
	inserts map[string]*insertMemo
	// regions are those this process has placed or read instances in,
	// beside the configured zones' (the Checker's quota details).
	regions map[string]bool
	// serving is the last serving signal read per instance ID (serving.go:
	// at most one getGuestAttributes per instance per report interval).
	serving map[string]servingMemo
	// owedEphemeral are the instances that gave a group's egress address
	// up in a move and have no external address since: each gets an
	// ephemeral one back (address.go, giveEphemeralBack), by the move that
	// took the address or, when that failed, by the next move.
	owedEphemeral map[string]bool

	// built is the lazily made client: nothing is made or read before
	// the first call (constructors do not reach the backend).
	buildMu sync.Mutex
	built   *clientSet
	closed  bool

	// Test seams: the base transport (nil: a clone of
	// http.DefaultTransport), a wrapper around it (fault injection), the
	// tracer provider (nil: the global one) and a hook told about every
	// create step started, with its Done channel.
	baseTransport  http.RoundTripper
	wireSeam       func(http.RoundTripper) http.RoundTripper
	tracerProvider trace.TracerProvider
	onStepStarted  func(name string, done <-chan struct{})
	now            func() time.Time
}

var (
	_ provider.Provider           = (*Provider)(nil)
	_ provider.Checker            = (*Provider)(nil)
	_ provider.SecondaryLister    = (*Provider)(nil)
	_ provider.EgressAddressMover = (*Provider)(nil)
	_ io.Closer                   = (*Provider)(nil)
)

type insertMemo struct {
	attempt int
	failed  string // the last failure, for Get's progress
}

// clientSet is the built client: the seam and the transports to close.
type clientSet struct {
	api       computeAPI
	transport http.RoundTripper
}

// New builds a provider named name (the configured name, used in every
// error and log line) from a parsed config. It does no I/O: no credential
// is read and no API is called until a call needs one, so a Secret that is
// missing at start does not stop the operator; the health loop reports it.
func New(name string, cfg Config, opts provider.Options) (*Provider, error) {
	cfg.Default()
	if errs := cfg.Validate(nil); len(errs) > 0 {
		return nil, provider.Wrap(name, "new", provider.ErrPermanent, errs.ToAggregate())
	}
	p := &Provider{
		name:     name,
		opts:     opts,
		cfg:      cfg,
		dest:     cfg.Settings.Policy(),
		steps:    inflight.New(provider.OpCreate),
		deleting: inflight.New(provider.OpDelete),
		inserts:  map[string]*insertMemo{},
		regions:  map[string]bool{},
		serving:  map[string]servingMemo{},
		now:      time.Now,
	}
	p.netProject, p.netPath, _ = parseNetwork(cfg.Project, cfg.Network) // Validate proved it
	if cfg.Subnetwork != "" {
		sn, _ := parseSubnetwork(cfg.Project, cfg.Subnetwork)
		p.sub = &sn
	}
	p.creds = newCredentialSource(cfg.CredentialsFile, nil)
	return p, nil
}

// client returns the seam, building it at first use.
func (p *Provider) client() (computeAPI, error) {
	p.buildMu.Lock()
	defer p.buildMu.Unlock()
	if p.closed {
		return nil, provider.Errorf(provider.ErrTransient, "provider %q is closed", p.name)
	}
	if p.built != nil {
		return p.built.api, nil
	}
	base := p.baseTransport
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	if p.wireSeam != nil {
		base = p.wireSeam(base)
	}
	// Tokens are fetched with the request's ctx, so their requests are
	// observed too, under their own line.
	p.creds.client = &http.Client{Transport: httpobserve.Transport(base, tokenCallLine, p.tracerProvider)}
	rt := p.calls.transport(p.observeTransport(&authTransport{src: p.creds, next: base}))
	api, err := newSDKAPI(p.cfg.Project, p.netProject, p.cfg.Endpoint, &http.Client{Transport: rt})
	if err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "building the Compute API clients: %v", err)
	}
	p.built = &clientSet{api: &budgeted{inner: api, calls: &p.calls}, transport: base}
	return p.built.api, nil
}

// Close stops the create steps in flight and closes the API clients (the
// earlier providers never closed theirs). The registry calls it when the entry is
// removed or rebuilt and at shutdown; later calls fail Transient.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), inflight.StopBound)
	defer cancel()
	err := errors.Join(p.steps.Close(ctx), p.deleting.Close(ctx))
	p.buildMu.Lock()
	defer p.buildMu.Unlock()
	p.closed = true
	if p.built != nil {
		err = errors.Join(err, p.built.api.Close())
		if t, ok := p.built.transport.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
		p.built = nil
	}
	return err
}

func (p *Provider) String() string {
	return fmt.Sprintf("gcp provider %q (project %s)", p.name, p.cfg.Project)
}

// ---- memory ----

func (p *Provider) noteRegion(region string) {
	if region == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.regions[region] = true
}

// regionsInUse are the configured zones' regions and those seen, sorted.
func (p *Provider) regionsInUse() []string {
	set := map[string]bool{}
	for _, z := range p.cfg.Zones {
		set[regionOf(z)] = true
	}
	if p.cfg.DefaultZone != "" {
		set[regionOf(p.cfg.DefaultZone)] = true
	}
	p.mu.Lock()
	for r := range p.regions {
		set[r] = true
	}
	p.mu.Unlock()
	out := make([]string, 0, len(set))
	for r := range set {
		if r != "" {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

func (p *Provider) insertAttempt(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.inserts[name]; m != nil {
		return m.attempt
	}
	return 0
}

// insertFailed records a failed insert operation: the next insert uses the
// next request ID.
func (p *Provider) insertFailed(name string, err error) { p.nextInsert(name, errText(err)) }

// nextInsertAttempt makes the next insert of name a new one (the next
// request ID) without a failure to report.
func (p *Provider) nextInsertAttempt(name string) { p.nextInsert(name, "") }

// nextInsert moves name's inserts to the next request ID, recording failed
// (the failure Get reports, or none).
func (p *Provider) nextInsert(name, failed string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.inserts[name]
	if m == nil {
		m = &insertMemo{}
		p.inserts[name] = m
	}
	m.attempt++
	m.failed = failed
}

// lastInsertFailure is the failure of name's last insert, if it failed.
func (p *Provider) lastInsertFailure(name string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.inserts[name]; m != nil && m.failed != "" {
		return m.failed, true
	}
	return "", false
}

// clearInsertFailure keeps the attempt but forgets the failure: a new
// create step is on its way.
func (p *Provider) clearInsertFailure(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.inserts[name]; m != nil {
		m.failed = ""
	}
}

func (p *Provider) forgetInsert(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inserts, name)
}

// creatingInstance is a create step in flight, as ListByTag and Get report
// it.
type creatingInstance struct {
	zone  string
	uid   string
	since time.Time
}
