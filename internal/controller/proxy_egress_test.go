package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// TestApplyEgress: status.egressIP comes from the serving instance's
// report only: confirmed, kept with the failure when the echo fails, never
// carried over to another instance, and lastConfirmed rewritten only when
// it moved by egressConfirmRefresh.
func TestApplyEgress(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	mt := func(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }
	echo := func(ip string, at time.Time, err string) provider.Egress {
		return provider.Egress{IP: ip, Source: provider.EgressFromEcho, Confirmed: at, Error: err}
	}
	was := func(ip, id string, at time.Time) egressv1.ProxyStatus {
		return egressv1.ProxyStatus{EgressIP: ip, Egress: &egressv1.EgressObservation{Source: "Echo", ProviderID: id, LastConfirmed: mt(at)}}
	}
	for _, tc := range []struct {
		name      string
		before    egressv1.ProxyStatus
		inst      provider.Instance
		wantIP    string
		wantAt    *metav1.Time
		wantCond  string // status/reason, "" for none
		wantInMsg string
	}{
		{"nothing observed, nothing shown", egressv1.ProxyStatus{}, provider.Instance{ID: "a"}, "", nil, "", ""},
		{"an echo's answer", egressv1.ProxyStatus{}, provider.Instance{ID: "a", Egress: echo("203.0.113.7", t0, "")},
			"203.0.113.7", mt(t0), "True/Confirmed", "destinations see 203.0.113.7 (the entry's egressIPEcho"},
		{"the backend's address", egressv1.ProxyStatus{},
			provider.Instance{ID: "a", Egress: provider.Egress{IP: "203.0.113.8", Source: provider.EgressFromBackend, Confirmed: t0}},
			"203.0.113.8", mt(t0), "True/Confirmed", "the backend's address"},
		{"the backend's address with a note", egressv1.ProxyStatus{},
			provider.Instance{ID: "a", Egress: provider.Egress{IP: "203.0.113.8", Source: provider.EgressFromBackend, Confirmed: t0, Error: "the echo saw 198.51.100.20"}},
			"203.0.113.8", mt(t0), "True/Confirmed", "destinations see 203.0.113.8 (the backend's address for the instance); the echo saw 198.51.100.20"},
		{"confirmed again within the refresh: lastConfirmed kept", was("203.0.113.7", "a", t0),
			provider.Instance{ID: "a", Egress: echo("203.0.113.7", t0.Add(4*time.Minute), "")}, "203.0.113.7", mt(t0), "True/Confirmed", ""},
		{"confirmed again after the refresh: lastConfirmed moves", was("203.0.113.7", "a", t0),
			provider.Instance{ID: "a", Egress: echo("203.0.113.7", t0.Add(5*time.Minute), "")}, "203.0.113.7", mt(t0.Add(5 * time.Minute)), "True/Confirmed", ""},
		{"a new address: at once", was("203.0.113.7", "a", t0),
			provider.Instance{ID: "a", Egress: echo("203.0.113.9", t0.Add(time.Minute), "")}, "203.0.113.9", mt(t0.Add(time.Minute)), "True/Confirmed", "203.0.113.9"},
		{"the echo fails: the last confirmed address kept, with the failure", was("203.0.113.7", "a", t0),
			provider.Instance{ID: "a", Egress: echo("203.0.113.7", t0, "the echo answered: HTTP/1.1 503 Service Unavailable")},
			"203.0.113.7", mt(t0), "False/EchoFailing", "the echo answered: HTTP/1.1 503 Service Unavailable; 203.0.113.7 is the address last confirmed at 2026-12-02T10:00:00Z"},
		{"the echo never answered this instance", egressv1.ProxyStatus{},
			provider.Instance{ID: "a", Egress: echo("", time.Time{}, "no answer from the proxy or the echo within 10s")},
			"", nil, "False/EchoFailing", "instance a has no egress address confirmed yet: no answer"},
		{"another instance serves and has not reported: the old address is not assumed", was("203.0.113.7", "a", t0),
			provider.Instance{ID: "b"}, "", nil, "Unknown/NotReportedYet", "instance b, which serves now, has not reported its egress address yet (instance a's was 203.0.113.7)"},
		{"another instance serves and its echo fails", was("203.0.113.7", "a", t0),
			provider.Instance{ID: "b", Egress: echo("", time.Time{}, "the echo answered: HTTP/1.1 403 Forbidden")}, "", nil, "False/EchoFailing", "(instance a's was 203.0.113.7)"},
		{"another instance reports its own", was("203.0.113.7", "a", t0),
			provider.Instance{ID: "b", Egress: echo("203.0.113.10", t0.Add(time.Minute), "")}, "203.0.113.10", mt(t0.Add(time.Minute)), "True/Confirmed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.before
			applyEgress(&st, tc.inst, 3)
			if st.EgressIP != tc.wantIP {
				t.Errorf("egressIP %q, want %q", st.EgressIP, tc.wantIP)
			}
			switch {
			case tc.wantIP == "" && st.Egress != nil:
				t.Errorf("egress %+v, want none", st.Egress)
			case tc.wantIP != "" && (st.Egress == nil || st.Egress.ProviderID != tc.inst.ID || string(st.Egress.Source) != string(tc.inst.Egress.Source)):
				t.Errorf("egress %+v, want observed on %s from %s", st.Egress, tc.inst.ID, tc.inst.Egress.Source)
			case tc.wantIP != "" && !st.Egress.LastConfirmed.Equal(tc.wantAt):
				t.Errorf("lastConfirmed %v, want %v", st.Egress.LastConfirmed, tc.wantAt)
			}
			c := meta.FindStatusCondition(st.Conditions, egressv1.ConditionEgressIPObserved)
			got := ""
			if c != nil {
				got = string(c.Status) + "/" + c.Reason
				if c.ObservedGeneration != 3 {
					t.Errorf("observedGeneration %d", c.ObservedGeneration)
				}
			}
			if got != tc.wantCond || (c != nil && !strings.Contains(c.Message, tc.wantInMsg)) {
				t.Errorf("condition %s %+v, want %s saying %q", got, c, tc.wantCond, tc.wantInMsg)
			}
		})
	}
}

// TestEgressIP_ShownFromTheServingInstance: through the API server, the
// provider's report reaches status.egressIP and the condition, and a
// failing echo leaves the address with the failure.
func TestEgressIP_ShownFromTheServingInstance(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	if px.Status.EgressIP != "" || meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionEgressIPObserved) != nil {
		t.Fatalf("with nothing reported: egressIP %q, conditions %+v", px.Status.EgressIP, px.Status.Conditions)
	}
	confirmed := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	set := func(e provider.Egress) {
		if !fp.Backend().SetServing(px.Status.InstanceName, fake.Serving{Serving: provider.ServingAnswering, Egress: e}) {
			t.Fatalf("no instance %s", px.Status.InstanceName)
		}
	}
	// Asked and not answered yet: read again at the entry's poll, not at
	// the running resync, so the address shows seconds after Ready.
	set(provider.Egress{Source: provider.EgressFromEcho})
	if res := d.reconcile("web"); res.RequeueAfter != entry.PollInterval {
		t.Errorf("with the echo's first answer awaited: requeue after %s, want the poll interval %s", res.RequeueAfter, entry.PollInterval)
	}
	if px = d.get("web"); px.Status.EgressIP != "" || meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionEgressIPObserved) != nil {
		t.Fatalf("with the echo's answer awaited: egressIP %q, conditions %+v", px.Status.EgressIP, px.Status.Conditions)
	}
	set(provider.Egress{IP: "203.0.113.7", Source: provider.EgressFromEcho, Confirmed: confirmed})
	if res := d.reconcile("web"); res.RequeueAfter < d.r.RunningResync/2 {
		t.Errorf("with the address confirmed: requeue after %s, want about the running resync %s", res.RequeueAfter, d.r.RunningResync)
	}
	px = d.get("web")
	c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionEgressIPObserved)
	if px.Status.EgressIP != "203.0.113.7" || px.Status.Egress == nil || !px.Status.Egress.LastConfirmed.Time.Equal(confirmed) ||
		c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("after the echo answered: egressIP %q, egress %+v, condition %+v", px.Status.EgressIP, px.Status.Egress, c)
	}
	set(provider.Egress{IP: "203.0.113.7", Source: provider.EgressFromEcho, Confirmed: confirmed, Error: "the echo answered: HTTP/1.1 503 Service Unavailable"})
	d.reconcile("web")
	px = d.get("web")
	c = meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionEgressIPObserved)
	if px.Status.EgressIP != "203.0.113.7" || c == nil || c.Reason != egressv1.EgressReasonEchoFailing || readyReason(px) != "True/Running" {
		t.Fatalf("after the echo failed: egressIP %q, condition %+v, Ready %s (the echo does not bear on Ready)", px.Status.EgressIP, c, readyReason(px))
	}
}

// TestEgressAddress_MovedAtCutover: a Proxy with spec.egressAddress on a
// provider that moves it: the first instance is recorded as holding it
// (its move is a no-op read), a replacement gets it moved from the old
// instance at the cutover, before the old one is deleted (an Event says
// so), and Retain names the address in an Event when the Proxy goes.
func TestEgressAddress_MovedAtCutover(t *testing.T) {
	entry, fp := fakeEntry("pool")
	entry.Mover = fake.Mover{Provider: fp}
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	px := newProxy("partner", "pool")
	px.Spec.EgressAddress = &egressv1.EgressAddressSpec{ReclaimPolicy: egressv1.ReclaimRetain}
	d.create(px)
	first := d.reconcileUntil("partner", 3, "Ready", hasReason("True/Running"))
	name := provider.EgressAddressName(first.Namespace, first.Name, string(first.UID))
	if first.Status.EgressAddress == nil || first.Status.EgressAddress.Name != name || first.Status.EgressAddress.ProviderID != first.Status.ProviderID {
		t.Fatalf("status.egressAddress %+v, want %s on %s", first.Status.EgressAddress, name, first.Status.ProviderID)
	}
	if got := fp.CreateRequests()[0].EgressAddress; got == nil || *got != (provider.EgressAddress{Name: name, Reserve: true, Retain: true}) {
		t.Fatalf("the create asked for %+v", got)
	}

	d.updateSpec("partner", func(s *egressv1.ProxySpec) { s.Port = 3129 })
	second := d.reconcileUntil("partner", 6, "Ready on a new instance", func(px *egressv1.Proxy) bool {
		return readyReason(px) == "True/Running" && px.Status.ProviderID != first.Status.ProviderID && px.Status.RetiringProviderID == ""
	})
	moves := fp.Backend().Moves()
	want := []fake.Move{{Address: name, To: first.Status.ProviderID}, {Address: name, From: first.Status.ProviderID, To: second.Status.ProviderID}}
	if !slices.Equal(moves, want) {
		t.Fatalf("moves %+v, want %+v", moves, want)
	}
	if second.Status.EgressAddress == nil || second.Status.EgressAddress.ProviderID != second.Status.ProviderID {
		t.Errorf("status.egressAddress %+v after the replacement", second.Status.EgressAddress)
	}
	if fp.Backend().AddressHolder(name) != second.Status.ProviderID {
		t.Errorf("the address is on %s", fp.Backend().AddressHolder(name))
	}
	if evs := d.events(); !containsAny(evs, "Normal "+ReasonEgressAddressMoved) {
		t.Errorf("no %s event: %q", ReasonEgressAddressMoved, evs)
	}

	if err := env.Client.Delete(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6 && d.get("partner") != nil; i++ {
		d.reconcile("partner")
	}
	if d.get("partner") != nil {
		t.Fatal("the Proxy is not gone after 6 passes")
	}
	if evs := d.events(); !containsAny(evs, "Normal "+ReasonEgressAddressRetained) {
		t.Errorf("no %s event: %q", ReasonEgressAddressRetained, evs)
	}
}

// TestEgressAddress_FailedMoveKeepsTheOldInstance: a move that fails
// leaves the retiring instance serving and recorded, and is tried again.
func TestEgressAddress_FailedMoveKeepsTheOldInstance(t *testing.T) {
	entry, fp := fakeEntry("pool")
	entry.Mover = fake.Mover{Provider: fp}
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	px := newProxy("partner", "pool")
	px.Spec.EgressAddress = &egressv1.EgressAddressSpec{}
	d.create(px)
	first := d.reconcileUntil("partner", 3, "Ready", hasReason("True/Running"))
	fp.SetError(provider.OpMoveEgressAddress, provider.Errorf(provider.ErrTransient, "backend hiccup"))
	d.updateSpec("partner", func(s *egressv1.ProxySpec) { s.Port = 3129 })
	for i := 0; i < 4; i++ {
		d.reconcile("partner")
	}
	px = d.get("partner")
	if px.Status.RetiringProviderID != first.Status.ProviderID || !strings.HasPrefix(readyReason(px), "True/") || px.Status.EgressAddress.ProviderID != first.Status.ProviderID {
		t.Fatalf("with the move failing: retiring %q, Ready %s, address on %+v; want %s retiring, serving and holding it",
			px.Status.RetiringProviderID, readyReason(px), px.Status.EgressAddress, first.Status.ProviderID)
	}
	if _, ok := fp.Backend().Lookup(strings.TrimPrefix(first.Status.ProviderID, fake.ID(""))); !ok {
		t.Fatal("the old instance was deleted before the address moved")
	}
	fp.SetError(provider.OpMoveEgressAddress, nil)
	d.reconcileUntil("partner", 4, "cut over", func(px *egressv1.Proxy) bool {
		return px.Status.RetiringProviderID == "" && readyReason(px) == "True/Running"
	})
}
