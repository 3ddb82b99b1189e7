package controller

// Tests of issue 7 (core hardening), one or more per item, each on the real
// API server through the direct reconciler.

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// updateSpec changes the Proxy's spec on the API server.
func (d *direct) updateSpec(name string, change func(*egressv1.ProxySpec)) {
	d.t.Helper()
	px := d.get(name)
	change(&px.Spec)
	if err := env.Client.Update(context.Background(), px); err != nil {
		d.t.Fatalf("update Proxy: %v", err)
	}
}

// Item 1: shape A serves, the spec changes to B and back to A before B
// runs. The serving instance A must never be deleted; B is.
func TestSpecRevertKeepsServingInstance(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	a := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))

	fp.SetProvisioningGets(1000) // B never runs during the test
	d.updateSpec("web", func(s *egressv1.ProxySpec) { s.Port = 8080 })
	d.reconcile("web")
	b := d.get("web")
	if b.Status.ProviderID == a.Status.ProviderID || b.Status.RetiringProviderID != a.Status.ProviderID {
		t.Fatalf("replacement not started: %+v", b.Status)
	}
	d.updateSpec("web", func(s *egressv1.ProxySpec) { s.Port = a.Spec.Port })
	for range 4 {
		d.reconcile("web")
		if _, ok := fp.Backend().Lookup(a.Status.InstanceName); !ok {
			t.Fatalf("the serving instance %s was deleted after the spec was reverted; status %+v", a.Status.ProviderID, d.get("web").Status)
		}
	}
	px := d.get("web")
	if px.Status.ProviderID != a.Status.ProviderID || px.Status.Endpoint != a.Status.Endpoint || readyReason(px) != "True/Running" {
		t.Errorf("after the revert: status %+v, Ready %s; want instance %s at %s", px.Status, readyReason(px), a.Status.ProviderID, a.Status.Endpoint)
	}
	if rec, ok := fp.Backend().Lookup(b.Status.InstanceName); ok && !rec.Deleting {
		t.Errorf("the abandoned replacement %s is still there: %v", b.Status.ProviderID, rec)
	}
}

// Item 2: a lost instance makes Ready False at once, and a Transient error
// while creating it again does not leave Ready True with no endpoint.
func TestReadyFalseWhenInstanceLost(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))

	fp.Remove(px.Status.InstanceName)
	fp.FailNext(provider.OpCreate, provider.Errorf(provider.ErrTransient, "backend hiccup"))
	d.reconcile("web")
	px = d.get("web")
	if got := readyReason(px); !strings.HasPrefix(got, "False/") || px.Status.Phase == egressv1.PhaseRunning || px.Status.Endpoint != "" {
		t.Fatalf("instance lost and not yet re-created: Ready %s, phase %s, endpoint %q; want Ready False, not Running, no endpoint",
			got, px.Status.Phase, px.Status.Endpoint)
	}
	d.reconcileUntil("web", 3, "Ready again", hasReason("True/Running"))
}

// Item 2: a replacement of an instance that never served does not claim
// Ready.
func TestReadyFalseWhenReplacingInstanceThatNeverServed(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	fp.SetProvisioningGets(1000)
	d.create(newProxy("web", "pool"))
	d.reconcileUntil("web", 2, "Provisioning", hasReason("False/Provisioning"))

	d.updateSpec("web", func(s *egressv1.ProxySpec) { s.Port = 8080 })
	d.reconcile("web")
	px := d.get("web")
	if got := readyReason(px); got != "False/Provisioning" || px.Status.Endpoint != "" {
		t.Fatalf("replacing an instance that never served: Ready %s, endpoint %q; want False/Provisioning and none", got, px.Status.Endpoint)
	}
}

// Item 4: the operator died between Create and the status write, then the
// Proxy was deleted. Its instance is found by the Proxy's UID and deleted
// before the finalizer goes, with no garbage collector involved.
func TestDeletionFindsInstanceItsStatusNeverRecorded(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(map[bool]string{false: "delete waits", true: "delete returns early"}[early], func(t *testing.T) {
			entry, fp := fakeEntry("pool")
			d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
			px := d.create(newProxy("web", "pool"))
			// What the killed operator's Create left on the backend.
			req := createRequest(px, "", "", inPlace{}, "")
			if _, err := fp.Create(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if early {
				fp.SetDeleteReturnsEarly(2)
			}
			if err := env.Client.Delete(context.Background(), px); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 6 && d.get("web") != nil; i++ {
				d.reconcile("web")
			}
			if d.get("web") != nil {
				t.Fatalf("the Proxy was not released: %+v", d.get("web").Status)
			}
			if rec, ok := fp.Backend().Lookup(req.Name); ok {
				t.Fatalf("the finalizer was released but the unrecorded instance is still on the backend: %v", rec)
			}
		})
	}
}

// Item 5: a Permanent failure caused by the cloud-init Secret is retried
// once the Secret is fixed: the shape changes though the generation does
// not.
func TestLatchReleasedByChangedSecret(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "ud"}, Data: map[string][]byte{"user-data": []byte("#cloud-config\nbroken")}}
	if err := env.Client.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	px := newProxy("web", "pool")
	px.Spec.CloudInitSecretRef = &egressv1.SecretKeySelector{Name: "ud"}
	d.create(px)
	fp.FailNext(provider.OpCreate, provider.Errorf(provider.ErrPermanent, "user-data refused by the image"))
	d.reconcile("web")
	d.reconcile("web")
	if n := fp.Calls(provider.OpCreate); n != 1 || readyReason(d.get("web")) != "False/PermanentFailure" {
		t.Fatalf("not latched: %d Create calls, Ready %s", n, readyReason(d.get("web")))
	}
	sec.Data["user-data"] = []byte("#cloud-config\nfixed: true")
	if err := env.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	d.reconcileUntil("web", 3, "Ready after the Secret was fixed", hasReason("True/Running"))
	if n := fp.Calls(provider.OpCreate); n != 2 {
		t.Errorf("Create calls = %d, want 2", n)
	}
}

// Item 5: a Permanent failure is retried when the provider's health turns
// Healthy after it (an administrator fixed an RBAC rule, say).
func TestLatchReleasedWhenProviderTurnsHealthy(t *testing.T) {
	entry, fp := fakeEntry(uniqueProvider(t))
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{entry.Name: entry}})
	d.create(newProxy("web", entry.Name))
	fp.FailNext(provider.OpCreate, provider.Errorf(provider.ErrPermanent, "forbidden: cannot create pods"))
	d.reconcile("web")
	d.reconcile("web")
	if n := fp.Calls(provider.OpCreate); n != 1 {
		t.Fatalf("not latched: %d Create calls", n)
	}
	setHealth(t, entry.Name, metav1.ConditionTrue, time.Now().Add(-time.Hour)) // healthy before: no release
	d.reconcile("web")
	if n := fp.Calls(provider.OpCreate); n != 1 {
		t.Fatalf("a health that turned Healthy before the failure released the latch: %d Create calls", n)
	}
	setHealth(t, entry.Name, metav1.ConditionTrue, time.Now().Add(2*time.Second))
	d.reconcileUntil("web", 3, "Ready once the provider turned Healthy", hasReason("True/Running"))
}

// uniqueProvider names a provider after the test: ProviderHealth objects
// are cluster-scoped and the API server is shared.
func uniqueProvider(t *testing.T) string {
	return strings.ToLower(strings.NewReplacer("_", "-", "/", "-").Replace(t.Name()))[:min(len(t.Name()), 40)]
}

func setHealth(t *testing.T, name string, status metav1.ConditionStatus, at time.Time) {
	t.Helper()
	ctx := context.Background()
	ph := &egressv1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Get(ctx, clientKey(name), ph); err != nil {
		if err := env.Client.Create(ctx, ph); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ph) })
	}
	ph.Status.Conditions = []metav1.Condition{{Type: egressv1.ConditionHealthy, Status: status, Reason: "Test", Message: "set by the test",
		LastTransitionTime: metav1.NewTime(at)}}
	if err := env.Client.Status().Update(ctx, ph); err != nil {
		t.Fatal(err)
	}
}

// Item 7: the generated RBAC reads a Proxy's Secret with get only: no
// list or watch of every Secret in the cluster.
func TestRBACHoldsNoClusterWideSecretRead(t *testing.T) {
	raw, err := os.ReadFile("../../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(raw, role); err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, rule := range role.Rules {
		for _, res := range rule.Resources {
			if res != "secrets" {
				continue
			}
			seen = true
			for _, v := range rule.Verbs {
				if v != "get" {
					t.Errorf("config/rbac/role.yaml grants %q on secrets; only get is needed", v)
				}
			}
		}
	}
	if !seen {
		t.Error("config/rbac/role.yaml grants nothing on secrets: cloud-init Secrets cannot be read")
	}
}

// Item 10: running Proxies are read again spread around --running-resync,
// not all at once.
func TestRunningResyncIsJittered(t *testing.T) {
	entry, _ := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	resync := d.r.RunningResync
	seen := map[time.Duration]bool{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		d.create(newProxy(name, "pool"))
		res := d.reconcile(name)
		if readyReason(d.get(name)) != "True/Running" {
			t.Fatalf("%s not Running", name)
		}
		if lo, hi := resync-resync/10, resync+resync/10; res.RequeueAfter < lo || res.RequeueAfter > hi {
			t.Errorf("%s: requeue after %s, want within [%s, %s]", name, res.RequeueAfter, lo, hi)
		}
		seen[res.RequeueAfter] = true
	}
	if len(seen) < 2 {
		t.Errorf("8 running Proxies all come back after the same %v", seen)
	}
}

// Item 10: a providers-config change of one entry enqueues that entry's
// Proxies, not every Proxy.
func TestProvidersChangeEnqueuesOnlyItsProxies(t *testing.T) {
	reg := registry.New(registry.DefaultTypes(), providerOptions())
	t.Cleanup(reg.Close)
	m := startManager(t, reg, 0, Changes{})
	ns := m.ns
	for _, p := range []struct{ name, provider string }{{"a1", "alpha"}, {"a2", "alpha"}, {"b1", "beta"}} {
		m.create(t, newProxy(p.name, p.provider))
	}
	rec := m.reconciler
	testenv.Eventually(t, "the cache holds the 3 Proxies", func() bool {
		list := &egressv1.ProxyList{}
		return rec.Client.List(context.Background(), list, client.InNamespace(ns)) == nil && len(list.Items) == 3
	})
	got := map[string]bool{}
	for _, r := range rec.proxiesOfProvider(context.Background(), ChangedEvent("alpha").Object) {
		if r.Namespace == ns {
			got[r.Name] = true
		}
	}
	if len(got) != 2 || !got["a1"] || !got["a2"] {
		t.Errorf("a change of entry alpha enqueues %v, want exactly a1 and a2", got)
	}
}

// Item 12: a provider that formats the whole request into its error and
// its log lines leaks nothing of the cloud-init into the condition, the
// events or the reconciler's log; the check is shown to catch a provider
// that reveals it.
func TestNoSecretLeaksThroughProviderErrorsOrLogs(t *testing.T) {
	const sentinel = "SENTINEL-inline-7c1e"
	for _, tc := range []struct {
		name   string
		reveal bool
	}{{"formats the request", false}, {"reveals the cloud-init (must be caught)", true}} {
		t.Run(tc.name, func(t *testing.T) {
			entry, fp := fakeEntry("pool")
			entry.Provider = &formattingProvider{Provider: fp, reveal: tc.reveal}
			d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
			px := newProxy("web", "pool")
			px.Spec.CloudInit = sentinel
			d.create(px)

			var logs bytes.Buffer
			// Every level the operator and its providers log at. From V(8)
			// on, client-go prints whole API bodies, inline spec.cloudInit
			// included: docs/operations.md says so.
			log := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 7})
			ctx := logr.NewContext(context.Background(), log)
			if _, err := d.r.Reconcile(ctx, reqFor(d.ns, "web")); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), `"Proxy"`) && !strings.Contains(logs.String(), "web") {
				t.Errorf("the provider's log lines do not carry the reconcile's logger values: %s", logs.String())
			}
			var leaks []string
			if strings.Contains(conditionMessage(d.get("web")), sentinel) {
				leaks = append(leaks, "condition")
			}
			for _, e := range d.events() {
				if strings.Contains(e, sentinel) {
					leaks = append(leaks, "event")
				}
			}
			if strings.Contains(logs.String(), sentinel) {
				leaks = append(leaks, "log")
			}
			if tc.reveal != (len(leaks) > 0) {
				t.Errorf("reveal=%t, leaks found in %v; condition %q", tc.reveal, leaks, conditionMessage(d.get("web")))
			}
		})
	}
}

// formattingProvider fails Create with an error that formats the whole
// request, and logs it, the way a careless provider would.
type formattingProvider struct {
	*fake.Provider
	reveal bool
}

func (p *formattingProvider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	logr.FromContextOrDiscard(ctx).Info("create request", "request", req, "cloudInit", req.CloudInit)
	if p.reveal {
		return provider.Instance{}, provider.Errorf(provider.ErrPermanent, "refused user-data %s", req.CloudInit.Reveal())
	}
	return provider.Instance{}, provider.Errorf(provider.ErrPermanent, "refused %+v (user-data %v, %s)", req, req.CloudInit, req.CloudInit)
}

func clientKey(name string) types.NamespacedName { return types.NamespacedName{Name: name} }

// staleClient serves one Proxy from an old copy, as a cache that has not
// caught up with the operator's own last status write would.
type staleClient struct {
	client.Client
	stale *egressv1.Proxy
}

func (c *staleClient) Get(ctx context.Context, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if px, ok := obj.(*egressv1.Proxy); ok && k.Name == c.stale.Name && k.Namespace == c.stale.Namespace {
		c.stale.DeepCopyInto(px)
		return nil
	}
	return c.Client.Get(ctx, k, obj, opts...)
}

// Item 4, found by the crash soak (make soak): a pass that reads a Proxy
// from a stale cache (its status without the instance the previous pass
// recorded) and acts on it must not overwrite the newer status, which
// would leave the recorded instance unrecorded and so leak it at deletion.
func TestStaleCacheStatusNeverDropsARecordedInstance(t *testing.T) {
	entry, fp := fakeEntry("pool")
	providers := &staticProviders{entries: map[string]*registry.Entry{"pool": entry}}
	d := newDirect(t, providers)
	stale := d.create(newProxy("web", "pool")) // finalizer on, no instance yet
	d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	recorded := d.get("web").Status.ProviderID
	d.updateSpec("web", func(s *egressv1.ProxySpec) { s.Port = 8080 })
	// The cache still shows the Proxy as it was before its first instance,
	// but with the new spec.
	stale.Spec.Port = 8080
	stale.Generation = d.get("web").Generation
	lagging := &ProxyReconciler{Client: &staleClient{Client: env.Client, stale: stale}, APIReader: env.Client, Providers: providers,
		RunningResync: time.Minute}
	lagging.init()
	if _, err := lagging.Reconcile(context.Background(), reqFor(d.ns, "web")); err != nil {
		t.Fatalf("Reconcile on a stale cache: %v", err)
	}
	if got := d.get("web").Status.RecordedProviderIDs(); !slices.Contains(got, recorded) {
		t.Fatalf("a pass on a stale cache overwrote the status: records %v, lost %s", got, recorded)
	}
	// The fresh pass takes it from there, finds what the stale pass made,
	// and the deletion leaves nothing behind.
	d.reconcileUntil("web", 6, "replaced", func(p *egressv1.Proxy) bool {
		return readyReason(p) == "True/Running" && strings.HasSuffix(p.Status.Endpoint, ":8080") && len(p.Status.RecordedProviderIDs()) == 1
	})
	if err := env.Client.Delete(context.Background(), d.get("web")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6 && d.get("web") != nil; i++ {
		d.reconcile("web")
	}
	if recs := fp.Backend().Records(); d.get("web") != nil || len(recs) != 0 {
		t.Fatalf("after deletion: Proxy %v, backend %v", d.get("web") != nil, recs)
	}
}

// Item 4, found by the crash soak: the operator died after a Create made
// a secondary resource (a ConfigMap, a seed volume) but before its
// instance existed; the Proxy is deleted. The secondary is found by the
// Proxy's UID and deleted before the finalizer goes.
func TestDeletionFindsSecondariesOfAnInstanceNeverMade(t *testing.T) {
	entry, fp := fakeEntry("pool")
	entry.Secondary = fp
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	px := d.create(newProxy("web", "pool"))
	name := createRequest(px, "", "", inPlace{}, "").Name
	fp.Backend().PlantSecondary("seed-iso", name, &provider.Marks{Managed: true, UID: string(px.UID), Installation: testInstallation})
	other := fp.Backend().PlantSecondary("seed-iso", "proxy-someone-else", &provider.Marks{Managed: true, UID: "uid-other", Installation: testInstallation})
	if err := env.Client.Delete(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4 && d.get("web") != nil; i++ {
		d.reconcile("web")
	}
	if d.get("web") != nil {
		t.Fatal("the Proxy was not released")
	}
	if rec, ok := fp.Backend().LookupSecondary("seed-iso", name); ok {
		t.Fatalf("the finalizer was released but the Proxy's secondary is still there: %+v", rec)
	}
	if _, ok := fp.Backend().LookupSecondary("seed-iso", other.Instance); !ok {
		t.Error("another Proxy's secondary was deleted")
	}
}
