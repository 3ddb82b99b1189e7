// Package registry builds one provider per providers-config entry from the
// constructor map of provider types, puts each behind the method boundary
// (provider.WithBoundary) and the decorators, and hands them out by
// configured name. The types it knows are exactly the keys of its Types
// map: there is no other allow-list.
package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"
)

// Type is one provider type as the registry builds it (Parse, New,
// PollInterval): a provider package's descriptor.Type, under the name the
// registry's callers use for the values of the map New takes.
type Type = descriptor.Type

// Entry is one configured provider, as the controllers use it.
type Entry struct {
	Name string
	Type string
	// Provider is the decorated provider: the decorators around the
	// in-flight count around the method boundary around the provider.
	// Checker, Secondary, Owned and Users have the same layers, each its own: the
	// optional interfaces are read here, never asserted on Provider.
	Provider provider.Provider
	// Checker is nil when the provider cannot check its backend.
	Checker provider.Checker
	// Secondary is nil when the provider keeps no secondary resources
	// (provider.SecondaryLister); the garbage collector lists and deletes
	// them through it.
	Secondary provider.SecondaryLister
	// Owned is nil when the provider cannot list one Proxy's objects by
	// its UID (provider.OwnerLister); a Proxy's deletion pass uses it.
	Owned provider.OwnerLister
	// Users is nil when the provider cannot give a running instance new
	// clientAuth users in place (provider.UsersUpdater); the reconciler
	// then replaces the instance when they change.
	Users provider.UsersUpdater
	// Mover is nil when the provider keeps no egress address by moving it
	// (provider.EgressAddressMover); the reconciler calls it at a
	// replacement's cutover.
	Mover provider.EgressAddressMover
	// Fronter is nil when the provider puts no front of its own before a
	// group's members (provider.GroupFronter); the group's controller
	// calls it on every pass and once the group is deleted.
	Fronter provider.GroupFronter
	// Peers is nil when the provider cannot tell a running group member
	// its new peers in place (provider.GroupPeersUpdater); the reconciler
	// then replaces a member whose peers change.
	Peers provider.GroupPeersUpdater
	// PollInterval comes from the type.
	PollInterval time.Duration
	// Revision changes whenever the entry is rebuilt with other settings,
	// so a failure latched on one configuration is retried on the next.
	Revision string

	// autoheal is the entry's autoheal block, swapped in place when only it
	// changes (the provider is kept); shared by copies of the entry.
	autoheal *atomic.Pointer[config.Autoheal]
	// pool is the entry's address pool, swapped in place like autoheal.
	pool *atomic.Pointer[AddressPool]

	settings any // as Parse returned them, to tell a changed entry on reload
	closer   io.Closer
	// calls is shared by copies of the entry, as its provider is.
	calls *inflight
}

// Decorator wraps an entry's Provider, Checker, Secondary, Owned and Users
// (spans, metrics), each on its own. It is applied once per entry when the entry is built, so
// provider code never repeats cross-cutting concerns.
type Decorator func(e *Entry)

// DefaultDrainTimeout is how long a replaced or removed provider stays open
// for the calls still inside it when Registry.DrainTimeout is not set: the
// reconciler's default provider call timeout, past which no call of the
// controllers is still running.
const DefaultDrainTimeout = 15 * time.Minute

// Registry holds the configured providers.
type Registry struct {
	// DrainTimeout bounds how long a replaced or removed entry's provider
	// stays open for the calls still inside it (a reconcile that got the
	// entry before the change); past it the provider is closed anyway and
	// Log says so. Zero means DefaultDrainTimeout. Set before Apply.
	DrainTimeout time.Duration
	// Log gets the registry's own lines. The zero Logger discards them.
	Log logr.Logger

	types      map[string]Type
	opts       provider.Options
	decorators []Decorator

	mu      sync.RWMutex
	entries map[string]*Entry
	changed []func(changed []string)

	// instanceChanges are the OnInstanceChange listeners, under their own
	// lock: a provider calls them from its goroutines, which a Close
	// under mu may be waiting for.
	watchMu         sync.Mutex
	instanceChanges []func(id string)

	// draining counts retired entries waiting for their calls to end;
	// stop, closed by Close, ends the wait.
	draining sync.WaitGroup
	stop     chan struct{}
	stopOnce sync.Once
}

// New makes an empty registry over the given types.
func New(types map[string]Type, opts provider.Options, decorators ...Decorator) *Registry {
	return &Registry{types: types, opts: opts, decorators: decorators, entries: map[string]*Entry{},
		stop: make(chan struct{})}
}

// TypeNames lists the known types, sorted.
func (r *Registry) TypeNames() []string {
	names := make([]string, 0, len(r.types))
	for n := range r.types {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ReadFile reads and validates the providers config at path, changing
// nothing: every error in the file is reported, each with its path.
func (r *Registry) ReadFile(path string) ([]config.Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("providers config: %w", err)
	}
	entries, err := parseAndValidate(r, data)
	if err != nil {
		return nil, fmt.Errorf("providers config %s: %w", path, err)
	}
	return entries, nil
}

func parseAndValidate(r *Registry, data []byte) ([]config.Entry, error) {
	entries, err := config.Parse(data, r.TypeNames())
	if err != nil {
		return nil, err
	}
	if err := r.Validate(entries); err != nil {
		return nil, err
	}
	return entries, nil
}

// Apply validates every entry first and then swaps the provider set: entries
// whose type and decoded settings are unchanged keep their provider (and its
// connections, and a local provider's listeners); changed and new ones are
// built; the providers of changed and removed ones are closed once the
// calls still inside them ended (see DrainTimeout). Nothing changes when
// any entry is invalid or fails to build. The OnChange listeners are told
// the names of the entries added, rebuilt or removed.
func (r *Registry) Apply(entries []config.Entry) error {
	ps, err := r.parse(entries)
	if err != nil {
		return err
	}

	r.mu.RLock()
	old := r.entries
	r.mu.RUnlock()

	next := make(map[string]*Entry, len(ps))
	var built []*Entry
	var repooled []string // kept entries whose pool changed: their Proxies are re-evaluated
	for _, p := range ps {
		if prev, ok := old[p.e.Name]; ok && prev.Type == p.e.Type && reflect.DeepEqual(prev.settings, p.settings) {
			if !reflect.DeepEqual(prev.AddressPool(), p.pool) {
				repooled = append(repooled, p.e.Name)
			}
			prev.SetAutoheal(p.e.Autoheal)
			prev.SetAddressPool(p.pool)
			next[p.e.Name] = prev
			continue
		}
		e, err := r.build(p.e.Name, p.e.Type, p.settings)
		if err != nil {
			for _, b := range built {
				closeEntry(b)
			}
			return fmt.Errorf("%s: %w", p.e.Path, err)
		}
		e.settings = p.settings
		e.SetAutoheal(p.e.Autoheal)
		e.SetAddressPool(p.pool)
		e.Revision = revision(p.e.Type, string(p.e.Settings))
		built = append(built, e)
		next[p.e.Name] = e
	}

	r.mu.Lock()
	r.entries = next
	listeners := append([]func([]string){}, r.changed...)
	r.mu.Unlock()

	changed := repooled
	for _, e := range built {
		changed = append(changed, e.Name)
	}
	for name, e := range old {
		if next[name] != e {
			r.retire(e)
			if next[name] == nil {
				changed = append(changed, name)
			}
		}
	}
	if len(changed) == 0 {
		return nil
	}
	sort.Strings(changed)
	for _, f := range listeners {
		f(changed)
	}
	return nil
}

// SetAutoheal replaces the entry's autoheal settings (Apply does, for an
// entry it keeps; tests build entries by hand).
func (e *Entry) SetAutoheal(a config.Autoheal) {
	if e.autoheal == nil {
		e.autoheal = &atomic.Pointer[config.Autoheal]{}
	}
	e.autoheal.Store(&a)
}

// Autoheal is the entry's autoheal settings as last applied.
func (e *Entry) Autoheal() config.Autoheal {
	if e.autoheal == nil {
		return config.Autoheal{}
	}
	if a := e.autoheal.Load(); a != nil {
		return *a
	}
	return config.Autoheal{}
}

type parsed struct {
	e        config.Entry
	settings any
	pool     *AddressPool
}

// Validate parses every entry's settings and reports all errors at once,
// without building anything: main runs it before it reaches the cluster.
func (r *Registry) Validate(entries []config.Entry) error {
	_, err := r.parse(entries)
	return err
}

func (r *Registry) parse(entries []config.Entry) ([]parsed, error) {
	var errs field.ErrorList
	ps := make([]parsed, 0, len(entries))
	for _, e := range entries {
		t, ok := r.types[e.Type]
		if !ok {
			errs = append(errs, field.NotSupported(e.Path.Child("type"), e.Type, r.TypeNames()))
			continue
		}
		s, fe := t.Parse(e.Settings, e.SettingsPath())
		errs = append(errs, fe...)
		if fe := checkAddressPool(e, t); fe != nil {
			errs = append(errs, fe)
		}
		pool, err := addressPoolOf(e.Name, e.AddressPool)
		if err != nil {
			errs = append(errs, field.Invalid(e.Path.Child("addressPool"), "", err.Error()))
		}
		ps = append(ps, parsed{e: e, settings: s, pool: pool})
	}
	return ps, errs.ToAggregate()
}

// build makes the entry's provider and wraps each of its pieces (the
// Provider, and the Checker, Secondary, Owned and Users it may have), innermost
// first: the method boundary, the in-flight count, then the decorators.
func (r *Registry) build(name, typ string, settings any) (*Entry, error) {
	t := r.types[typ]
	p, err := t.New(name, settings, r.opts)
	if err != nil {
		return nil, err
	}
	e := &Entry{Name: name, Type: typ, PollInterval: t.PollInterval, calls: &inflight{}}
	if c, ok := p.(io.Closer); ok {
		e.closer = c
	}
	if w, ok := p.(provider.InstanceWatcher); ok {
		w.WatchInstances(r.instanceChanged)
	}
	b := provider.WithBoundary(name, typ, p)
	e.Provider = &counted{inner: b.Provider, calls: e.calls}
	if b.Checker != nil {
		e.Checker = &countedChecker{inner: b.Checker, calls: e.calls}
	}
	if b.Secondary != nil {
		e.Secondary = &countedSecondary{inner: b.Secondary, calls: e.calls}
	}
	if b.Owned != nil {
		e.Owned = &countedOwner{inner: b.Owned, calls: e.calls}
	}
	if b.Users != nil {
		e.Users = &countedUsers{inner: b.Users, calls: e.calls}
	}
	if b.Mover != nil {
		e.Mover = &countedMover{inner: b.Mover, calls: e.calls}
	}
	if b.Fronter != nil {
		e.Fronter = &countedFronter{inner: b.Fronter, calls: e.calls}
	}
	if b.Peers != nil {
		e.Peers = &countedPeers{inner: b.Peers, calls: e.calls}
	}
	for _, d := range r.decorators {
		d(e)
	}
	return e, nil
}

func revision(typ, raw string) string {
	sum := sha256.Sum256([]byte(typ + "\x00" + raw))
	return hex.EncodeToString(sum[:8])
}

// closeEntry closes e's provider, once however often it is called.
func closeEntry(e *Entry) {
	e.calls.closed.Do(func() {
		if e.closer != nil {
			_ = e.closer.Close()
		}
	})
}

// retire closes e once the calls inside it have ended, or once
// DrainTimeout has passed, or at Close, whichever comes first: at once
// when no call is inside, else from a goroutine, so Apply never waits for
// a call.
func (r *Registry) retire(e *Entry) {
	idle := e.calls.retire()
	select {
	case <-idle:
		closeEntry(e)
		return
	default:
	}
	bound := r.DrainTimeout
	if bound <= 0 {
		bound = DefaultDrainTimeout
	}
	r.draining.Add(1)
	go func() {
		defer r.draining.Done()
		timer := time.NewTimer(bound)
		defer timer.Stop()
		select {
		case <-idle:
		case <-r.stop:
		case <-timer.C:
			r.Log.Info("closing a replaced or removed provider with calls still in flight",
				"provider", e.Name, "type", e.Type, "inFlight", e.calls.count(), "drainTimeout", bound)
		}
		closeEntry(e)
	}()
}

// ErrUnknownProvider is returned by Get for a name that is not configured.
var ErrUnknownProvider = errors.New("no provider with this name in the providers config")

// Get returns the entry configured under name.
func (r *Registry) Get(name string) (*Entry, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProvider, name)
	}
	return e, nil
}

// Entries returns every configured entry, sorted by name.
func (r *Registry) Entries() []*Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Entry, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// OnChange registers f to run after every change of the provider set with
// the sorted names of the entries added, rebuilt or removed (never the
// unchanged ones), so that the Proxies of those entries are re-evaluated.
// f runs inside Apply: it must not block.
func (r *Registry) OnChange(f func(changed []string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed = append(r.changed, f)
}

// OnInstanceChange registers f to run with an instance's ID each time its
// provider sees it change by itself (provider.InstanceWatcher), so that
// its Proxy is read at once. f runs on the provider's goroutine: it must
// not block.
func (r *Registry) OnInstanceChange(f func(id string)) {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	r.instanceChanges = append(r.instanceChanges, f)
}

// instanceChanged tells the OnInstanceChange listeners.
func (r *Registry) instanceChanged(id string) {
	r.watchMu.Lock()
	fs := r.instanceChanges
	r.watchMu.Unlock()
	for _, f := range fs {
		f(id)
	}
}

// Close closes every provider, those still draining after a change
// included, without waiting for calls: main calls it once the manager has
// stopped, so no reconcile still uses a provider. The registry is empty
// afterwards.
func (r *Registry) Close() {
	r.mu.Lock()
	old := r.entries
	r.entries = map[string]*Entry{}
	r.mu.Unlock()
	r.stopOnce.Do(func() { close(r.stop) })
	for _, e := range old {
		closeEntry(e)
	}
	r.draining.Wait()
}
