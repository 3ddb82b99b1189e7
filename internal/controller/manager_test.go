package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// running is an operator as main wires it (manager, cache, registry,
// reconciler, events), watching one namespace of the shared API server.
type running struct {
	ns         string
	counter    *testenv.RequestCounter
	events     *countingRecorder
	reconciler *ProxyReconciler
}

func startManager(t *testing.T, providers Providers, maxConcurrent int, changes Changes) *running {
	t.Helper()
	ns := newNamespace(t)
	cfg, counter := testenv.CountingConfig(env.Config)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		// Each test runs its own manager with a controller named "proxy".
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := &countingRecorder{next: mgr.GetEventRecorder("egress-proxies-operator")}
	r := &ProxyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Providers: providers, Recorder: rec}
	if err := r.SetupWithManager(mgr, maxConcurrent, changes); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return &running{ns: ns, counter: counter, events: rec, reconciler: r}
}

// countingRecorder counts the events the reconciler emits, before the
// manager's recorder sends them: the broadcaster writes each in a goroutine
// of its own, after the reconcile that emitted it has returned.
type countingRecorder struct {
	next    events.EventRecorder
	emitted atomic.Int64
}

func (r *countingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.emitted.Add(1)
	r.next.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// reset starts a count: the API writes and the events emitted from now on.
// Call it only while the operator is idle (after settle).
func (m *running) reset() {
	m.counter.Reset()
	m.events.emitted.Store(0)
}

// settle waits until every write that led to the state the test observed
// has been counted: each event the reconciler emitted since reset has been
// written (client-go writes one event once and its first repeat for the
// same object version; this test's transitions emit no repeats), and no
// write is in flight, so the write that made the observed state, sent
// before it was observed, is recorded.
func (m *running) settle(t *testing.T) {
	t.Helper()
	testenv.EventuallyNil(t, "the operator's writes counted", func() error {
		by := m.counter.WritesBy()
		if emitted, written := m.events.emitted.Load(), int64(by["POST events"]+by["PATCH events"]); written < emitted {
			return fmt.Errorf("%d events emitted, %d written: %v", emitted, written, by)
		}
		if n := m.counter.InFlightWrites(); n > 0 {
			return fmt.Errorf("%d writes in flight", n)
		}
		return nil
	})
}

// waitFor polls the Proxy until cond holds; cond gets nil once the Proxy is
// gone. The bound only stops a hung test.
func (m *running) waitFor(t *testing.T, name, what string, cond func(*egressv1.Proxy) bool) *egressv1.Proxy {
	t.Helper()
	var got *egressv1.Proxy
	testenv.EventuallyNil(t, "Proxy "+name+" "+what, func() error {
		px := &egressv1.Proxy{}
		err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: m.ns, Name: name}, px)
		switch {
		case apierrors.IsNotFound(err):
			px = nil
		case err != nil:
			return err
		}
		if cond(px) {
			got = px
			return nil
		}
		if px == nil {
			return errors.New("the Proxy does not exist")
		}
		return fmt.Errorf("status %+v", px.Status)
	})
	return got
}

func (m *running) create(t *testing.T, px *egressv1.Proxy) {
	t.Helper()
	px.Namespace = m.ns
	if err := env.Client.Create(context.Background(), px); err != nil {
		t.Fatal(err)
	}
}

func isReady(px *egressv1.Proxy) bool { return px != nil && readyReason(px) == "True/Running" }

// TestLocalEndToEnd runs a Proxy on the real local provider through the
// manager: the instance serves real traffic, and deletion removes it. It
// also counts the API writes each step takes.
func TestLocalEndToEnd(t *testing.T) {
	reg := registry.New(registry.DefaultTypes(), providerOptions())
	cfgFile := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(cfgFile, []byte("providers:\n- name: local\n  type: local\n  local:\n    bindCIDR: 127.0.101.0/24\n"+
		// The origin below is on 127.0.0.1, which the default policy refuses.
		"    allowedDestinations: [127.0.0.1/32]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (&registry.Watcher{Registry: reg, Path: cfgFile}).Load(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	m := startManager(t, reg, 0, Changes{})

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello through the operator")
	}))
	t.Cleanup(origin.Close)

	m.reset()
	m.create(t, newProxy("web", "local"))
	px := m.waitFor(t, "web", "Ready", isReady)
	m.settle(t)
	createBy := m.counter.WritesBy()
	t.Logf("create to Ready: API writes %v", createBy)

	proxyURL := &url.URL{Scheme: "http", Host: px.Status.Endpoint}
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	resp, err := hc.Get(origin.URL)
	if err != nil {
		t.Fatalf("fetch through %s: %v", px.Status.Endpoint, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer through %s: %v", px.Status.Endpoint, err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != "hello through the operator" {
		t.Fatalf("through the proxy: %d %q", resp.StatusCode, body)
	}

	m.reset()
	if err := env.Client.Delete(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	m.waitFor(t, "web", "deleted", func(p *egressv1.Proxy) bool { return p == nil })
	m.settle(t)
	deleteBy := m.counter.WritesBy()
	t.Logf("deletion: API writes %v", deleteBy)

	entry, err := reg.Get("local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := entry.Provider.Get(context.Background(), px.Status.ProviderID); !errorsIsNotFound(err) {
		t.Errorf("instance still there after deletion: %v", err)
	}
	if _, err := hc.Get(origin.URL); err == nil {
		t.Error("the proxy still serves after deletion")
	}
	// The fewest writes a lifecycle needs: the finalizer and one status
	// write on create, the finalizer's removal on delete; no event, since
	// nothing failed. A write per reconcile (rather than per transition),
	// or an event for what the status says, would break these.
	if want := map[string]int{"PUT proxies": 1, "PATCH proxies/status": 1}; !maps.Equal(createBy, want) {
		t.Errorf("create to Ready wrote %v; want %v", createBy, want)
	}
	if want := map[string]int{"PUT proxies": 1}; !maps.Equal(deleteBy, want) {
		t.Errorf("deletion wrote %v; want %v", deleteBy, want)
	}
}

// TestInstanceChangeReadsTheProxyAtOnce: an instance its provider saw
// change (Changes.Instances) has its Proxy read at once, where otherwise
// a serving Proxy is read again only at the running resync (2 minutes).
func TestInstanceChangeReadsTheProxyAtOnce(t *testing.T) {
	entry, fp := fakeEntry("pool")
	changed := make(chan event.GenericEvent, 1)
	m := startManager(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}}, 0, Changes{Instances: changed})
	if m.reconciler.RunningResync < time.Minute {
		t.Fatalf("running resync %s: the test needs the default", m.reconciler.RunningResync)
	}
	m.create(t, newProxy("web", "pool"))
	px := m.waitFor(t, "web", "Ready", isReady)
	if !fp.Backend().SetServing(px.Status.InstanceName, fake.Serving{Serving: provider.ServingNotAnswering, LastAnswered: time.Now(), Detail: "squid stopped"}) {
		t.Fatalf("no instance %s", px.Status.InstanceName)
	}
	changed <- ChangedEvent(px.Status.ProviderID)
	m.waitFor(t, "web", "not answering", func(px *egressv1.Proxy) bool {
		return px != nil && readyReason(px) == "False/"+egressv1.ReasonProxyNotAnswering
	})
}

// TestSlowCreateDoesNotDelayOthers: a Create that hangs holds one worker;
// the other Proxies still become Ready.
func TestSlowCreateDoesNotDelayOthers(t *testing.T) {
	entry, fp := fakeEntry("pool")
	slow, slowFake := fakeEntry("slow")
	release := slowFake.Block(provider.OpCreate)
	t.Cleanup(release)
	m := startManager(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry, "slow": slow}}, 0, Changes{})

	m.create(t, newProxy("stuck", "slow"))
	// The stuck Proxy's Create is parked (the fake counts a call before it
	// blocks) before the others are even created.
	testenv.Eventually(t, "the slow Create parked", func() bool { return slowFake.Calls(provider.OpCreate) == 1 })
	for i := 0; i < 5; i++ {
		m.create(t, newProxy(fmt.Sprintf("fast-%d", i), "pool"))
	}
	for i := 0; i < 5; i++ {
		m.waitFor(t, fmt.Sprintf("fast-%d", i), "Ready", isReady)
	}
	if px := m.waitFor(t, "stuck", "seen", func(p *egressv1.Proxy) bool { return p != nil }); isReady(px) {
		t.Fatal("the blocked Proxy is Ready")
	}
	if n := slowFake.Calls(provider.OpCreate); n != 1 {
		t.Errorf("Create calls on slow = %d, want the one that is parked", n)
	}
	if fp.Calls(provider.OpCreate) != 5 {
		t.Errorf("Create calls on pool = %d", fp.Calls(provider.OpCreate))
	}
	release()
	m.waitFor(t, "stuck", "Ready after release", isReady)
}

// TestProviderAddedReleasesWaitingProxies: a Proxy naming a provider that is
// not configured waits with ProviderNotFound, and is taken up as soon as the
// config gains it, with no change to the Proxy.
func TestProviderAddedReleasesWaitingProxies(t *testing.T) {
	reg := registry.New(registry.DefaultTypes(), providerOptions())
	t.Cleanup(reg.Close)
	changed := make(chan event.GenericEvent, 1)
	reg.OnChange(func(names []string) { changed <- ChangedEvent(names[0]) })
	m := startManager(t, reg, 0, Changes{Providers: changed})

	m.create(t, newProxy("web", "late"))
	m.waitFor(t, "web", "ProviderNotFound", func(p *egressv1.Proxy) bool {
		return p != nil && readyReason(p) == "False/ProviderNotFound"
	})
	entries := mustParse(t, "providers:\n- name: late\n  type: local\n  local:\n    bindCIDR: 127.0.102.0/24\n", reg)
	if err := reg.Apply(entries); err != nil {
		t.Fatal(err)
	}
	m.waitFor(t, "web", "Ready", isReady)
}
