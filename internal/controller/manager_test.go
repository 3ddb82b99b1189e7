package controller

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// running is an operator as main wires it (manager, cache, registry,
// reconciler, events), watching one namespace of the shared API server.
type running struct {
	ns      string
	counter *testenv.RequestCounter
}

func startManager(t *testing.T, providers Providers, maxConcurrent int, changed <-chan event.GenericEvent) *running {
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
	r := &ProxyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Providers: providers,
		Recorder: mgr.GetEventRecorder("egress-proxies-operator")}
	if err := r.SetupWithManager(mgr, maxConcurrent, changed); err != nil {
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
	return &running{ns: ns, counter: counter}
}

// waitFor polls the Proxy until cond holds; the bound only stops a hung test.
func (m *running) waitFor(t *testing.T, name, what string, cond func(*egressv1.Proxy) bool) *egressv1.Proxy {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last *egressv1.Proxy
	for time.Now().Before(deadline) {
		px := &egressv1.Proxy{}
		err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: m.ns, Name: name}, px)
		if err == nil {
			last = px
			if cond(px) {
				return px
			}
		} else if cond(nil) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("%s: not reached; status %+v", what, last.Status)
	}
	t.Fatalf("%s: not reached", what)
	return nil
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
	m := startManager(t, reg, 0, nil)

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello through the operator")
	}))
	t.Cleanup(origin.Close)

	m.counter.Reset()
	m.create(t, newProxy("web", "local"))
	px := m.waitFor(t, "web", "Ready", isReady)
	// Let the event broadcaster flush before counting.
	time.Sleep(500 * time.Millisecond)
	createWrites, createBy := m.counter.Writes(), m.counter.WritesBy()
	t.Logf("create to Ready: %d API writes %v", createWrites, createBy)

	proxyURL, _ := url.Parse("http://" + px.Status.Endpoint)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	resp, err := hc.Get(origin.URL)
	if err != nil {
		t.Fatalf("fetch through %s: %v", px.Status.Endpoint, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello through the operator" {
		t.Fatalf("through the proxy: %d %q", resp.StatusCode, body)
	}

	m.counter.Reset()
	if err := env.Client.Delete(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	m.waitFor(t, "web", "deleted", func(p *egressv1.Proxy) bool { return p == nil })
	time.Sleep(500 * time.Millisecond)
	deleteWrites, deleteBy := m.counter.Writes(), m.counter.WritesBy()
	t.Logf("deletion: %d API writes %v", deleteWrites, deleteBy)

	entry, _ := reg.Get("local")
	if _, err := entry.Provider.Get(context.Background(), px.Status.ProviderID); !errorsIsNotFound(err) {
		t.Errorf("instance still there after deletion: %v", err)
	}
	if _, err := hc.Get(origin.URL); err == nil {
		t.Error("the proxy still serves after deletion")
	}
	// Regression bounds: finalizer, one status write, events. A write per
	// reconcile (rather than per transition) would blow through these.
	if createWrites < 2 || createWrites > 6 {
		t.Errorf("create to Ready took %d writes, want 2..6: %v", createWrites, createBy)
	}
	if deleteWrites < 1 || deleteWrites > 5 {
		t.Errorf("deletion took %d writes, want 1..5: %v", deleteWrites, deleteBy)
	}
}

// TestSlowCreateDoesNotDelayOthers: a Create that hangs holds one worker;
// the other Proxies still become Ready.
func TestSlowCreateDoesNotDelayOthers(t *testing.T) {
	entry, fp := fakeEntry("pool")
	slow, _ := fakeEntry("slow")
	release := slow.Provider.(interface{ Block(string) func() }).Block(provider.OpCreate)
	t.Cleanup(release)
	m := startManager(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry, "slow": slow}}, 0, nil)

	m.create(t, newProxy("stuck", "slow"))
	for i := 0; i < 5; i++ {
		m.create(t, newProxy(fmt.Sprintf("fast-%d", i), "pool"))
	}
	for i := 0; i < 5; i++ {
		m.waitFor(t, fmt.Sprintf("fast-%d", i), "Ready", isReady)
	}
	if px := m.waitFor(t, "stuck", "seen", func(p *egressv1.Proxy) bool { return p != nil }); isReady(px) {
		t.Fatal("the blocked Proxy is Ready")
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
	reg.OnChange(func() { changed <- ProvidersChangedEvent() })
	m := startManager(t, reg, 0, changed)

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
