package registry

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"
)

// stub is a provider that records whether it was closed.
type stub struct {
	name   string
	size   int
	closed atomic.Bool
}

func (s *stub) Create(context.Context, provider.CreateRequest) (provider.Instance, error) {
	return provider.Instance{}, nil
}
func (s *stub) Get(context.Context, string) (provider.Instance, error) {
	return provider.Instance{}, nil
}
func (s *stub) Delete(context.Context, string) error                   { return nil }
func (s *stub) ListByTag(context.Context) ([]provider.Instance, error) { return nil, nil }
func (s *stub) Close() error                                           { s.closed.Store(true); return nil }

type checkingStub struct{ stub }

func (c *checkingStub) Check(context.Context) provider.CheckResult { return provider.CheckResult{} }

type stubConfig struct {
	Size int `json:"size"`
}

func parseStub(raw json.RawMessage, path *field.Path) (stubConfig, field.ErrorList) {
	c := stubConfig{Size: 1}
	if errs := config.Strict(raw, &c, path); len(errs) > 0 {
		return c, errs
	}
	if c.Size < 1 {
		return c, field.ErrorList{field.Invalid(path.Child("size"), c.Size, "must be at least 1")}
	}
	return c, nil
}

func testTypes(built *[]*stub) map[string]Type {
	return map[string]Type{
		"plain": descriptor.TypeOf(parseStub, func(name string, c stubConfig, _ provider.Options) (*stub, error) {
			s := &stub{name: name, size: c.Size}
			*built = append(*built, s)
			return s, nil
		}, 0),
		"checking": descriptor.TypeOf(parseStub, func(name string, c stubConfig, _ provider.Options) (*checkingStub, error) {
			return &checkingStub{stub{name: name, size: c.Size}}, nil
		}, 0),
		"broken": descriptor.TypeOf(parseStub, func(string, stubConfig, provider.Options) (*stub, error) {
			return nil, errors.New("cannot build")
		}, 0),
	}
}

func entries(t *testing.T, r *Registry, yaml string) []config.Entry {
	t.Helper()
	es, err := config.Parse([]byte(yaml), r.TypeNames())
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func TestApplyKeepsUnchangedRebuildsChangedClosesRemoved(t *testing.T) {
	var built []*stub
	r := New(testTypes(&built), provider.Options{})
	changes := 0
	r.OnChange(func([]string) { changes++ })

	if err := r.Apply(entries(t, r, "providers:\n- {name: a, type: plain}\n- {name: b, type: plain, plain: {size: 2}}\n")); err != nil {
		t.Fatal(err)
	}
	a1, _ := r.Get("a")
	b1, _ := r.Get("b")
	if len(built) != 2 || changes != 1 {
		t.Fatalf("built %d, changes %d", len(built), changes)
	}

	// a unchanged, b changed, c new.
	if err := r.Apply(entries(t, r, "providers:\n- {name: a, type: plain}\n- {name: b, type: plain, plain: {size: 3}}\n- {name: c, type: plain}\n")); err != nil {
		t.Fatal(err)
	}
	a2, _ := r.Get("a")
	b2, _ := r.Get("b")
	if a2 != a1 {
		t.Error("unchanged entry a was rebuilt")
	}
	if b2 == b1 || provider.Unwrap(b2.Provider).(*stub).size != 3 {
		t.Error("changed entry b was not rebuilt")
	}
	if !provider.Unwrap(b1.Provider).(*stub).closed.Load() {
		t.Error("replaced provider b was not closed")
	}
	if provider.Unwrap(a1.Provider).(*stub).closed.Load() {
		t.Error("kept provider a was closed")
	}
	if changes != 2 {
		t.Errorf("changes = %d", changes)
	}

	// Remove everything but c.
	if err := r.Apply(entries(t, r, "providers:\n- {name: c, type: plain}\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get("a"); !errors.Is(err, ErrUnknownProvider) {
		t.Errorf("Get(a) after removal = %v", err)
	}
	if !provider.Unwrap(a1.Provider).(*stub).closed.Load() {
		t.Error("removed provider a was not closed")
	}
	if names := entryNames(r); names != "c" {
		t.Errorf("entries = %s", names)
	}
	// Applying the same config again changes nothing and says nothing.
	if err := r.Apply(entries(t, r, "providers:\n- {name: c, type: plain}\n")); err != nil {
		t.Fatal(err)
	}
	if changes != 3 {
		t.Errorf("a no-op apply fired OnChange: changes = %d", changes)
	}
	r.Close()
	if len(r.Entries()) != 0 {
		t.Error("Close left entries")
	}
}

func TestInvalidApplyChangesNothing(t *testing.T) {
	var built []*stub
	r := New(testTypes(&built), provider.Options{})
	if err := r.Apply(entries(t, r, "providers:\n- {name: a, type: plain}\n")); err != nil {
		t.Fatal(err)
	}
	before, _ := r.Get("a")

	err := r.Apply(entries(t, r, "providers:\n- {name: a, type: plain, plain: {size: 5}}\n- {name: b, type: plain, plain: {size: 0}}\n- {name: c, type: plain, plain: {sise: 1}}\n"))
	if err == nil {
		t.Fatal("invalid config applied")
	}
	for _, want := range []string{"providers[1].plain.size: Invalid value: 0: must be at least 1", "providers[2].plain.sise: Forbidden: unknown field"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	after, _ := r.Get("a")
	if after != before || provider.Unwrap(before.Provider).(*stub).closed.Load() {
		t.Error("an invalid config touched the running provider")
	}
	if len(built) != 1 {
		t.Errorf("an invalid config built %d providers", len(built)-1)
	}

	// A constructor failure also leaves the old set, and closes what it built.
	err = r.Apply(entries(t, r, "providers:\n- {name: a, type: plain, plain: {size: 9}}\n- {name: z, type: broken}\n"))
	if err == nil || !strings.Contains(err.Error(), "providers[1]: cannot build") {
		t.Fatalf("err = %v", err)
	}
	if got, _ := r.Get("a"); got != before {
		t.Error("a failed apply replaced a")
	}
	if !built[len(built)-1].closed.Load() {
		t.Error("the provider built before the failure was not closed")
	}
}

func TestEntryCarriesCheckerAndDecorators(t *testing.T) {
	var built []*stub
	var decorated []string
	r := New(testTypes(&built), provider.Options{}, func(e *Entry) { decorated = append(decorated, e.Name) })
	if err := r.Apply(entries(t, r, "providers:\n- {name: p, type: plain}\n- {name: q, type: checking}\n")); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Get("p")
	q, _ := r.Get("q")
	if p.Checker != nil || q.Checker == nil {
		t.Errorf("Checker: plain %v, checking %v", p.Checker, q.Checker)
	}
	if strings.Join(decorated, ",") != "p,q" && strings.Join(decorated, ",") != "q,p" {
		t.Errorf("decorated = %v", decorated)
	}
}

// TestDefaultTypesAreTheAllowList checks that the registry knows exactly
// the type names of Descriptors, each once (two descriptors claiming one
// name would collapse into one key), and nothing else.
func TestDefaultTypesAreTheAllowList(t *testing.T) {
	var want []string
	for _, d := range Descriptors() {
		want = append(want, d.TypeNames...)
	}
	sort.Strings(want)
	r := New(DefaultTypes(), provider.Options{})
	if got := strings.Join(r.TypeNames(), ","); got != strings.Join(want, ",") {
		t.Errorf("types = %s, want the descriptors' %s", got, strings.Join(want, ","))
	}
	_, err := config.Parse([]byte("providers:\n- {name: a, type: mock}\n"), r.TypeNames())
	if err == nil || !strings.Contains(err.Error(), `providers[0].type: Unsupported value: "mock"`) {
		t.Errorf("err = %v", err)
	}
}

func entryNames(r *Registry) string {
	var names []string
	for _, e := range r.Entries() {
		names = append(names, e.Name)
	}
	return strings.Join(names, ",")
}
