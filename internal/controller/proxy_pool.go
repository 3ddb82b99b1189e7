package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// A Proxy on an entry with an addressPool holds one address through every
// replacement of its instance: an IPAddressClaim in its namespace, named as
// the Proxy, bound by the pool's IPAM provider to an IPAddress (Cluster
// API's IPAM contract; the built-in allocator in addresspool_controller.go
// serves the pools written in the providers config). The claim is made
// before the first instance and deleted after the last one is gone, so the
// address is never free while an instance may still hold it; and since two
// instances must never hold it at once, a replacement deletes the old
// instance before it creates the new one (releaseForPool).
//
// Claims and addresses are read with the API reader, not the cache: the
// kinds may not be served at all in a cluster with no pool, and a cache
// would start a watch on them.

// Annotations and labels on the claims the operator makes.
const (
	// AnnotationRequestedAddress on a claim asks the allocator for that
	// address (spec.egressAddress.address).
	AnnotationRequestedAddress = "egress.proxy-operator.dev/requested-address"
	// LabelClaimProxy marks a claim as the Proxy's (its UID), so that a
	// claim of the same name made by someone else is never taken.
	LabelClaimProxy = "egress.proxy-operator.dev/proxy-uid"
)

// errPoolPending: the Proxy's claim is not bound yet; the pass waits.
type errPoolPending struct{ msg string }

func (e errPoolPending) Error() string { return e.msg }

// poolRefString is how a pool is named in messages and in the status.
func poolRefString(ref registry.PoolRef) string {
	return fmt.Sprintf("%s.%s/%s", ref.Kind, ref.APIGroup, ref.Name)
}

// poolShape is what of the entry's pool shapes the Proxy's instances: an
// entry that gains, loses or changes its IPAM pool replaces them.
func poolShape(entry *registry.Entry) string {
	if p := entry.AddressPool(); p != nil {
		return poolRefString(p.Ref)
	}
	return ""
}

// poolAddress returns the Proxy's address from its entry's pool, making
// its claim when there is none. mayRebind: no instance of the Proxy exists
// any more, so a claim made for another request (another pool, another
// requested address) may be deleted and made anew. It returns
// errPoolPending while the claim is unbound, a QuotaExceeded error when the
// pool is exhausted and a Permanent one when the asked-for address cannot
// be had.
func (r *ProxyReconciler) poolAddress(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, mayRebind bool) (*provider.StaticAddress, error) {
	pool := entry.AddressPool()
	want := ""
	if px.Spec.EgressAddress != nil {
		want = px.Spec.EgressAddress.Address
	}
	k := types.NamespacedName{Namespace: px.Namespace, Name: px.Name}
	claim := &ipamv1.IPAddressClaim{}
	err := r.APIReader.Get(ctx, k, claim)
	switch {
	case apierrors.IsNotFound(err):
		return nil, r.makeClaim(ctx, px, pool.Ref, want)
	case meta.IsNoMatchError(err):
		return nil, provider.Errorf(provider.ErrPermanent,
			"providers config entry %s has an addressPool, but this cluster serves no %s IPAddressClaim: install Cluster API's IPAM types (config/components/ipam) or Cluster API itself",
			entry.Name, ipamv1.GroupVersion)
	case err != nil:
		return nil, fmt.Errorf("reading IPAddressClaim %s: %w", k, err)
	}
	if claim.Labels[LabelClaimProxy] != string(px.UID) {
		return nil, provider.Errorf(provider.ErrPermanent,
			"IPAddressClaim %s exists and is not this Proxy's (no label %s=%s): the Proxy's address is claimed under its own name; rename or remove that claim",
			k, LabelClaimProxy, px.UID)
	}
	if st := px.Status.EgressAddress; st == nil || st.Name != claim.Name || st.Pool != poolRefString(fromPool(claim.Spec.PoolRef)) {
		// Recorded before it is bound, so a deletion releases a claim
		// that never got an address too.
		px.Status.EgressAddress = &egressv1.EgressAddressStatus{Name: claim.Name, Pool: poolRefString(fromPool(claim.Spec.PoolRef))}
	}
	if !claim.DeletionTimestamp.IsZero() {
		return nil, errPoolPending{fmt.Sprintf("waiting for IPAddressClaim %s to be released by %s", k, poolRefString(pool.Ref))}
	}
	if fromPool(claim.Spec.PoolRef) != pool.Ref || claim.Annotations[AnnotationRequestedAddress] != want {
		if !mayRebind {
			return nil, errPoolPending{fmt.Sprintf("IPAddressClaim %s was made for another pool or address; it is made anew once the Proxy's instances are gone", k)}
		}
		if err := r.Client.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting IPAddressClaim %s, made for another pool or address: %w", k, err)
		}
		return nil, errPoolPending{fmt.Sprintf("releasing IPAddressClaim %s, made for another pool or address", k)}
	}
	if claim.Status.AddressRef.Name == "" {
		return nil, claimRefusal(k, claim, pool.Ref)
	}
	static, err := claimedAddress(ctx, r.APIReader, k, claim, pool)
	if err != nil {
		return nil, err
	}
	px.Status.EgressAddress = &egressv1.EgressAddressStatus{Name: claim.Status.AddressRef.Name, Address: static.Address.Addr().String(),
		Pool: poolRefString(pool.Ref), ProviderID: holderOf(px)}
	return static, nil
}

// claimedAddress reads the IPAddress that the bound claim k names, as the
// provider takes it (with the pool's resolvers): errPoolPending while it
// does not exist yet, Permanent when it is no usable address.
func claimedAddress(ctx context.Context, reader client.Reader, k types.NamespacedName, claim *ipamv1.IPAddressClaim, pool *registry.AddressPool) (*provider.StaticAddress, error) {
	ak := types.NamespacedName{Namespace: k.Namespace, Name: claim.Status.AddressRef.Name}
	addr := &ipamv1.IPAddress{}
	if err := reader.Get(ctx, ak, addr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errPoolPending{fmt.Sprintf("IPAddressClaim %s names IPAddress %s, which does not exist yet", k, ak.Name)}
		}
		return nil, fmt.Errorf("reading IPAddress %s: %w", ak, err)
	}
	static, err := staticAddressOf(addr, pool.DNS)
	if err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "IPAddress %s from %s: %v", ak, poolRefString(pool.Ref), err)
	}
	return static, nil
}

// holderOf is the instance that holds the pool address: the serving one,
// else the one being made (the address is on its NIC from its first boot).
func holderOf(px *egressv1.Proxy) string {
	if id := recordOf(&px.Status).servingID(); id != "" {
		return id
	}
	return px.Status.ProviderID
}

// makeClaim claims an address for px from ref. The Proxy owns its claim,
// so a cluster's garbage collector removes it should the operator be gone;
// the operator itself deletes it after the Proxy's last instance.
func (r *ProxyReconciler) makeClaim(ctx context.Context, px *egressv1.Proxy, ref registry.PoolRef, want string) error {
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: px.Namespace, Name: px.Name,
			Labels: map[string]string{LabelClaimProxy: string(px.UID)}},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}},
	}
	if want != "" {
		claim.Annotations = map[string]string{AnnotationRequestedAddress: want}
	}
	if err := controllerutil.SetOwnerReference(px, claim, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("claiming an address from %s (IPAddressClaim %s/%s): %w", poolRefString(ref), px.Namespace, px.Name, err)
	}
	px.Status.EgressAddress = &egressv1.EgressAddressStatus{Name: claim.Name, Pool: poolRefString(ref)}
	r.event(px, "Normal", ReasonAddressClaimed, "Claim", "IPAddressClaim %s/%s asks %s for the Proxy's address", px.Namespace, px.Name, poolRefString(ref))
	return errPoolPending{fmt.Sprintf("waiting for %s to bind IPAddressClaim %s/%s", poolRefString(ref), px.Namespace, px.Name)}
}

// claimRefusal reads why an unbound claim is unbound: the allocator's
// Ready condition (the built-in one's reasons, or any IPAM provider's
// message), or nothing yet.
func claimRefusal(k types.NamespacedName, claim *ipamv1.IPAddressClaim, ref registry.PoolRef) error {
	c := meta.FindStatusCondition(claim.Status.Conditions, ipamv1.IPAddressClaimReadyCondition)
	if c == nil || c.Status != metav1.ConditionFalse {
		return errPoolPending{fmt.Sprintf("waiting for %s to bind IPAddressClaim %s", poolRefString(ref), k)}
	}
	msg := fmt.Sprintf("IPAddressClaim %s: %s", k, c.Message)
	switch c.Reason {
	case ipamv1.IPAddressClaimReadyPoolExhaustedReason:
		return provider.Errorf(provider.ErrQuotaExceeded, "%s", msg)
	case ipamv1.IPAddressClaimReadyAllocationFailedReason:
		return provider.Errorf(provider.ErrPermanent, "%s", msg)
	}
	return errPoolPending{fmt.Sprintf("%s (%s)", msg, c.Reason)}
}

// staticAddressOf is an IPAddress as the provider takes it.
func staticAddressOf(a *ipamv1.IPAddress, dns []netip.Addr) (*provider.StaticAddress, error) {
	ip, err := netip.ParseAddr(a.Spec.Address)
	if err != nil {
		return nil, fmt.Errorf("spec.address %q is not an address", a.Spec.Address)
	}
	if a.Spec.Prefix == nil || int(*a.Spec.Prefix) < 1 || int(*a.Spec.Prefix) > ip.BitLen() {
		return nil, fmt.Errorf("spec.prefix is missing or out of range for %s", ip)
	}
	out := &provider.StaticAddress{Address: netip.PrefixFrom(ip, int(*a.Spec.Prefix)), DNS: dns}
	if a.Spec.Gateway != "" {
		if out.Gateway, err = netip.ParseAddr(a.Spec.Gateway); err != nil {
			return nil, fmt.Errorf("spec.gateway %q is not an address", a.Spec.Gateway)
		}
	}
	return out, nil
}

func fromPool(r ipamv1.IPPoolReference) registry.PoolRef {
	return registry.PoolRef{APIGroup: r.APIGroup, Kind: r.Kind, Name: r.Name}
}

// releaseForPool makes room for a new instance on the Proxy's pool address:
// the instance that serves on it now goes first (superseded and deleted),
// since the address is never on two instances. It returns the number of
// instances still to go; 0: the new instance may be created.
func (r *ProxyReconciler) releaseForPool(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy) int {
	if px.Status.RetiringProviderID != "" {
		r.apply(px, release)
	}
	r.deleteSuperseded(ctx, entry, px)
	return len(px.Status.SupersededProviderIDs)
}

// releasePoolAddress deletes the Proxy's claim once its instances are
// gone, and says whether it is gone (the pool's provider removes the
// IPAddress first).
func (r *ProxyReconciler) releasePoolAddress(ctx context.Context, px *egressv1.Proxy) (bool, error) {
	if px.Status.EgressAddress == nil || px.Status.EgressAddress.Pool == "" {
		return true, nil
	}
	k := types.NamespacedName{Namespace: px.Namespace, Name: px.Name}
	claim := &ipamv1.IPAddressClaim{}
	err := r.APIReader.Get(ctx, k, claim)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading IPAddressClaim %s: %w", k, err)
	case claim.Labels[LabelClaimProxy] != string(px.UID):
		return true, nil // someone else's: never deleted
	case claim.DeletionTimestamp.IsZero():
		if err := r.Client.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("releasing the Proxy's address (IPAddressClaim %s): %w", k, err)
		}
	}
	return false, nil
}

// isPoolPending tells errPoolPending apart.
func isPoolPending(err error) (errPoolPending, bool) {
	var p errPoolPending
	ok := errors.As(err, &p)
	return p, ok
}

// pooled says the Proxy's address came from a pool, as its status records.
func pooled(px *egressv1.Proxy) bool {
	return px.Status.EgressAddress != nil && px.Status.EgressAddress.Pool != ""
}

// poolPendingPoll is how often a pass looks at a claim the pool has not
// bound (or released) yet: the built-in allocator takes milliseconds, and
// claims are read uncached, so there is no watch to wait on.
const poolPendingPoll = 2 * time.Second

// ReasonAddressClaimed is the Normal event of a Proxy whose address is
// claimed from its entry's pool.
const ReasonAddressClaimed = "AddressClaimed"
