package controller

import (
	"context"
	"strings"
	"testing"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// A permanent failure that came from the provider's configuration is
// retried once that configuration changes, with no change to the Proxy.
func TestLatchReleasedByProviderRevision(t *testing.T) {
	entry, fp := fakeEntry("pool")
	entry.Revision = "r1"
	providers := &staticProviders{entries: map[string]*registry.Entry{"pool": entry}}
	d := newDirect(t, providers)
	d.create(newProxy("web", "pool"))

	fp.FailNext(provider.OpCreate, provider.Errorf(provider.ErrPermanent, "zone unknown to this provider"))
	d.reconcile("web")
	d.reconcile("web")
	if got := readyReason(d.get("web")); got != "False/PermanentFailure" || fp.Calls(provider.OpCreate) != 1 {
		t.Fatalf("latch: Ready %s, Create calls %d", got, fp.Calls(provider.OpCreate))
	}

	reconfigured := *entry
	reconfigured.Revision = "r2"
	providers.set(&reconfigured)
	d.reconcile("web")
	if got := readyReason(d.get("web")); got != "True/Running" {
		t.Fatalf("after the provider changed: Ready %s", got)
	}
	if fp.Calls(provider.OpCreate) != 2 {
		t.Errorf("Create calls = %d, want 2", fp.Calls(provider.OpCreate))
	}
}

// TestLatchSurvivesRestart (issue 7 item 5): the latch is read from the
// Proxy's status, so a restarted operator or a new leader does not retry a
// latched Proxy.
func TestLatchSurvivesRestart(t *testing.T) {
	entry, fp := fakeEntry("pool")
	providers := &staticProviders{entries: map[string]*registry.Entry{"pool": entry}}
	d := newDirect(t, providers)
	d.create(newProxy("web", "pool"))
	fp.SetError(provider.OpCreate, provider.Errorf(provider.ErrPermanent, "refused"))
	d.reconcile("web")

	restarted := newDirect(t, providers)
	restarted.ns = d.ns
	restarted.reconcile("web")
	restarted.reconcile("web")
	if n := fp.Calls(provider.OpCreate); n != 1 {
		t.Errorf("Create calls = %d, want 1: the restarted operator retried a latched Proxy", n)
	}
	if got := readyReason(restarted.get("web")); got != "False/PermanentFailure" {
		t.Errorf("Ready %s, want False/PermanentFailure", got)
	}
}

func TestForceReleaseAbandonsInstance(t *testing.T) {
	for _, providerGone := range []bool{false, true} {
		name := map[bool]string{false: "provider-present", true: "provider-gone"}[providerGone]
		t.Run(name, func(t *testing.T) {
			entry, fp := fakeEntry("pool")
			providers := &staticProviders{entries: map[string]*registry.Entry{"pool": entry}}
			d := newDirect(t, providers)
			d.create(newProxy("web", "pool"))
			px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
			if providerGone {
				providers.mu.Lock()
				delete(providers.entries, "pool")
				providers.mu.Unlock()
				if err := env.Client.Delete(context.Background(), px); err != nil {
					t.Fatal(err)
				}
				d.reconcile("web")
				got := d.get("web")
				if got == nil || readyReason(got) != "False/ProviderNotFound" {
					t.Fatalf("without the annotation the Proxy must wait: %+v", got)
				}
				if !strings.Contains(conditionMessage(got), egressv1.AnnotationForceRelease) {
					t.Errorf("the condition does not tell how to release: %q", conditionMessage(got))
				}
				px = got
			}
			if px.Annotations == nil {
				px.Annotations = map[string]string{}
			}
			px.Annotations[egressv1.AnnotationForceRelease] = "true"
			if err := env.Client.Update(context.Background(), px); err != nil {
				t.Fatal(err)
			}
			if !providerGone {
				if err := env.Client.Delete(context.Background(), px); err != nil {
					t.Fatal(err)
				}
			}
			d.reconcile("web")
			if d.get("web") != nil {
				t.Fatal("force-release did not release the Proxy")
			}
			if _, ok := fp.Backend().Lookup(px.Status.InstanceName); !ok {
				t.Error("force-release deleted the instance")
			}
			if n := fp.Calls(provider.OpDelete); n != 0 {
				t.Errorf("Delete called %d times", n)
			}
			evs := d.events()
			if !containsAny(evs, "ForceReleased") || !containsAny(evs, px.Status.ProviderID) {
				t.Errorf("no ForceReleased event naming %s: %q", px.Status.ProviderID, evs)
			}
		})
	}
}
