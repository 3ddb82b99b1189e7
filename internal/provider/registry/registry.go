// Package registry builds one provider per providers-config entry from the
// constructor map of provider types, wraps each in the decorators, and hands
// them out by configured name. The types it knows are exactly the keys of
// its Types map: there is no other allow-list.
package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
)

// Type is one provider type: how to read its config block and how to build
// a provider from it.
type Type struct {
	// Parse decodes the entry's <type> block strictly, fills the defaults
	// and validates; errors are under path. raw is nil when the entry has
	// no block.
	Parse func(raw json.RawMessage, path *field.Path) (any, field.ErrorList)
	// New builds the provider. It must not reach the backend: a backend
	// that is down at start must not stop the operator (the health loop
	// reports it instead).
	New func(name string, settings any, opts provider.Options) (provider.Provider, error)
	// PollInterval is how often the reconciler reads an instance that is
	// still provisioning: seconds for Pods, longer for VMs that boot.
	PollInterval time.Duration
}

// TypeOf adapts a typed parser and constructor to Type, so each provider
// package keeps its own config type.
func TypeOf[C any, P provider.Provider](
	parse func(json.RawMessage, *field.Path) (C, field.ErrorList),
	newFn func(string, C, provider.Options) (P, error),
	poll time.Duration,
) Type {
	return Type{
		Parse: func(raw json.RawMessage, path *field.Path) (any, field.ErrorList) { return parse(raw, path) },
		New: func(name string, settings any, opts provider.Options) (provider.Provider, error) {
			p, err := newFn(name, settings.(C), opts)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
		PollInterval: poll,
	}
}

// Entry is one configured provider, as the controllers use it.
type Entry struct {
	Name string
	Type string
	// Provider is the decorated provider.
	Provider provider.Provider
	// Checker is nil when the provider cannot check its backend.
	Checker provider.Checker
	// PollInterval comes from the type.
	PollInterval time.Duration
	// Revision changes whenever the entry is rebuilt with other settings,
	// so a failure latched on one configuration is retried on the next.
	Revision string

	raw    string // the entry's settings, to tell a changed entry on reload
	closer io.Closer
}

// Decorator wraps an entry's Provider and Checker (spans, metrics). It is
// applied once per entry when the entry is built, so provider code never
// repeats cross-cutting concerns.
type Decorator func(e *Entry)

// Registry holds the configured providers.
type Registry struct {
	types      map[string]Type
	opts       provider.Options
	decorators []Decorator

	mu      sync.RWMutex
	entries map[string]*Entry
	changed []func()
}

// New makes an empty registry over the given types.
func New(types map[string]Type, opts provider.Options, decorators ...Decorator) *Registry {
	return &Registry{types: types, opts: opts, decorators: decorators, entries: map[string]*Entry{}}
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
// whose type and settings are unchanged keep their provider (and its
// connections); changed and new ones are built; removed ones are closed.
// Nothing changes when any entry is invalid or fails to build.
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
	for _, p := range ps {
		if prev, ok := old[p.e.Name]; ok && prev.Type == p.e.Type && prev.raw == string(p.e.Settings) {
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
		e.raw = string(p.e.Settings)
		e.Revision = revision(p.e.Type, e.raw)
		built = append(built, e)
		next[p.e.Name] = e
	}

	r.mu.Lock()
	r.entries = next
	listeners := append([]func(){}, r.changed...)
	r.mu.Unlock()

	for name, e := range old {
		if next[name] != e {
			closeEntry(e)
		}
	}
	if len(built) > 0 || len(old) != len(next) {
		for _, f := range listeners {
			f()
		}
	}
	return nil
}

type parsed struct {
	e        config.Entry
	settings any
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
		ps = append(ps, parsed{e, s})
	}
	return ps, errs.ToAggregate()
}

func (r *Registry) build(name, typ string, settings any) (*Entry, error) {
	t := r.types[typ]
	p, err := t.New(name, settings, r.opts)
	if err != nil {
		return nil, err
	}
	e := &Entry{Name: name, Type: typ, Provider: p, PollInterval: t.PollInterval}
	if c, ok := p.(provider.Checker); ok {
		e.Checker = c
	}
	if c, ok := p.(io.Closer); ok {
		e.closer = c
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

func closeEntry(e *Entry) {
	if e.closer != nil {
		_ = e.closer.Close()
	}
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

// OnChange registers f to run after every change of the provider set, so
// that Proxies waiting for a provider are re-evaluated.
func (r *Registry) OnChange(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed = append(r.changed, f)
}

// Close closes every provider; the registry is empty afterwards. main calls
// it once the manager has stopped, so no reconcile still uses a provider.
func (r *Registry) Close() {
	r.mu.Lock()
	old := r.entries
	r.entries = map[string]*Entry{}
	r.mu.Unlock()
	for _, e := range old {
		closeEntry(e)
	}
}
