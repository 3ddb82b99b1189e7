package health

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// env is one real kube-apiserver and etcd shared by the package's tests.
// ProviderHealth is cluster-scoped, so each test uses provider names of its
// own and deletes its objects when it ends; tests do not run in parallel,
// since a loop deletes every managed object its config does not name.
var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env)
}

// epoch is on a whole second: the API server keeps times to the second, so
// times read back compare equal to the fake clock's.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// providers is a providers config the test edits.
type providers struct {
	mu      sync.Mutex
	entries []*registry.Entry
}

func (p *providers) Entries() []*registry.Entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*registry.Entry(nil), p.entries...)
}

func (p *providers) set(entries ...*registry.Entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.entries = entries
}

func fakeEntry(name string) (*registry.Entry, *fake.Provider) {
	fp := fake.New(name, nil, provider.Options{InstallationID: "install-health"})
	return &registry.Entry{Name: name, Type: "fake", Provider: fp, Checker: fp}, fp
}

// checkFunc is a Checker made of a function, for behaviour the fake has no
// knob for (ignoring ctx, panicking, odd results). It counts its calls.
type checkFunc struct {
	calls atomic.Int32
	fn    func(context.Context) provider.CheckResult
}

func (c *checkFunc) Check(ctx context.Context) provider.CheckResult {
	c.calls.Add(1)
	return c.fn(ctx)
}

func funcEntry(name string, fn func(context.Context) provider.CheckResult) (*registry.Entry, *checkFunc) {
	c := &checkFunc{fn: fn}
	return &registry.Entry{Name: name, Type: "func", Checker: c}, c
}

// newLoop is a loop on c (env.Client when nil) over ps, with a fake clock
// at epoch and the default interval and heartbeat.
func newLoop(t *testing.T, c client.Client, ps Providers) (*Loop, *testingclock.FakeClock) {
	t.Helper()
	if c == nil {
		c = env.Client
	}
	fc := testingclock.NewFakeClock(epoch)
	return &Loop{Client: c, Providers: ps, Clock: fc}, fc
}

// pass runs one pass and fails the test on an API error.
func pass(t *testing.T, l *Loop) {
	t.Helper()
	if err := l.CheckOnce(context.Background()); err != nil {
		t.Fatalf("CheckOnce: %v", err)
	}
}

// cleanup deletes the test's objects when it ends, so later tests' loops
// and write counts never see them.
func cleanup(t *testing.T, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			ph := &egressv1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: n}}
			if err := client.IgnoreNotFound(env.Client.Delete(context.Background(), ph)); err != nil {
				t.Errorf("cleanup %s: %v", n, err)
			}
			dropGauge(n)
		}
	})
}

// get reads the ProviderHealth named name; nil when there is none.
func get(t *testing.T, name string) *egressv1.ProviderHealth {
	t.Helper()
	ph := &egressv1.ProviderHealth{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ph); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		t.Fatal(err)
	}
	return ph
}

// mustGet is get for an object that must exist; it returns its Healthy
// condition too.
func mustGet(t *testing.T, name string) (*egressv1.ProviderHealth, metav1.Condition) {
	t.Helper()
	ph := get(t, name)
	if ph == nil {
		t.Fatalf("ProviderHealth %s does not exist", name)
	}
	for _, c := range ph.Status.Conditions {
		if c.Type == egressv1.ConditionHealthy {
			return ph, c
		}
	}
	t.Fatalf("ProviderHealth %s has no Healthy condition: %+v", name, ph.Status)
	return nil, metav1.Condition{}
}

func wantCondition(t *testing.T, name string, status metav1.ConditionStatus, reason string) (*egressv1.ProviderHealth, metav1.Condition) {
	t.Helper()
	ph, c := mustGet(t, name)
	if c.Status != status || c.Reason != reason {
		t.Fatalf("%s: Healthy = %s/%s (%q), want %s/%s", name, c.Status, c.Reason, c.Message, status, reason)
	}
	return ph, c
}

func wantTime(t *testing.T, what string, got *metav1.Time, want time.Time) {
	t.Helper()
	if got == nil || !got.Time.Equal(want) {
		t.Errorf("%s = %v, want %s", what, got, want.Format(time.RFC3339))
	}
}

// gauge returns the provider's gauge series as type -> value, read from
// controller-runtime's registry as a scrape would.
func gauge(t *testing.T, name string) map[string]float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != MetricProviderHealthy {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["provider"] == name {
				out[labels["type"]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// wantGauge checks that the provider has exactly one series, {typ}, with
// value want.
func wantGauge(t *testing.T, name, typ string, want float64) {
	t.Helper()
	got := gauge(t, name)
	if len(got) != 1 {
		t.Fatalf("gauge series of %s = %v, want one with type %s", name, got, typ)
	}
	if v := testutil.ToFloat64(providerHealthy.WithLabelValues(name, typ)); v != want {
		t.Fatalf("%s{provider=%q,type=%q} = %v, want %v", MetricProviderHealthy, name, typ, v, want)
	}
}

func wantNoGauge(t *testing.T, name string) {
	t.Helper()
	if got := gauge(t, name); len(got) != 0 {
		t.Fatalf("gauge series of %s = %v, want none", name, got)
	}
}
