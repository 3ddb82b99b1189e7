package controller

import (
	"context"

	"testing"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

func TestTransitionEvent(t *testing.T) {
	for _, tc := range []struct {
		ready  bool
		reason string
		want   string // "" for no event
	}{
		{true, egressv1.ReasonRunning, ""},
		{true, egressv1.ReasonReplacing, ""},
		{false, egressv1.ReasonProvisioning, ""},
		{false, egressv1.ReasonDeleting, ""},
		{false, egressv1.ReasonInstanceLost, ""}, // observe records it
		{false, egressv1.ReasonBackendError, "Warning"},
		{false, egressv1.ReasonQuotaExceeded, "Warning"},
		{false, egressv1.ReasonPermanentFailure, "Warning"},
		{false, egressv1.ReasonProviderNotFound, "Warning"},
		{false, egressv1.ReasonCloudInitSecretNotFound, "Warning"},
		{false, egressv1.ReasonClientAuthSecretNotFound, "Warning"},
		{false, egressv1.ReasonClientAuthInvalid, "Warning"},
		{false, egressv1.ReasonInstanceStopped, "Warning"},
	} {
		typ, emit := transitionEvent(tc.ready, tc.reason)
		if got := map[bool]string{true: typ, false: ""}[emit]; got != tc.want || emit != (tc.want != "") {
			t.Errorf("transitionEvent(%v, %s) = %q, %v; want %q", tc.ready, tc.reason, typ, emit, tc.want)
		}
	}
}

// TestLifecycleEmitsNoEvent: create, run and delete a Proxy on a backend
// that never fails: no event, since the status (and the Proxy's going
// away) says everything; a lost instance records exactly one.
func TestLifecycleEmitsNoEvent(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	if evs := d.events(); len(evs) != 0 {
		t.Errorf("create to Ready emitted %q", evs)
	}

	fp.Remove(px.Status.InstanceName)
	d.reconcileUntil("web", 3, "Ready again", func(p *egressv1.Proxy) bool {
		return readyReason(p) == "True/Running" && fp.Calls(provider.OpCreate) == 2
	})
	if evs := d.events(); len(evs) != 1 || !containsAny(evs, "Warning "+egressv1.ReasonInstanceLost) {
		t.Errorf("a lost instance emitted %q; want one InstanceLost warning", evs)
	}

	if err := env.Client.Delete(context.Background(), d.get("web")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3 && d.get("web") != nil; i++ {
		d.reconcile("web")
	}
	if px := d.get("web"); px != nil {
		t.Fatalf("not deleted after 3 passes: %+v", px.Status)
	}
	if evs := d.events(); len(evs) != 0 {
		t.Errorf("deletion emitted %q", evs)
	}
}

// TestServingFailureRecordsOneEvent: a serving Proxy (no replacement)
// whose instance fails permanently turns Ready False, and that transition
// is its one event; it was recorded twice (the transition and a "still
// serving" event) when the two did not know of each other.
func TestServingFailureRecordsOneEvent(t *testing.T) {
	for _, class := range []error{provider.ErrPermanent, provider.ErrQuotaExceeded} {
		t.Run(class.Error(), func(t *testing.T) {
			entry, fp := fakeEntry("pool")
			d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
			d.create(newProxy("web", "pool"))
			d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
			d.events()

			fp.FailNext(provider.OpGet, provider.Errorf(class, "the backend refuses"))
			d.reconcile("web")
			evs := d.events()
			if len(evs) != 1 || !containsAny(evs, "Warning ") || !containsAny(evs, "the backend refuses") {
				t.Errorf("a serving Proxy's failure emitted %q; want one warning", evs)
			}
		})
	}
}
