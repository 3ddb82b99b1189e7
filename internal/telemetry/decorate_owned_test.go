package telemetry_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// ownerFake is the fake with the optional OwnerLister: a filter of its
// listings by the UID mark.
type ownerFake struct{ *closingFake }

func (o ownerFake) ListOwnedInstances(ctx context.Context, uid string) ([]provider.Instance, error) {
	all, err := o.ListByTag(ctx)
	var own []provider.Instance
	for _, in := range all {
		if in.UID == uid {
			own = append(own, in)
		}
	}
	return own, err
}

func (o ownerFake) ListOwnedSecondaries(context.Context, string) ([]provider.Secondary, error) {
	return nil, provider.Errorf(provider.ErrTransient, "backend busy")
}

// TestOwnerListingsSpannedAndCounted: the OwnerLister's calls (a Proxy's
// deletion pass) get a span naming the Proxy's UID and a count and duration
// sample each, like every other provider call; without the decorator they
// were the only calls with neither.
func TestOwnerListingsSpannedAndCounted(t *testing.T) {
	rec, tp := newRecorder()
	_, fp, _ := newEntry(t, tp)
	name := providerName(t) + "-owned"
	e := decoratedEntry(t, tp, name, ownerFake{fp})
	if e.Owned == nil {
		t.Fatal("the entry lost its OwnerLister")
	}
	ctx := context.Background()
	if _, err := e.Provider.Create(ctx, createRequest(uid)); err != nil {
		t.Fatal(err)
	}
	before := len(rec.Ended())
	own, err := e.Owned.ListOwnedInstances(ctx, uid)
	if err != nil || len(own) != 1 {
		t.Fatalf("ListOwnedInstances = %+v, %v; want the one instance", own, err)
	}
	if _, err := e.Owned.ListOwnedSecondaries(ctx, uid); err == nil {
		t.Fatal("the scripted failure did not reach the caller")
	}
	spans := rec.Ended()[before:]
	if len(spans) != 2 {
		t.Fatalf("spans %v, want the two listings", spanNames(spans))
	}
	wantAttrs(t, spanNamed(t, spans, "provider.list_owned_instances"), map[string]string{
		"provider.name": name, "proxy.uid": uid, "provider.instance.count": "1", "error.class": "none",
	})
	wantAttrs(t, spanNamed(t, spans, "provider.list_owned_secondaries"), map[string]string{
		"provider.name": name, "proxy.uid": uid, "error.class": "Transient",
	})
	for _, c := range []struct{ op, class string }{
		{provider.OpListOwnedInstances, "none"}, {provider.OpListOwnedSecondaries, "Transient"},
	} {
		if n := testutil.ToFloat64(telemetry.ProviderCalls.WithLabelValues(name, "fake", c.op, c.class)); n != 1 {
			t.Errorf("calls{%s,%s} = %v, want 1", c.op, c.class, n)
		}
	}
}
