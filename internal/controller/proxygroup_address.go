package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// A group on an entry with an addressPool (kvm, kvm2, proxmox) has an
// address of its own: an IPAddressClaim from the entry's pool, named
// <group>-address, which the members hold one at a time with VRRP among
// their own pool addresses. The group writes the address and each
// member's peers into the member's spec.groupAddress
// (proxy_groupaddress.go reads it), so changing them is a roll.
//
// The claim is owned by every member, not by the group: Kubernetes'
// garbage collector deletes it once the last member is gone, and a member
// is gone only once its instances are, so the address is never free while
// an instance may still hold it.

// LabelClaimGroup marks a claim as a group's (its UID), so that a claim
// of the same name made by someone else is never taken.
const LabelClaimGroup = "egress.proxy-operator.dev/group-uid"

// groupClaimName is the name of group g's address claim.
func groupClaimName(g string) string { return g + "-address" }

// groupAddressing is what a group knows of its address.
type groupAddressing struct {
	// pooled: the template's entry has an addressPool, so the group
	// holds an address of its own; false: its endpoint is its holder's.
	pooled bool
	// virtual is the group's address with the pool's prefix length;
	// invalid until its claim is bound.
	virtual netip.Prefix
	// members are the members' own pool addresses by index, as their
	// status records them.
	members map[int]netip.Addr
	// specs are the members' spec.groupAddress as they are, by index,
	// and older which of the members may still run an instance of an
	// older spec (one being replaced, or a spec not yet seen).
	specs map[int]*egressv1.MemberGroupAddress
	older map[int]bool
	// waiting says what the group's address waits for, when it does.
	waiting string
	// stalled, when set, is a failure only a person can end.
	stalled *metav1.Condition
	// claimants are, on a pool, the ready members reporting that they
	// hold the group's address (addressHolder).
	claimants []string
	// front is the endpoint of the group's front, when the template's
	// provider keeps one (proxygroup_front.go): the group's endpoint,
	// over every ready member, with no holder.
	front string
}

// desiredGroupAddress is member i's spec.groupAddress: nil off a pool;
// the group's address and every other member's own address once all are
// known and every other member that may run an instance already lists
// member i among its peers; until then what member i has, or an empty one
// (no instance). So a member's peers change once, when every member's
// address is known, never to a partial list; and a member joins only once
// the others would hear it: keepalived sends its adverts to its own list
// only, and a member that hears nobody takes the address, so a newcomer
// listed by none would hold it beside the holder.
func desiredGroupAddress(a groupAddressing, n, i int) *egressv1.MemberGroupAddress {
	if !a.pooled {
		return nil
	}
	was := a.specs[i]
	self, known := a.members[i]
	complete := a.virtual.IsValid() && known
	var peers []netip.Addr
	for j := range n {
		if j == i || !complete {
			continue
		}
		addr, ok := a.members[j]
		if !ok || !hears(a.specs[j], a.older[j], self) {
			complete = false
			continue
		}
		peers = append(peers, addr)
	}
	if complete {
		slices.SortFunc(peers, func(x, y netip.Addr) int { return x.Compare(y) })
		out := &egressv1.MemberGroupAddress{Address: a.virtual.String()}
		for _, p := range peers {
			out.Peers = append(out.Peers, p.String())
		}
		return out
	}
	if was != nil && was.Address != "" {
		return was.DeepCopy()
	}
	return &egressv1.MemberGroupAddress{}
}

// hears says a member with spec.groupAddress ga would hear addr: it runs
// no instance yet (no address written), or lists it and no instance of
// an older list of it may still run.
func hears(ga *egressv1.MemberGroupAddress, older bool, addr netip.Addr) bool {
	if ga == nil || ga.Address == "" {
		return true
	}
	return !older && slices.Contains(ga.Peers, addr.String())
}

// runsOlder says the member may still run an instance of an older spec:
// its reconciler has not seen the current one, or is replacing an
// instance.
func runsOlder(px *egressv1.Proxy) bool {
	return px.Status.ObservedGeneration != px.Generation || px.Status.RetiringProviderID != "" || len(px.Status.SupersededProviderIDs) > 0
}

// addressing reads the group's address and its members' own ones, making
// the group's claim when there is none and keeping every member among its
// owners. Off a pool it returns groupAddressing{}.
func (r *ProxyGroupReconciler) addressing(ctx context.Context, g *egressv1.ProxyGroup, members map[int]*egressv1.Proxy) (groupAddressing, error) {
	var a groupAddressing
	if r.Providers == nil {
		return a, nil
	}
	entry, err := r.Providers.Get(g.Spec.Template.Spec.Provider)
	if err != nil || entry.AddressPool() == nil {
		// An unknown entry is for the members to say.
		return a, nil
	}
	pool := entry.AddressPool()
	a.pooled = true
	a.members = map[int]netip.Addr{}
	a.specs = map[int]*egressv1.MemberGroupAddress{}
	a.older = map[int]bool{}
	for i, px := range members {
		a.specs[i], a.older[i] = px.Spec.GroupAddress, runsOlder(px)
		if st := px.Status.EgressAddress; st != nil && st.Pool != "" && st.Address != "" {
			if addr, err := netip.ParseAddr(st.Address); err == nil {
				a.members[i] = addr
			}
		}
	}

	k := types.NamespacedName{Namespace: g.Namespace, Name: groupClaimName(g.Name)}
	claim := &ipamv1.IPAddressClaim{}
	err = r.APIReader.Get(ctx, k, claim)
	switch {
	case apierrors.IsNotFound(err):
		if len(members) == 0 {
			a.waiting = "waiting for the members, which own the group's address claim"
			return a, nil
		}
		if err := r.makeGroupClaim(ctx, g, members, pool.Ref); err != nil {
			return a, err
		}
		a.waiting = fmt.Sprintf("waiting for %s to bind IPAddressClaim %s", poolRefString(pool.Ref), k)
		return a, nil
	case meta.IsNoMatchError(err):
		a.waiting = fmt.Sprintf("this cluster serves no %s IPAddressClaim (the members say more)", ipamv1.GroupVersion)
		return a, nil
	case err != nil:
		return a, fmt.Errorf("reading IPAddressClaim %s: %w", k, err)
	}
	if claim.Labels[LabelClaimGroup] != string(g.UID) {
		a.stalled = &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: egressv1.GroupReasonAddressConflict,
			Message: fmt.Sprintf("IPAddressClaim %s exists and is not this group's (no label %s=%s): rename or remove it", k, LabelClaimGroup, g.UID)}
		a.waiting = a.stalled.Message
		return a, nil
	}
	if err := r.ownGroupClaim(ctx, claim, members); err != nil {
		return a, err
	}
	if claim.Status.AddressRef.Name == "" {
		a.waiting = claimRefusal(k, claim, pool.Ref).Error()
		return a, nil
	}
	static, err := claimedAddress(ctx, r.APIReader, k, claim, pool)
	if p, ok := isPoolPending(err); ok {
		a.waiting = p.msg
		return a, nil
	}
	if provider.ClassOf(err) == provider.ErrPermanent {
		a.stalled = &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: egressv1.GroupReasonAddressConflict,
			Message: err.Error()}
		a.waiting = a.stalled.Message
		return a, nil
	}
	if err != nil {
		return a, err
	}
	a.virtual = static.Address
	return a, nil
}

// makeGroupClaim claims the group's address from ref, owned by the
// members there are.
func (r *ProxyGroupReconciler) makeGroupClaim(ctx context.Context, g *egressv1.ProxyGroup, members map[int]*egressv1.Proxy, ref registry.PoolRef) error {
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: groupClaimName(g.Name),
			Labels: map[string]string{LabelClaimGroup: string(g.UID), egressv1.LabelGroup: g.Name}},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}},
	}
	for _, px := range members {
		if err := controllerutil.SetOwnerReference(px, claim, r.Client.Scheme()); err != nil {
			return err
		}
	}
	if err := r.Client.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("claiming the group's address from %s (IPAddressClaim %s/%s): %w", poolRefString(ref), g.Namespace, claim.Name, err)
	}
	r.event(g, "AddressClaimed", "IPAddressClaim %s asks %s for the group's address", claim.Name, poolRefString(ref))
	return nil
}

// ownGroupClaim adds the members the claim's owners lack (a member made
// after the claim), so the claim lives as long as any member.
func (r *ProxyGroupReconciler) ownGroupClaim(ctx context.Context, claim *ipamv1.IPAddressClaim, members map[int]*egressv1.Proxy) error {
	changed := false
	for _, px := range members {
		if !px.DeletionTimestamp.IsZero() {
			continue
		}
		owned, err := controllerutil.HasOwnerReference(claim.OwnerReferences, px, r.Client.Scheme())
		if err != nil {
			return err
		}
		if !owned {
			if err := controllerutil.SetOwnerReference(px, claim, r.Client.Scheme()); err != nil {
				return err
			}
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := r.Client.Update(ctx, claim); err != nil {
		return fmt.Errorf("making the members owners of IPAddressClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}
