package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// env is one real kube-apiserver and etcd shared by the package's tests;
// each test works in a namespace of its own.
var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env)
}

// staticProviders is a Providers the test edits directly.
type staticProviders struct {
	mu      sync.Mutex
	entries map[string]*registry.Entry
}

func (s *staticProviders) Get(name string) (*registry.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[name]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("%w: %q", registry.ErrUnknownProvider, name)
}

func (s *staticProviders) set(e *registry.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = map[string]*registry.Entry{}
	}
	s.entries[e.Name] = e
}

const testInstallation = "install-test"

// fakeEntry makes a fake provider named name with a fast poll interval.
func fakeEntry(name string) (*registry.Entry, *fake.Provider) {
	fp := fake.New(name, fake.NewBackend(), providerOptions())
	return &registry.Entry{Name: name, Type: "fake", Provider: fp, Checker: fp, PollInterval: 20 * time.Millisecond}, fp
}

// newNamespace makes a namespace for one test.
func newNamespace(t *testing.T) string { return env.Namespace(t, "t") }

// direct is a reconciler driven by the test, one Reconcile call at a time,
// on an uncached client: deterministic, and still the real API server.
type direct struct {
	t        *testing.T
	r        *ProxyReconciler
	recorder *events.FakeRecorder
	ns       string
}

func newDirect(t *testing.T, providers Providers) *direct {
	rec := events.NewFakeRecorder(1000)
	r := &ProxyReconciler{Client: env.Client, APIReader: env.Client, Providers: providers, Recorder: rec,
		RunningResync: time.Minute}
	r.init()
	return &direct{t: t, r: r, recorder: rec, ns: newNamespace(t)}
}

func (d *direct) reconcile(name string) ctrl.Result {
	d.t.Helper()
	res, err := d.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: d.ns, Name: name}})
	if err != nil {
		d.t.Fatalf("Reconcile(%s): %v", name, err)
	}
	return res
}

// reconcileUntil reconciles until cond holds on the Proxy, at most n times.
func (d *direct) reconcileUntil(name string, n int, what string, cond func(*egressv1.Proxy) bool) *egressv1.Proxy {
	d.t.Helper()
	for i := 0; i < n; i++ {
		d.reconcile(name)
		if px := d.get(name); px != nil && cond(px) {
			return px
		}
	}
	d.t.Fatalf("%s: not reached after %d reconciles; status %+v", what, n, d.get(name).Status)
	return nil
}

func (d *direct) get(name string) *egressv1.Proxy {
	d.t.Helper()
	px := &egressv1.Proxy{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: d.ns, Name: name}, px); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		d.t.Fatal(err)
	}
	return px
}

func (d *direct) create(px *egressv1.Proxy) *egressv1.Proxy {
	d.t.Helper()
	px.Namespace = d.ns
	if err := env.Client.Create(context.Background(), px); err != nil {
		d.t.Fatalf("create Proxy: %v", err)
	}
	// The first pass only adds the finalizer, before any backend call.
	d.reconcile(px.Name)
	got := d.get(px.Name)
	if len(got.Finalizers) != 1 || got.Finalizers[0] != Finalizer || got.Status.ProviderID != "" {
		d.t.Fatalf("first pass: finalizers %v, status %+v", got.Finalizers, got.Status)
	}
	return got
}

// events drains the recorded events.
func (d *direct) events() []string {
	var out []string
	for {
		select {
		case e := <-d.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func newProxy(name, providerName string) *egressv1.Proxy {
	return &egressv1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       egressv1.ProxySpec{Provider: providerName, AllowedSourceRanges: []string{"127.0.0.0/8"}},
	}
}

func readyReason(px *egressv1.Proxy) string {
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

func hasReason(want string) func(*egressv1.Proxy) bool {
	return func(px *egressv1.Proxy) bool { return readyReason(px) == want }
}

func containsAny(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func providerOptions() provider.Options { return provider.Options{InstallationID: testInstallation} }
