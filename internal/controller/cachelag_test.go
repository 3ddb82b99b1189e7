package controller

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// laggingCache is a client whose next Get of a Proxy or a ProxyGroup
// answers with a copy the test holds, as the manager's cache does while a
// write's watch event has not reached it yet.
type laggingCache struct {
	client.Client
	proxy *egressv1.Proxy
	group *egressv1.ProxyGroup
}

func (c *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch o := obj.(type) {
	case *egressv1.Proxy:
		if c.proxy != nil {
			c.proxy.DeepCopyInto(o)
			c.proxy = nil
			return nil
		}
	case *egressv1.ProxyGroup:
		if c.group != nil {
			c.group.DeepCopyInto(o)
			c.group = nil
			return nil
		}
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestPassOnTheCopyItsWriteReplacedCreatesNothing: a pass that reads the
// version of the Proxy its reconciler's own last write replaced (the
// status recording the new instance not yet in the cache) neither creates
// again nor writes; the next read of a newer version goes on as usual.
// Without cachelag.go the lagging pass repeats the Create (the flake
// of TestProxyGroupOnAPool: 2 creates of one instance in 2 runs of 60).
func TestPassOnTheCopyItsWriteReplacedCreatesNothing(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	fp.SetProvisioningGets(2)
	lagging := &laggingCache{Client: d.r.Client}
	d.r.Client = lagging
	before := d.create(newProxy("web", "pool"))

	d.reconcile("web")
	after := d.get("web")
	if after.Status.ProviderID == "" || fp.Calls(provider.OpCreate) != 1 {
		t.Fatalf("first pass: providerID %q, %d creates", after.Status.ProviderID, fp.Calls(provider.OpCreate))
	}
	lagging.proxy = before
	res := d.reconcile("web")
	if n := fp.Calls(provider.OpCreate); n != 1 {
		t.Errorf("a pass on the version the status write replaced: %d creates, want 1", n)
	}
	if got := d.get("web"); got.ResourceVersion != after.ResourceVersion {
		t.Errorf("that pass wrote the Proxy (resourceVersion %s -> %s)", after.ResourceVersion, got.ResourceVersion)
	}
	if res.RequeueAfter != cacheLagRecheck {
		t.Errorf("that pass asks to run again after %v, want %v", res.RequeueAfter, cacheLagRecheck)
	}

	px := d.reconcileUntil("web", 5, "Ready", hasReason("True/Running"))
	if n := fp.Calls(provider.OpCreate); n != 1 || px.Status.ProviderID != after.Status.ProviderID {
		t.Errorf("running on %s after %d creates, want %s after 1", px.Status.ProviderID, n, after.Status.ProviderID)
	}
}

// TestGroupPassOnTheCopyItsWriteReplacedDoesNothing: the same for a
// ProxyGroup. A pass on the version its own status write replaced would
// make its members again (refused: they exist) and fail its status write
// on a conflict, an error the manager logs; it does nothing instead.
func TestGroupPassOnTheCopyItsWriteReplacedDoesNothing(t *testing.T) {
	entry, _ := fakeEntry("pool")
	ns := newNamespace(t)
	ctx := context.Background()
	lagging := &laggingCache{Client: env.Client}
	r := &ProxyGroupReconciler{Client: lagging, APIReader: env.Client,
		Providers: &staticProviders{entries: map[string]*registry.Entry{"pool": entry}}, Recorder: &groupEvents{}}
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lag"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, Template: egressv1.ProxyTemplate{
			Spec: egressv1.ProxySpec{Provider: "pool", Port: 3128, AllowedSourceRanges: []string{"192.0.2.0/24"}},
		}},
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(g)}
	before := &egressv1.ProxyGroup{}
	if err := env.Client.Get(ctx, req.NamespacedName, before); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	after := &egressv1.ProxyGroup{}
	if err := env.Client.Get(ctx, req.NamespacedName, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion == before.ResourceVersion {
		t.Fatalf("first pass wrote no status: %+v", after.Status)
	}

	lagging.group = before
	res, err := r.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter != cacheLagRecheck {
		t.Errorf("a pass on the version the status write replaced: %+v, %v; want a recheck after %v and no error", res, err, cacheLagRecheck)
	}
	got := &egressv1.ProxyGroup{}
	if err := env.Client.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != after.ResourceVersion {
		t.Errorf("that pass wrote the group (resourceVersion %s -> %s)", after.ResourceVersion, got.ResourceVersion)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Errorf("the pass after, on the current version: %v", err)
	}
}
