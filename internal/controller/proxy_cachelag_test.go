package controller

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// laggingCache is a client whose next Get answers with a copy the test
// holds, as the manager's cache does while a write's watch event has not
// reached it yet.
type laggingCache struct {
	client.Client
	stale *egressv1.Proxy
}

func (c *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if px, ok := obj.(*egressv1.Proxy); ok && c.stale != nil {
		c.stale.DeepCopyInto(px)
		c.stale = nil
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestPassOnTheCopyItsWriteReplacedCreatesNothing: a pass that reads the
// version of the Proxy its reconciler's own last write replaced (the
// status recording the new instance not yet in the cache) neither creates
// again nor writes; the next read of a newer version goes on as usual.
// Without proxy_cachelag.go the lagging pass repeats the Create (the flake
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
	lagging.stale = before
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
