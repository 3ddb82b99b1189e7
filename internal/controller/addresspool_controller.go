package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/ippool"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/keyedlock"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// The built-in IPAM provider. Cluster API's IPAM contract: a consumer makes
// an IPAddressClaim naming a pool (poolRef); the provider that serves the
// pool's kind makes an IPAddress of the same name, in the same namespace,
// holding one address, and points the claim's status.addressRef at it;
// deleting the claim releases the address. This allocator serves the pools
// written in the providers config (poolRef kind AddressPool of
// egress.proxy-operator.dev, named after the entry); a pool served by
// another provider (the in-cluster IPAM provider, NetBox, Infoblox) is named
// by the entry's ipamPoolRef and never touched here.
//
// Conflict-free: the addresses in use are the IPAddress objects themselves,
// read from the API server (not a cache) under a lock per pool, so two
// claims reconciled at once, or one reconciled just after a restart, never
// get the same address; the leader election keeps it to one allocator.

// FinalizerReleaseAddress holds a claim until its IPAddress is deleted.
const FinalizerReleaseAddress = "egress.proxy-operator.dev/release-address"

// AddressPoolReconciler binds the claims of the providers config's pools.
type AddressPoolReconciler struct {
	Client client.Client
	// APIReader reads the pool's IPAddresses uncached.
	APIReader client.Reader
	Providers Providers
	// Namespaces bounds where the operator reads and makes objects; empty:
	// every namespace.
	Namespaces []string

	locks keyedlock.Locks
}

// builtinPool says whether a claim is this allocator's.
func builtinPool(o client.Object) bool {
	c, ok := o.(*ipamv1.IPAddressClaim)
	return ok && c.Spec.PoolRef.APIGroup == registry.BuiltinPoolGroup && c.Spec.PoolRef.Kind == registry.BuiltinPoolKind
}

// SetupWithManager registers the allocator. The IPAM kinds must be served.
func (r *AddressPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&ipamv1.IPAddressClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(builtinPool))).
		// Claims of different pools go on at once; one pool's are
		// serialised by its lock.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("addresspool").
		Complete(r)
}

// Reconcile binds, or releases, one claim.
func (r *AddressPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	claim := &ipamv1.IPAddressClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, claim); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !builtinPool(claim) {
		return ctrl.Result{}, nil
	}
	if !claim.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.release(ctx, claim)
	}
	if controllerutil.AddFinalizer(claim, FinalizerReleaseAddress) {
		if err := r.Client.Update(ctx, claim); err != nil {
			return ctrl.Result{}, err
		}
	}
	pool := claim.Spec.PoolRef.Name
	unlock, err := r.locks.Lock(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer unlock()
	return ctrl.Result{}, r.bind(ctx, claim)
}

// bind gives the claim its address: the IPAddress already made for it, or
// a new one from the pool.
func (r *AddressPoolReconciler) bind(ctx context.Context, claim *ipamv1.IPAddressClaim) error {
	ref := claim.Spec.PoolRef
	entry, err := r.Providers.Get(ref.Name)
	var ap *registry.AddressPool
	if err == nil {
		ap = entry.AddressPool()
	}
	if ap == nil || ap.Pool == nil || ap.Ref != fromPool(ref) {
		return r.setReady(ctx, claim, "", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyPoolNotReadyReason,
			fmt.Sprintf("no providers config entry %q with an addressPool of its own", ref.Name))
	}
	held, err := r.held(ctx, fromPool(ref))
	if err != nil {
		return err
	}
	for a, holder := range held {
		if holder == (types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}) {
			return r.setReady(ctx, claim, claim.Name, metav1.ConditionTrue, claimReasonAllocated,
				fmt.Sprintf("%s from %s", a, ap.Pool))
		}
	}
	var want netip.Addr
	if w := claim.Annotations[AnnotationRequestedAddress]; w != "" {
		if want, err = netip.ParseAddr(w); err != nil {
			return r.setReady(ctx, claim, "", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyAllocationFailedReason,
				fmt.Sprintf("annotation %s: %q is not an address", AnnotationRequestedAddress, w))
		}
	}
	addr, err := ap.Pool.Allocate(want, func(a netip.Addr) bool { _, ok := held[a]; return ok })
	switch {
	case errors.Is(err, ippool.ErrExhausted):
		return r.setReady(ctx, claim, "", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyPoolExhaustedReason,
			fmt.Sprintf("pool %s (providers config entry %s) has no free address: %d held", ap.Pool, ref.Name, len(held)))
	case errors.Is(err, ippool.ErrHeld):
		return r.setReady(ctx, claim, "", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyAllocationFailedReason,
			fmt.Sprintf("address %s of pool %s is held by IPAddressClaim %s", want, ref.Name, held[want]))
	case errors.Is(err, ippool.ErrOutside):
		return r.setReady(ctx, claim, "", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyAllocationFailedReason,
			fmt.Sprintf("address %s is not in pool %s (%s)", want, ref.Name, ap.Pool))
	case err != nil:
		return err
	}
	prefix := int32(ap.Pool.Prefix())
	ip := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name},
		Spec: ipamv1.IPAddressSpec{ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name}, PoolRef: ref,
			Address: addr.String(), Prefix: &prefix},
	}
	if gw := ap.Pool.Gateway(); gw.IsValid() {
		ip.Spec.Gateway = gw.String()
	}
	if err := controllerutil.SetControllerReference(claim, ip, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, ip); err != nil {
		// AlreadyExists: an earlier pass made it and did not get to the
		// claim's status; the next pass reads it as held.
		return fmt.Errorf("making IPAddress %s/%s: %w", ip.Namespace, ip.Name, err)
	}
	logr.FromContextOrDiscard(ctx).Info("address allocated", "claim", claim.Namespace+"/"+claim.Name, "address", addr, "pool", ref.Name)
	return r.setReady(ctx, claim, ip.Name, metav1.ConditionTrue, claimReasonAllocated,
		fmt.Sprintf("%s from %s", addr, ap.Pool))
}

// held maps each address of the pool in use to its claim, from the
// IPAddress objects as the API server has them now.
func (r *AddressPoolReconciler) held(ctx context.Context, ref registry.PoolRef) (map[netip.Addr]types.NamespacedName, error) {
	namespaces := r.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	out := map[netip.Addr]types.NamespacedName{}
	for _, ns := range namespaces {
		list := &ipamv1.IPAddressList{}
		if err := r.APIReader.List(ctx, list, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("listing the IPAddresses of pool %s: %w", ref.Name, err)
		}
		for _, a := range list.Items {
			if fromPool(a.Spec.PoolRef) != ref {
				continue
			}
			ip, err := netip.ParseAddr(a.Spec.Address)
			if err != nil {
				continue // not an address: holds nothing
			}
			out[ip] = types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.ClaimRef.Name}
		}
	}
	return out, nil
}

// setReady writes the claim's addressRef and Ready condition when they
// change.
func (r *AddressPoolReconciler) setReady(ctx context.Context, claim *ipamv1.IPAddressClaim, addressName string, status metav1.ConditionStatus, reason, msg string) error {
	before := claim.DeepCopy()
	claim.Status.AddressRef.Name = addressName
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{Type: ipamv1.IPAddressClaimReadyCondition,
		Status: status, Reason: reason, Message: msg, ObservedGeneration: claim.Generation})
	if equalClaimStatus(before, claim) {
		return nil
	}
	return r.Client.Status().Patch(ctx, claim, client.MergeFrom(before))
}

func equalClaimStatus(a, b *ipamv1.IPAddressClaim) bool {
	if a.Status.AddressRef != b.Status.AddressRef || len(a.Status.Conditions) != len(b.Status.Conditions) {
		return false
	}
	for i := range a.Status.Conditions {
		x, y := a.Status.Conditions[i], b.Status.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

// release deletes the claim's IPAddress, then lets the claim go.
func (r *AddressPoolReconciler) release(ctx context.Context, claim *ipamv1.IPAddressClaim) error {
	if !controllerutil.ContainsFinalizer(claim, FinalizerReleaseAddress) {
		return nil
	}
	ip := &ipamv1.IPAddress{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, ip)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case ip.Spec.ClaimRef.Name == claim.Name:
		if err := r.Client.Delete(ctx, ip, client.Preconditions{UID: &ip.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing IPAddress %s/%s: %w", ip.Namespace, ip.Name, err)
		}
		logr.FromContextOrDiscard(ctx).Info("address released", "claim", claim.Namespace+"/"+claim.Name, "address", ip.Spec.Address)
	}
	controllerutil.RemoveFinalizer(claim, FinalizerReleaseAddress)
	return client.IgnoreNotFound(r.Client.Update(ctx, claim))
}

// claimReasonAllocated is the Ready reason of a bound claim.
const claimReasonAllocated = "Allocated"
