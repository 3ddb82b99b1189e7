package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// fakeProviders is a provider type "fake" whose every entry, in every
// installation that uses it, is a fake provider over one shared backend,
// as two installations sharing one GCP project would be.
type fakeProviders struct {
	backend *fake.Backend
	mu      sync.Mutex
	byName  map[string]*fake.Provider
}

func newFakeProviders() *fakeProviders {
	return &fakeProviders{backend: fake.NewBackend(), byName: map[string]*fake.Provider{}}
}

func (f *fakeProviders) types() map[string]registry.Type {
	return map[string]registry.Type{"fake": {
		Parse: func(json.RawMessage, *field.Path) (any, field.ErrorList) { return nil, nil },
		New: func(name string, _ any, opts provider.Options) (provider.Provider, error) {
			p := fake.New(name, f.backend, opts)
			f.mu.Lock()
			f.byName[name] = p
			f.mu.Unlock()
			return p, nil
		},
		PollInterval: 20 * time.Millisecond,
	}}
}

func (f *fakeProviders) get(name string) *fake.Provider {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byName[name]
}

// deleteProviderHealthAtEnd removes the cluster-scoped ProviderHealth
// objects a test's operators leave behind. Registered before the operators
// start, it runs after they stopped.
func deleteProviderHealthAtEnd(t *testing.T, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			ph := &egressv1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: n}}
			if err := client.IgnoreNotFound(env.Client.Delete(context.Background(), ph)); err != nil {
				t.Errorf("deleting ProviderHealth %s: %v", n, err)
			}
		}
	})
}

// startAs runs an operator whose API requests carry userAgent (the API
// server records it as the field manager of everything it writes) and are
// counted, until the test ends.
func startAs(t *testing.T, userAgent string, o Options) *testenv.RequestCounter {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.UserAgent = userAgent
	cfg, counter := testenv.CountingConfig(cfg)
	o.MetricsAddr, o.ProbeAddr, o.SkipControllerNameValidation = "0", "0", true
	runOperator(t, cfg, o)
	return counter
}

// gcRuns reads egress_proxy_gc_runs_total{provider} from controller-runtime's
// registry: the provider names of the two installations differ, so each
// series counts one collector's passes.
func gcRuns(t *testing.T, providerName string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "egress_proxy_gc_runs_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "provider" && l.GetValue() == providerName {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestTwoInstallationsDoNotCollide runs two installations on one API server
// and one shared backend: installation a (default class, entry a) watches
// the namespaces shared and onlyA, installation b (class b, entry b) watches
// shared and onlyB, and neither is given an installation ID. Each Proxy must
// be written by its own installation only, draw no event from the other,
// and survive several passes of both collectors, every instance being older
// than the grace from the start.
func TestTwoInstallationsDoNotCollide(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two operators")
	}
	ctx := context.Background()
	shared, onlyA, onlyB := env.Namespace(t, "scope"), env.Namespace(t, "scope-a"), env.Namespace(t, "scope-b")
	deleteProviderHealthAtEnd(t, "a", "b")
	fp := newFakeProviders()
	// Born an hour ago: a collector that took the other installation's
	// instance for an orphan would delete it at its next pass.
	fp.backend.SetClock(func() time.Time { return time.Now().Add(-time.Hour) })
	common := func(o Options) Options {
		o.Types = fp.types()
		// Every health pass writes (the heartbeat is due), so lastCheckTime
		// tells the passes went on.
		o.GCInterval, o.HealthInterval, o.HealthHeartbeat = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
		return o
	}
	countA := startAs(t, "installation-a", common(Options{
		ProvidersConfig: writeConfig(t, "providers:\n- {name: a, type: fake}\n"),
		PodNamespace:    "egress-a",
		Namespaces:      []string{shared, onlyA},
	}))
	countB := startAs(t, "installation-b", common(Options{
		ProvidersConfig: writeConfig(t, "providers:\n- {name: b, type: fake}\n"),
		PodNamespace:    "egress-b",
		ProxyClass:      "b",
		Namespaces:      []string{shared, onlyB},
	}))

	type proxyOf struct {
		ns, name, installation string
	}
	proxies := []proxyOf{{shared, "pa", "a"}, {onlyA, "qa", "a"}, {shared, "pb", "b"}, {onlyB, "qb", "b"}}
	for _, p := range proxies {
		px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name},
			Spec: egressv1.ProxySpec{Provider: p.installation}}
		if p.installation == "b" {
			px.Spec.ClassName = "b"
		}
		if err := env.Client.Create(ctx, px); err != nil {
			t.Fatal(err)
		}
	}
	get := func(p proxyOf) (*egressv1.Proxy, error) {
		px := &egressv1.Proxy{}
		return px, env.Client.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: p.name}, px)
	}
	for _, p := range proxies {
		testenv.EventuallyNil(t, p.ns+"/"+p.name+" Ready", func() error {
			px, err := get(p)
			if err != nil {
				return err
			}
			if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("Ready = %+v", c)
			}
			return nil
		})
	}

	// Several passes of each collector, all of them after every Proxy ran.
	runsA, runsB := gcRuns(t, "a"), gcRuns(t, "b")
	testenv.Eventually(t, "three more passes of each collector", func() bool {
		return gcRuns(t, "a") >= runsA+3 && gcRuns(t, "b") >= runsB+3
	})

	// Two seconds of health passes of both loops after both ProviderHealths
	// exist: a loop that took the other installation's ProviderHealth for
	// one of its own providers that left the config has deleted it by then.
	var both time.Time
	checked := func(name string) (time.Time, error) {
		ph := &egressv1.ProviderHealth{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, ph); err != nil {
			return time.Time{}, err
		}
		if !meta.IsStatusConditionTrue(ph.Status.Conditions, egressv1.ConditionHealthy) || ph.Status.LastCheckTime == nil {
			return time.Time{}, fmt.Errorf("ProviderHealth %s not Healthy: %+v", name, ph.Status)
		}
		return ph.Status.LastCheckTime.Time, nil
	}
	testenv.EventuallyNil(t, "both ProviderHealths Healthy", func() error {
		for _, name := range []string{"a", "b"} {
			at, err := checked(name)
			if err != nil {
				return err
			}
			if at.After(both) {
				both = at
			}
		}
		return nil
	})
	testenv.EventuallyNil(t, "two more seconds of health passes", func() error {
		for _, name := range []string{"a", "b"} {
			at, err := checked(name)
			if err != nil {
				return err
			}
			if at.Before(both.Add(2 * time.Second)) {
				return fmt.Errorf("ProviderHealth %s last checked %s", name, at)
			}
		}
		return nil
	})

	marks := map[string]string{} // installation mark by Proxy
	for _, p := range proxies {
		px, err := get(p)
		if err != nil {
			t.Fatal(err)
		}
		if !meta.IsStatusConditionTrue(px.Status.Conditions, egressv1.ConditionReady) {
			t.Errorf("%s/%s lost Ready: %+v", p.ns, p.name, px.Status.Conditions)
		}
		found := false
		for _, r := range fp.backend.Records() {
			if fake.ID(r.Name) == px.Status.ProviderID && r.Marks != nil {
				found, marks[p.name] = true, r.Marks.Installation
			}
		}
		if !found {
			t.Errorf("%s/%s: its instance %q is gone from the backend", p.ns, p.name, px.Status.ProviderID)
		}
	}
	if marks["pa"] == "" || marks["pa"] != marks["qa"] || marks["pb"] != marks["qb"] || marks["pa"] == marks["pb"] {
		t.Errorf("installation marks %v: want one per installation, distinct", marks)
	}
	for _, name := range []string{"a", "b"} {
		if n := fp.get(name).Calls(provider.OpDelete); n != 0 {
			t.Errorf("provider %s was asked to delete %d time(s); no Proxy was deleted", name, n)
		}
	}

	// Writes: each installation writes only its own Proxies and its own
	// ProviderHealth.
	foreign := func(counter *testenv.RequestCounter, who, other string) {
		seen := map[string]int{} // each foreign write once, with its count
		var order []string
		for _, r := range counter.Requests() {
			if !r.IsWrite() {
				continue
			}
			what := ""
			for _, p := range proxies {
				if p.installation == other && r.Resource == "proxies" && r.Namespace == p.ns && r.Name == p.name {
					what = fmt.Sprintf("%s %s/%s", r.Key(), r.Namespace, r.Name)
				}
			}
			if r.Resource == "providerhealths" && r.Name == other {
				what = r.Key() + " " + r.Name
			}
			if what != "" {
				if seen[what] == 0 {
					order = append(order, what)
				}
				seen[what]++
			}
		}
		for _, what := range order {
			t.Errorf("installation %s wrote %s of installation %s (%d time(s))", who, what, other, seen[what])
		}
	}
	foreign(countA, "a", "b")
	foreign(countB, "b", "a")

	// Events: recorded by the Proxy's own installation only, and no
	// warnings at all.
	owner := map[string]string{}
	for _, p := range proxies {
		owner[p.ns+"/"+p.name] = "installation-" + p.installation
	}
	for _, ns := range []string{shared, onlyA, onlyB} {
		evs := &eventsv1.EventList{}
		if err := env.Client.List(ctx, evs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			about := ev.Regarding.Namespace + "/" + ev.Regarding.Name
			if ev.Type == "Warning" {
				t.Errorf("Warning event on %s: %s: %s", about, ev.Reason, ev.Note)
			}
			for _, mf := range ev.ManagedFields {
				if want := owner[about]; want != "" && mf.Manager != want {
					t.Errorf("event %s %q on %s recorded by %s, want %s", ev.Type, ev.Reason, about, mf.Manager, want)
				}
			}
		}
	}
}

// TestTwoInstallationsDefaultClassIgnoresOtherClass: the installation with
// no --proxy-class leaves a Proxy of another class alone, live or being
// deleted: no finalizer, no status, no event, no write of any kind.
func TestTwoInstallationsDefaultClassIgnoresOtherClass(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "class")
	deleteProviderHealthAtEnd(t, "class-fake")
	fp := newFakeProviders()
	counter := startAs(t, "default-class", Options{
		ProvidersConfig: writeConfig(t, "providers:\n- {name: class-fake, type: fake}\n"),
		InstallationID:  "default-class-test",
		Namespaces:      []string{ns},
		Types:           fp.types(),
		// One worker: the queue is FIFO, so once the Proxy created last is
		// Ready every event queued before it has been handled.
		MaxConcurrentReconciles: 1,
	})

	other := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"},
		Spec: egressv1.ProxySpec{Provider: "class-fake", ClassName: "other"}}
	// As the installation of class other leaves it while it deletes the
	// instance: its finalizer on, its deletion requested.
	leaving := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leaving", Finalizers: []string{controller.Finalizer}},
		Spec: egressv1.ProxySpec{Provider: "class-fake", ClassName: "other"}}
	for _, px := range []*egressv1.Proxy{other, leaving} {
		if err := env.Client.Create(ctx, px); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// Not ours to finalize, so the test does.
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(leaving), px); err == nil {
			px.Finalizers = nil
			if err := env.Client.Update(ctx, px); err != nil {
				t.Errorf("releasing %s: %v", px.Name, err)
			}
		}
	})
	if err := env.Client.Delete(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	mine := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}, Spec: egressv1.ProxySpec{Provider: "class-fake"}}
	if err := env.Client.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "mine Ready", func() bool {
		px := &egressv1.Proxy{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(mine), px) == nil &&
			meta.IsStatusConditionTrue(px.Status.Conditions, egressv1.ConditionReady)
	})

	for _, r := range counter.Requests() {
		if r.IsWrite() && r.Resource == "proxies" && (r.Name == "other" || r.Name == "leaving") {
			t.Errorf("the default-class installation wrote %s %s", r.Key(), r.Name)
		}
	}
	got := &egressv1.Proxy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(other), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) != 0 || got.Status.Phase != "" || len(got.Status.Conditions) != 0 {
		t.Errorf("other: finalizers %v, status %+v; want untouched", got.Finalizers, got.Status)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(leaving), got); err != nil {
		t.Fatalf("leaving: %v (finalized by the default-class installation?)", err)
	}
	if !slices.Equal(got.Finalizers, []string{controller.Finalizer}) || got.Status.Phase != "" {
		t.Errorf("leaving: finalizers %v, phase %q; want its finalizer kept and no status", got.Finalizers, got.Status.Phase)
	}
	evs := &eventsv1.EventList{}
	if err := env.Client.List(ctx, evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Regarding.Name != "mine" {
			t.Errorf("event %s %q on %s: %s", ev.Type, ev.Reason, ev.Regarding.Name, ev.Note)
		}
	}
	if n := fp.get("class-fake").Calls(provider.OpCreate); n != 1 {
		t.Errorf("%d Create calls; want 1, for mine", n)
	}
}
