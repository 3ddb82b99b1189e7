package gc

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// env is one real kube-apiserver and etcd shared by the package's tests;
// each test works in namespaces of its own.
var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env)
}

// t0 is where every test's fake clock starts.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

const grace = 20 * time.Minute

// entries is a Providers the test edits directly.
type entries struct {
	mu   sync.Mutex
	list []*registry.Entry
}

func (s *entries) Entries() []*registry.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*registry.Entry(nil), s.list...)
}

func entry(p *fake.Provider) *registry.Entry {
	return &registry.Entry{Name: p.Name(), Type: "fake", Provider: p, Checker: p, Secondary: p}
}

// nsReader sees the Proxies of one namespace only, as an installation in a
// cluster of its own would: the uncached API client keeps the tests
// deterministic (no cache lag between a Proxy write and a pass), and the
// restriction makes an instance of another installation look like an
// orphan, so a leak across installations would be collected and seen.
type nsReader struct {
	client.Reader
	ns string
}

func (r nsReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.Reader.List(ctx, list, append(opts, client.InNamespace(r.ns))...)
}

// world is one installation under test: a namespace with its Proxies, its
// fake providers and a collector on a fake clock.
type world struct {
	t            *testing.T
	ns           string
	installation string
	clock        *clocktesting.FakeClock
	providers    *entries
	c            *Collector
	logs         *logSink
}

func newWorld(t *testing.T, installation string, clk *clocktesting.FakeClock) *world {
	t.Helper()
	if clk == nil {
		clk = clocktesting.NewFakeClock(t0)
	}
	w := &world{t: t, ns: newNamespace(t), installation: installation, clock: clk, providers: &entries{}, logs: &logSink{}}
	w.c = &Collector{
		Reader:           nsReader{env.Client, w.ns},
		Providers:        w.providers,
		WaitForCacheSync: func(context.Context) bool { return true },
		Interval:         2 * time.Minute,
		Grace:            grace,
		Clock:            clk,
		Log:              w.logs.logger(),
	}
	return w
}

// provider adds a fake provider named name over backend (nil: a fresh one)
// whose CreatedAt stamps come from the world's clock.
func (w *world) provider(name string, backend *fake.Backend) *fake.Provider {
	if backend == nil {
		backend = fake.NewBackend()
	}
	backend.SetClock(w.clock.Now)
	p := fake.New(name, backend, provider.Options{InstallationID: w.installation})
	w.providers.mu.Lock()
	w.providers.list = append(w.providers.list, entry(p))
	w.providers.mu.Unlock()
	return p
}

func newNamespace(t *testing.T) string { return env.Namespace(t, "gc") }

// proxy creates a Proxy on providerName in the world's namespace, with no
// status yet (a Create in flight).
func (w *world) proxy(name, providerName string) *egressv1.Proxy {
	w.t.Helper()
	px := &egressv1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec:       egressv1.ProxySpec{Provider: providerName, AllowedSourceRanges: []string{"127.0.0.0/8"}},
	}
	if err := env.Client.Create(context.Background(), px); err != nil {
		w.t.Fatalf("create Proxy %s: %v", name, err)
	}
	return px
}

// record writes the instance IDs to px's status through the status
// subresource, as the reconciler does after Create returns
// (observedGeneration included).
func (w *world) record(px *egressv1.Proxy, providerID, retiringProviderID string) {
	w.t.Helper()
	px.Status.ProviderID, px.Status.RetiringProviderID = providerID, retiringProviderID
	px.Status.ObservedGeneration = px.Generation
	if err := env.Client.Status().Update(context.Background(), px); err != nil {
		w.t.Fatalf("status of Proxy %s: %v", px.Name, err)
	}
}

// instance makes the instance a reconciler would make for px on p, and
// returns its ID.
func (w *world) instance(p *fake.Provider, px *egressv1.Proxy, shape string) string {
	w.t.Helper()
	req := provider.CreateRequest{
		Name:      provider.InstanceName(px.Namespace, px.Name, string(px.UID), shape),
		Namespace: px.Namespace, ProxyName: px.Name, UID: string(px.UID), Port: 3128,
	}
	inst, err := p.Create(context.Background(), req)
	if err != nil {
		w.t.Fatalf("Create %s: %v", req.Name, err)
	}
	return inst.ID
}

// plant stages an instance of this installation with uid, as a crashed
// operator would leave it, and returns its ID.
func (w *world) plant(p *fake.Provider, name, uid string) string {
	p.Backend().Plant(name, &provider.Marks{Managed: true, UID: uid, Installation: w.installation})
	return fake.ID(name)
}

func (w *world) collect() Result {
	w.t.Helper()
	res := w.c.CollectOnce(context.Background())
	if len(res) != 1 {
		w.t.Fatalf("CollectOnce returned %d results, want 1: %+v", len(res), res)
	}
	for _, r := range res {
		if r.Err != nil {
			w.t.Fatalf("pass on %s: %v", r.Provider, r.Err)
		}
		return r
	}
	return Result{}
}

func exists(p *fake.Provider, id string) bool {
	_, ok := p.Backend().Lookup(id[len("fake/"):])
	return ok
}

func ids(acts []Action) []string {
	out := make([]string, 0, len(acts))
	for _, a := range acts {
		out = append(out, a.ID)
	}
	return out
}

// logSink records every log line, as funcr's JSON.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) logger() logr.Logger {
	return funcr.NewJSON(func(obj string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lines = append(s.lines, obj)
	}, funcr.Options{Verbosity: 1})
}

// entries returns the lines whose message is msg, decoded.
func (s *logSink) entries(t *testing.T, msg string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range s.lines {
		m := map[string]any{}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func (s *logSink) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// idle reports whether no pass runs on the provider named name.
func (c *Collector) idle(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.states[name]
	return st != nil && !st.running
}

// recv takes the next value from ch; the bound only stops a hung test.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}
