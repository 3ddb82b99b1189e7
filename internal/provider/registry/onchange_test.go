package registry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"
)

// TestConfigChangeReportsOnlyChangedEntries: item 10, "a providers-config
// change enqueues only the Proxies of the entries that changed". OnChange
// is told the sorted names of the entries an Apply added, rebuilt or
// removed, never those it kept, and is not called when nothing changed.
func TestConfigChangeReportsOnlyChangedEntries(t *testing.T) {
	var built []*stub
	r := New(testTypes(&built), provider.Options{})
	var got []string
	r.OnChange(func(changed []string) { got = append(got, strings.Join(changed, ",")) })

	for _, step := range []struct{ what, config, want string }{
		{"first load", "providers:\n- {name: b, type: plain}\n- {name: a, type: plain}\n- {name: k, type: plain}\n", "a,b,k"},
		{"b changed, c added, a removed, k kept", "providers:\n- {name: k, type: plain}\n- {name: c, type: plain}\n- {name: b, type: plain, plain: {size: 2}}\n", "b,c,a"},
		{"the same again", "providers:\n- {name: k, type: plain}\n- {name: c, type: plain}\n- {name: b, type: plain, plain: {size: 2}}\n", ""},
		{"only k's type changed", "providers:\n- {name: k, type: checking}\n- {name: c, type: plain}\n- {name: b, type: plain, plain: {size: 2}}\n", "k"},
	} {
		got = nil
		if err := r.Apply(entries(t, r, step.config)); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		want := []string{}
		if step.want != "" {
			want = []string{sortedCSV(step.want)}
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: OnChange told %q, want %q", step.what, got, want)
		}
	}
	// A refused config changes nothing and tells nothing.
	got = nil
	if err := r.Apply(entries(t, r, "providers:\n- {name: k, type: plain, plain: {size: 0}}\n")); err == nil {
		t.Fatal("an invalid config was applied")
	}
	if len(got) != 0 {
		t.Errorf("a refused config told %q", got)
	}
}

func sortedCSV(s string) string {
	parts := strings.Split(s, ",")
	for i := range parts {
		for j := i + 1; j < len(parts); j++ {
			if parts[j] < parts[i] {
				parts[i], parts[j] = parts[j], parts[i]
			}
		}
	}
	return strings.Join(parts, ",")
}

// failingStub returns a plain error from every Get, naming nothing.
type failingStub struct{ stub }

func (f *failingStub) Get(context.Context, string) (provider.Instance, error) {
	return provider.Instance{}, errors.New("backend said no")
}

// Item 11: a provider used through the registry sits behind the method
// boundary: its errors name the configured entry and the operation, and
// each call writes an outcome line named after the type, although the
// provider itself names and logs nothing.
func TestEntriesAreBehindTheMethodBoundary(t *testing.T) {
	types := map[string]Type{"bare": descriptor.TypeOf(parseStub, func(name string, _ stubConfig, _ provider.Options) (*failingStub, error) {
		return &failingStub{stub{name: name}}, nil
	}, 0)}
	r := New(types, provider.Options{})
	t.Cleanup(r.Close)
	if err := r.Apply(entries(t, r, "providers:\n- {name: eu-pool, type: bare}\n")); err != nil {
		t.Fatal(err)
	}
	e, err := r.Get("eu-pool")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	ctx := logr.NewContext(context.Background(), funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{Verbosity: 1}))
	_, err = e.Provider.Get(ctx, "vm-1")
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Provider != "eu-pool" || pe.Op != provider.OpGet || !errors.Is(err, provider.ErrTransient) {
		t.Errorf("error %#v: want a Transient *provider.Error naming eu-pool and get", err)
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "bare ") || !strings.Contains(lines[0], `"msg"="get failed"`) || !strings.Contains(lines[0], `"provider"="eu-pool"`) {
		t.Errorf("log lines %q, want one get-failed line from logger bare", lines)
	}
	if _, ok := provider.Unwrap(e.Provider).(*failingStub); !ok {
		t.Errorf("Unwrap reaches %T, want the provider itself", provider.Unwrap(e.Provider))
	}
}

// watchingStub sees its instances change (provider.InstanceWatcher).
type watchingStub struct {
	stub
	changed func(id string)
}

func (w *watchingStub) WatchInstances(changed func(id string)) { w.changed = changed }

// A provider that watches its instances is given, as it is built, a
// callback that reaches every OnInstanceChange listener, rebuilt entries'
// providers included.
func TestInstanceChangesReachTheListeners(t *testing.T) {
	var built []*watchingStub
	types := map[string]Type{"watching": descriptor.TypeOf(parseStub, func(name string, _ stubConfig, _ provider.Options) (*watchingStub, error) {
		w := &watchingStub{stub: stub{name: name}}
		built = append(built, w)
		return w, nil
	}, 0)}
	r := New(types, provider.Options{})
	t.Cleanup(r.Close)
	var heard []string
	r.OnInstanceChange(func(id string) { heard = append(heard, "a:"+id) })
	r.OnInstanceChange(func(id string) { heard = append(heard, "b:"+id) })
	if err := r.Apply(entries(t, r, "providers:\n- {name: one, type: watching}\n- {name: two, type: watching}\n")); err != nil {
		t.Fatal(err)
	}
	if len(built) != 2 || built[0].changed == nil || built[1].changed == nil {
		t.Fatalf("built %d providers, callbacks %v", len(built), built)
	}
	built[0].changed("vm-1")
	built[1].changed("vm-2")
	if want := []string{"a:vm-1", "b:vm-1", "a:vm-2", "b:vm-2"}; !slices.Equal(heard, want) {
		t.Errorf("listeners heard %q, want %q", heard, want)
	}
}
