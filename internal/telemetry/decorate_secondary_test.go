package telemetry_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/codes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// TestSecondaryCallsSpannedAndCounted (issue 8, item 2): ListSecondary and
// DeleteSecondary get a span and a count and duration sample each, like
// every other provider call, with the operation names of the contract.
func TestSecondaryCallsSpannedAndCounted(t *testing.T) {
	rec, tp := newRecorder()
	e, fp, _ := newEntry(t, tp)
	if e.Secondary == nil {
		t.Fatal("the decorated entry lost its Secondary")
	}
	planted := fp.Backend().PlantSecondary("volume", "proxy-gone-0123",
		&provider.Marks{Managed: true, UID: uid, Installation: installation})
	ctx := context.Background()
	list, err := e.Secondary.ListSecondary(ctx)
	if err != nil || len(list) != 1 || list[0].ID != planted.ID {
		t.Fatalf("ListSecondary = %+v, %v", list, err)
	}
	if err := e.Secondary.DeleteSecondary(ctx, planted.ID); err != nil {
		t.Fatal(err)
	}
	fp.FailNext(provider.OpDeleteSecondary, provider.ErrPermanent)
	if err := e.Secondary.DeleteSecondary(ctx, planted.ID); err == nil {
		t.Fatal("the scripted failure did not reach the caller")
	}

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("spans %v, want 3", spanNames(spans))
	}
	wantAttrs(t, spanNamed(t, spans[:1], "provider.list_secondary"), map[string]string{
		"provider.name": e.Name, "provider.type": "fake", "provider.secondary.count": "1", "error.class": "none",
	})
	wantAttrs(t, spans[1], map[string]string{"provider.secondary.id": planted.ID, "error.class": "none"})
	failed := spans[2]
	wantAttrs(t, failed, map[string]string{"provider.secondary.id": planted.ID, "error.class": "Permanent"})
	if spans[1].Name() != "provider.delete_secondary" || failed.Name() != "provider.delete_secondary" {
		t.Errorf("delete spans are named %q and %q, want %q", spans[1].Name(), failed.Name(), "provider.delete_secondary")
	}
	if failed.Status().Code != codes.Error {
		t.Errorf("failed delete's span status %+v", failed.Status())
	}
	for _, c := range []struct {
		op, class string
	}{{provider.OpListSecondary, "none"}, {provider.OpDeleteSecondary, "none"}, {provider.OpDeleteSecondary, "Permanent"}} {
		if n := testutil.ToFloat64(telemetry.ProviderCalls.WithLabelValues(e.Name, "fake", c.op, c.class)); n != 1 {
			t.Errorf("calls{%s,%s} = %v, want 1", c.op, c.class, n)
		}
		if n := histogramCount(t, e.Name, c.op, c.class); n != 1 {
			t.Errorf("duration{%s,%s} has %d samples, want 1", c.op, c.class, n)
		}
	}
	if telemetry.Unwrap(e.Provider) != provider.Provider(fp) {
		t.Error("Unwrap no longer reaches the provider")
	}
}
