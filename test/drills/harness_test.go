// Package drills runs the fault drills (issue 13, item 4): the operator as
// internal/operator assembles it, with the fake provider registered as a
// provider type, on a real kube-apiserver and etcd, through backend and
// API-server faults. Each drill logs its figures as `key: value` lines and
// fails on what the fault must not do. `make drills` runs them at full
// size; plain `go test ./test/drills` runs a quick size (docs/testing.md,
// "Fault drills").
package drills

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/operator"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// env is one control plane for every drill, made WithDataDir so the API
// server drill can stop and start kube-apiserver under it.
var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "drills-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e, err := testenv.New(testenv.WithDataDir(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		code = max(code, 1)
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// --- sizes: quick by default, full under `make drills` ---

// longDrillsEnv enables the drills that take minutes; `make drills` sets
// it. The delete-during-create sweep takes seconds and always runs.
const longDrillsEnv = "DRILLS"

// long skips a drill that takes minutes unless DRILLS=1.
func long(t *testing.T) {
	t.Helper()
	if os.Getenv(longDrillsEnv) != "1" {
		t.Skip("a drill of minutes: `make drills` runs it (or DRILLS=1 go test ./test/drills)")
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

// figure logs one of a drill's figures as a `key: value` line.
func figure(t *testing.T, key string, value any) {
	t.Helper()
	if d, ok := value.(time.Duration); ok {
		value = d.Round(10 * time.Millisecond)
	}
	t.Logf("%s: %v", key, value)
}

// waitWithin is testenv.EventuallyNilWithin with a progress line every
// 30 s saying what is still missing, for the waits of minutes.
func waitWithin(t *testing.T, bound time.Duration, what string, cond func() error) {
	t.Helper()
	last := time.Now()
	testenv.EventuallyNilWithin(t, bound, what, func() error {
		err := cond()
		if err != nil && time.Since(last) >= 30*time.Second {
			t.Logf("progress: %s: %v", what, err)
			last = time.Now()
		}
		return err
	})
}

// --- the operator under drill ---

// fleet is one operator, assembled by operator.New, serving one namespace
// with one provider entry of type "fake" over a backend that outlives the
// operator (a restarted operator builds a new fake.Provider over it, as a
// restarted process would reach the same cloud).
type fleet struct {
	t       *testing.T
	ns      string
	name    string // the provider entry's name, and the ProviderHealth's
	backend *fake.Backend
	opts    operator.Options
	// wrap, when set, puts a drill's own layer around each provider built.
	wrap func(*fake.Provider) provider.Provider

	mu      sync.Mutex
	current *fake.Provider
}

// newFleet makes the fleet's namespace and options: short GC and health
// periods, so the drills see many passes; edit f.opts before start.
func newFleet(t *testing.T, name string) *fleet {
	t.Helper()
	f := &fleet{t: t, ns: env.Namespace(t, name), name: name, backend: fake.NewBackend()}
	cfg := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("providers:\n- {name: %s, type: fake}\n", name)), 0o600); err != nil {
		t.Fatal(err)
	}
	f.opts = operator.Options{
		ProvidersConfig: cfg,
		MetricsAddr:     "0", ProbeAddr: "0",
		InstallationID:               "drill-" + name,
		Namespaces:                   []string{f.ns},
		SkipControllerNameValidation: true,
		GracefulShutdown:             10 * time.Second,
		ProviderCallTimeout:          10 * time.Second,
		GCInterval:                   5 * time.Second,
		GCGrace:                      15 * time.Second,
		HealthInterval:               2 * time.Second,
		HealthTimeout:                time.Second,
	}
	t.Cleanup(func() {
		ph := &egressv1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := client.IgnoreNotFound(env.Client.Delete(context.Background(), ph)); err != nil {
			t.Errorf("deleting ProviderHealth %s: %v", name, err)
		}
	})
	return f
}

func (f *fleet) types() map[string]registry.Type {
	return map[string]registry.Type{"fake": {
		Parse: func(json.RawMessage, *field.Path) (any, field.ErrorList) { return nil, nil },
		New: func(name string, _ any, opts provider.Options) (provider.Provider, error) {
			p := fake.New(name, f.backend, opts)
			f.mu.Lock()
			f.current = p
			f.mu.Unlock()
			if f.wrap != nil {
				return f.wrap(p), nil
			}
			return p, nil
		},
		PollInterval: 100 * time.Millisecond,
	}}
}

// running is one started operator.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
	// exitExpected: the drill saw Run return (leader election lost) and
	// started another operator, as a Deployment would.
	exitExpected bool
}

// start runs the operator until stop or the end of the test.
func (f *fleet) start() *running {
	f.t.Helper()
	o := f.opts
	o.Types = f.types()
	op, err := operator.New(context.Background(), env.Config, o)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- op.Run(ctx) }()
	f.t.Cleanup(func() {
		if err := r.stop(); err != nil && !r.exitExpected {
			f.t.Errorf("operator: %v", err)
		}
	})
	return r
}

// stop stops the operator and returns what Run returned.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// exited says whether Run returned before stop was called, and with what.
func (r *running) exited() (bool, error) {
	select {
	case err := <-r.done:
		r.done <- err
		return true, err
	default:
		return false, nil
	}
}

// provider is the fake.Provider the running operator's registry built.
func (f *fleet) provider() *fake.Provider {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current == nil {
		f.t.Fatal("no provider built yet: start the operator first")
	}
	return f.current
}

// --- Proxies ---

func (f *fleet) proxy(name string) *egressv1.Proxy {
	return &egressv1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec:       egressv1.ProxySpec{Provider: f.name, AllowedSourceRanges: []string{"127.0.0.0/8"}},
	}
}

// createProxies creates n Proxies named prefix-000...
func (f *fleet) createProxies(prefix string, n int) []string {
	f.t.Helper()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
		if err := env.Client.Create(context.Background(), f.proxy(names[i])); err != nil {
			f.t.Fatal(err)
		}
	}
	return names
}

func (f *fleet) list() ([]egressv1.Proxy, error) {
	l := &egressv1.ProxyList{}
	if err := env.Client.List(context.Background(), l, client.InNamespace(f.ns)); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func isReady(px *egressv1.Proxy) bool {
	return meta.IsStatusConditionTrue(px.Status.Conditions, egressv1.ConditionReady)
}

// allReady is nil once there are want Proxies, all Ready.
func (f *fleet) allReady(want int) error {
	items, err := f.list()
	if err != nil {
		return err
	}
	ready, reasons := 0, map[string]int{}
	for i := range items {
		if isReady(&items[i]) && items[i].DeletionTimestamp.IsZero() {
			ready++
		} else if c := meta.FindStatusCondition(items[i].Status.Conditions, egressv1.ConditionReady); c != nil {
			reasons[c.Reason]++
		}
	}
	if ready != want || len(items) != want {
		return fmt.Errorf("%d of %d Proxies Ready (%d exist; not Ready by reason: %v)", ready, want, len(items), reasons)
	}
	return nil
}

// deleteAll deletes every Proxy of the fleet.
func (f *fleet) deleteAll() {
	f.t.Helper()
	if err := env.Client.DeleteAllOf(context.Background(), &egressv1.Proxy{}, client.InNamespace(f.ns)); err != nil {
		f.t.Fatal(err)
	}
}

// allGone is nil once no Proxy is left and the backend holds nothing of
// this installation.
func (f *fleet) allGone() error {
	items, err := f.list()
	if err != nil {
		return err
	}
	if len(items) > 0 {
		return fmt.Errorf("%d Proxies left", len(items))
	}
	if left := f.instances(); len(left) > 0 {
		return fmt.Errorf("%d instances left on the backend: %v", len(left), names(left))
	}
	return nil
}

// instances are the backend's instances of this installation, by name.
func (f *fleet) instances() map[string]fake.Record {
	out := map[string]fake.Record{}
	for _, r := range f.backend.Records() {
		if r.Marks != nil && r.Marks.Installation == f.opts.InstallationID {
			out[r.Name] = r
		}
	}
	return out
}

func names(m map[string]fake.Record) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// accounted is nil when the backend holds exactly one instance per Proxy
// that records one, the one it records, and nothing else: no leak and no
// duplicate.
func (f *fleet) accounted() error {
	items, err := f.list()
	if err != nil {
		return err
	}
	insts := f.instances()
	byUID := map[string]int{}
	for _, r := range insts {
		byUID[r.Marks.UID]++
	}
	for _, px := range items {
		if n := byUID[string(px.UID)]; n != 1 {
			return fmt.Errorf("Proxy %s has %d instances on the backend", px.Name, n)
		}
		if id := px.Status.ProviderID; id != "" {
			if _, ok := insts[mustName(id)]; !ok {
				return fmt.Errorf("Proxy %s records %s, which the backend does not hold", px.Name, id)
			}
		}
		delete(byUID, string(px.UID))
	}
	if len(byUID) > 0 {
		return fmt.Errorf("%d instances belong to no Proxy: %v", len(byUID), byUID)
	}
	return nil
}

// mustName is the instance name in a fake provider ID.
func mustName(id string) string { return strings.TrimPrefix(id, fake.ID("")) }

// --- calls ---

// dataOps are the provider calls the reconciler and GC make; Check is the
// health loop's, one per interval, and counted apart.
var dataOps = []string{provider.OpCreate, provider.OpGet, provider.OpDelete, provider.OpList}

// calls is a snapshot of the provider's call counts.
type calls map[string]int

func callsOf(p *fake.Provider) calls {
	c := calls{}
	for _, op := range append(dataOps, provider.OpCheck) {
		c[op] = p.Calls(op)
	}
	return c
}

func (c calls) minus(o calls) calls {
	d := calls{}
	for k, v := range c {
		d[k] = v - o[k]
	}
	return d
}

func (c calls) data() int {
	n := 0
	for _, op := range dataOps {
		n += c[op]
	}
	return n
}

// perProxy formats c divided by n Proxies.
func (c calls) perProxy(n int) string {
	s := ""
	for _, op := range dataOps {
		s += fmt.Sprintf("%s=%.2f ", op, float64(c[op])/float64(n))
	}
	return s + fmt.Sprintf("all=%.2f", float64(c.data())/float64(n))
}

func (c calls) String() string {
	s := ""
	for _, op := range append(dataOps, provider.OpCheck) {
		s += fmt.Sprintf("%s=%d ", op, c[op])
	}
	return s[:len(s)-1]
}

// --- metrics ---

// counter sums the series of a controller-runtime registry counter whose
// provider label is provider.
func counter(t *testing.T, name, providerName string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "provider" && l.GetValue() == providerName {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// healthReason is the ProviderHealth's Healthy condition reason, or "".
func healthReason(name string) (string, error) {
	ph := &egressv1.ProviderHealth{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ph); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if c := meta.FindStatusCondition(ph.Status.Conditions, egressv1.ConditionHealthy); c != nil {
		return c.Reason, nil
	}
	return "", nil
}
