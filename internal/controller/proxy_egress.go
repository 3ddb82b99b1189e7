package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// How status.egressIP is decided: from what the serving instance's
// provider reports (provider.Instance.Egress), never assumed from the
// address clients connect to. applyEgress is the one place; its table in
// proxy_egress_test.go covers each case.

// egressConfirmRefresh is how much newer a confirmation of the same
// address must be before status.egress.lastConfirmed is rewritten: an
// echo confirms every minute, and a status write per Proxy per minute
// would be most of a fleet's writes for a timestamp nobody needs to the
// minute.
const egressConfirmRefresh = 5 * time.Minute

// applyEgress shows the egress address of inst, the instance that serves
// the Proxy, in st: the address with how and when it was observed, and
// the EgressIPObserved condition. An echo that fails keeps the last
// confirmed address and says so; an instance that took over and has not
// reported yet clears the previous instance's address (it is not assumed
// to be this one's) and says whose it was.
func applyEgress(st *egressv1.ProxyStatus, inst provider.Instance, generation int64) {
	e, prev := inst.Egress, st.Egress
	sameInstance := prev != nil && prev.ProviderID == inst.ID
	cond := func(status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: egressv1.ConditionEgressIPObserved,
			Status: status, Reason: reason, Message: msg, ObservedGeneration: generation})
	}
	switch {
	case e.IP != "":
		obs := &egressv1.EgressObservation{Source: string(e.Source), ProviderID: inst.ID}
		if !e.Confirmed.IsZero() {
			obs.LastConfirmed = &metav1.Time{Time: e.Confirmed.UTC().Truncate(time.Second)}
		}
		if sameInstance && st.EgressIP == e.IP && prev.Source == obs.Source && !confirmedLater(obs.LastConfirmed, prev.LastConfirmed) {
			obs.LastConfirmed = prev.LastConfirmed
		}
		st.EgressIP, st.Egress = e.IP, obs
		msg := fmt.Sprintf("destinations see %s (%s)", e.IP, describeSource(e.Source))
		switch {
		case e.Error == "":
			cond(metav1.ConditionTrue, egressv1.EgressReasonConfirmed, msg)
			return
		case e.Source == provider.EgressFromBackend:
			// The backend's address stands; its note (an echo that saw
			// another) is for the reader.
			cond(metav1.ConditionTrue, egressv1.EgressReasonConfirmed, msg+"; "+e.Error)
			return
		}
		cond(metav1.ConditionFalse, egressv1.EgressReasonEchoFailing,
			fmt.Sprintf("%s; %s is the address last confirmed%s", e.Error, e.IP, confirmedAt(obs.LastConfirmed)))
	case e.Error != "":
		// Never confirmed on this instance.
		was := ""
		if prev != nil && !sameInstance {
			was = fmt.Sprintf(" (instance %s's was %s)", prev.ProviderID, st.EgressIP)
		}
		st.EgressIP, st.Egress = "", nil
		cond(metav1.ConditionFalse, egressv1.EgressReasonEchoFailing,
			fmt.Sprintf("instance %s has no egress address confirmed yet: %s%s", inst.ID, e.Error, was))
	case prev != nil && !sameInstance:
		was := fmt.Sprintf("instance %s's was %s", prev.ProviderID, st.EgressIP)
		st.EgressIP, st.Egress = "", nil
		cond(metav1.ConditionUnknown, egressv1.EgressReasonNotReportedYet,
			fmt.Sprintf("instance %s, which serves now, has not reported its egress address yet (%s)", inst.ID, was))
	}
	// Otherwise nothing is observed, or nothing new: as it was.
}

// confirmedLater says whether next is at least egressConfirmRefresh after
// prev (or prev is unknown).
func confirmedLater(next, prev *metav1.Time) bool {
	switch {
	case next == nil:
		return false
	case prev == nil:
		return true
	}
	return next.Sub(prev.Time) >= egressConfirmRefresh || next.Before(prev)
}

func confirmedAt(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return " at " + t.UTC().Format(time.RFC3339)
}

func describeSource(s provider.EgressSource) string {
	switch s {
	case provider.EgressFromBackend:
		return "the backend's address for the instance"
	case provider.EgressFromEcho:
		return "the entry's egressIPEcho, asked through the proxy"
	}
	return string(s)
}

// ReasonEgressAddressMoved is the Normal event of a kept egress address
// moved to the instance that serves now; ReasonEgressAddressRetained the
// one of an address kept after its Proxy (reclaimPolicy Retain).
const (
	ReasonEgressAddressMoved    = "EgressAddressMoved"
	ReasonEgressAddressRetained = "EgressAddressRetained"
)

// moveTimeout bounds one move of an egress address: a few backend
// operations (gcp: three), each seconds on a real cloud. A move cut short
// is taken up again by the next pass (MoveEgressAddress is idempotent).
const moveTimeout = 2 * time.Minute

// holdEgressAddress gives the instance that serves the Proxy its kept
// egress address (spec.egressAddress), when its provider keeps one by
// moving it and the status does not record it there yet: at a
// replacement's cutover (from the retiring instance), after an autoheal
// (from the instance the status last recorded) and once after the first
// create (a read: the instance was made with it). It returns the instance
// as read again after a move, since its address may be the moved one. A
// failure leaves the retiring instance serving; the next pass tries again.
func (r *ProxyReconciler) holdEgressAddress(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, inst provider.Instance) (provider.Instance, error) {
	if entry.AddressPool() != nil {
		// A pool address is the instance's own from its first boot
		// (proxy_pool.go): nothing moves; the status says who holds it.
		if px.Status.EgressAddress != nil {
			px.Status.EgressAddress.ProviderID = inst.ID
		}
		return inst, nil
	}
	addr := egressAddressOf(px, false)
	if addr == nil || entry.Mover == nil {
		px.Status.EgressAddress = nil
		return inst, nil
	}
	held := px.Status.EgressAddress
	if held != nil && held.Name == addr.Name && held.ProviderID == inst.ID {
		return inst, nil
	}
	from := px.Status.RetiringProviderID
	if held != nil && held.Name == addr.Name && held.ProviderID != "" {
		from = held.ProviderID
	}
	began := time.Now()
	mctx, cancel := context.WithTimeout(ctx, moveTimeout)
	err := entry.Mover.MoveEgressAddress(mctx, *addr, from, inst.ID)
	cancel()
	if err != nil {
		return inst, err
	}
	px.Status.EgressAddress = &egressv1.EgressAddressStatus{Name: addr.Name, ProviderID: inst.ID}
	if from != "" && from != inst.ID {
		r.event(px, corev1.EventTypeNormal, ReasonEgressAddressMoved, "Replace", "address %s moved from instance %s to %s in %s",
			addr.Name, from, inst.ID, time.Since(began).Round(100*time.Millisecond))
	}
	again, err := r.get(ctx, entry, inst.ID)
	if err != nil {
		return inst, err
	}
	return again, nil
}
