package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// A group on a provider that moves an egress address between instances
// (gcp) keeps one address for all its members: spec.egressAddress, which
// the group moves to the instance of the member that holds its endpoint.
// The members come up on addresses of their own and never see the group's
// in their spec; the provider reserves an address the group asks it to,
// marked with the group's UID, on the first move, and the collector keeps
// it while the group lives (a secondary resource whose owner is a
// ProxyGroup). Once the group is gone it is an orphan the collector
// deletes, unless reclaimPolicy Retain left it out of the listing.

// groupEgressAddress is the group's spec.egressAddress as providers take
// it: the user's address by name, or the one reserved for the group under a
// name derived from the group.
func groupEgressAddress(g *egressv1.ProxyGroup) *provider.EgressAddress {
	spec := g.Spec.EgressAddress
	if spec == nil {
		return nil
	}
	owner := ptr.To(groupRef(g))
	if spec.Name != "" {
		return &provider.EgressAddress{Name: spec.Name, Group: owner}
	}
	return &provider.EgressAddress{Name: provider.EgressAddressName(g.Namespace, g.Name, string(g.UID)), Reserve: true,
		Retain: spec.ReclaimPolicy == egressv1.ReclaimRetain, Group: owner}
}

// groupEgressMove is a move of the group's egress address that is due:
// the address, the entry that moves it, and from which instance (empty
// the first time) to which member's.
type groupEgressMove struct {
	addr       provider.EgressAddress
	mover      provider.EgressAddressMover
	from       string
	fromMember string
	to         *egressv1.Proxy
}

// dueGroupEgressMove says where the group's egress address is kept and
// whether it must move to the holder's instance: the first time a member
// is ready, after the holder changed (its instance lost or not serving),
// and after the holder's own instance was replaced. It calls nothing:
// the move is made once the status was written (moveGroupEgressAddress).
// For a failure only a person can end it returns the Stalled condition.
func (r *ProxyGroupReconciler) dueGroupEgressMove(g *egressv1.ProxyGroup, members map[int]*egressv1.Proxy,
	holder string) (*groupAddressMove, *groupEgressMove, *metav1.Condition) {
	addr := groupEgressAddress(g)
	if addr == nil || r.Providers == nil {
		return nil, nil, nil
	}
	prev := g.Status.EgressAddress
	if prev != nil && prev.Name != addr.Name {
		prev = nil // another address now: nothing holds it yet
	}
	var kept *groupAddressMove
	if prev != nil {
		kept = &groupAddressMove{status: *prev}
	}
	entry, err := r.Providers.Get(g.Spec.Template.Spec.Provider)
	if err != nil {
		return kept, nil, nil // the members say what is wrong with the entry
	}
	refuse := func(format string, args ...any) (*groupAddressMove, *groupEgressMove, *metav1.Condition) {
		return kept, nil, &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: egressv1.GroupReasonEgressAddressFailed, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case entry.AddressPool() != nil:
		return refuse("spec.egressAddress: provider entry %q has an addressPool, from which the group holds an address of its own: leave spec.egressAddress out", entry.Name)
	case entry.Mover == nil:
		return refuse("spec.egressAddress: provider entry %q (type %s) does not move an egress address between instances, so a group on it cannot keep one (gcp does; kvm, kvm2 and proxmox hold a pool address through VRRP)",
			entry.Name, entry.Type)
	}
	var to *egressv1.Proxy
	for _, px := range members {
		if px.Name == holder {
			to = px
		}
	}
	if to == nil || !memberReady(to) || to.Status.ProviderID == "" {
		return kept, nil, nil // moved once a member is ready to hold it
	}
	if prev != nil && prev.ProviderID == to.Status.ProviderID {
		return kept, nil, nil
	}
	m := &groupEgressMove{addr: *addr, mover: entry.Mover, to: to}
	if prev != nil {
		m.from, m.fromMember = prev.ProviderID, prev.Member
	}
	return kept, m, nil
}

// moveGroupEgressAddress makes move m. It returns where the address is
// now and, for a failure only a person can end, the Stalled condition. A
// transient failure is returned: the group is read again with backoff and
// the move is taken up from where it was (the provider's move is
// idempotent).
func (r *ProxyGroupReconciler) moveGroupEgressAddress(ctx context.Context, m *groupEgressMove) (*groupAddressMove, *metav1.Condition, error) {
	to := m.to
	began := time.Now()
	mctx, cancel := context.WithTimeout(ctx, moveTimeout)
	err := m.mover.MoveEgressAddress(mctx, m.addr, m.from, to.Status.ProviderID)
	cancel()
	if provider.ClassOf(err) == provider.ErrPermanent {
		return nil, &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: egressv1.GroupReasonEgressAddressFailed,
			Message: fmt.Sprintf("moving spec.egressAddress %s to member %s: %v", m.addr.Name, to.Name, err)}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("moving the group's egress address %s to member %s (instance %s): %w", m.addr.Name, to.Name, to.Status.ProviderID, err)
	}
	took := time.Since(began).Round(100 * time.Millisecond)
	if r.InstanceChanged != nil {
		// Both instances' addresses changed: their members read them now.
		r.InstanceChanged(to.Status.ProviderID)
		if m.from != "" {
			r.InstanceChanged(m.from)
		}
	}
	logr.FromContextOrDiscard(ctx).Info("group egress address moved", "address", m.addr.Name, "member", to.Name,
		"instance", to.Status.ProviderID, "from", m.from, "took", took.String())
	moved := &groupAddressMove{status: egressv1.GroupEgressAddressStatus{Name: m.addr.Name, Member: to.Name, ProviderID: to.Status.ProviderID}}
	if m.from == "" {
		moved.note = fmt.Sprintf("address %s given to member %s (instance %s) in %s", m.addr.Name, to.Name, to.Status.ProviderID, took)
	} else {
		moved.note = fmt.Sprintf("address %s moved from member %s (instance %s) to member %s (instance %s) in %s",
			m.addr.Name, orNone(m.fromMember), m.from, to.Name, to.Status.ProviderID, took)
	}
	return moved, nil, nil
}

// groupAddressMove is the outcome of holdGroupEgressAddress: where the
// address is, and, when this pass moved it, the event's note. The event
// is recorded once the status says so: a status write that conflicts
// leaves the move to the next pass, which finds it done (a move is
// idempotent) and says it then, once.
type groupAddressMove struct {
	status egressv1.GroupEgressAddressStatus
	note   string
}

// statusOf is where m says the address is, nil for none.
func (m *groupAddressMove) statusOf() *egressv1.GroupEgressAddressStatus {
	if m == nil {
		return nil
	}
	return &m.status
}
