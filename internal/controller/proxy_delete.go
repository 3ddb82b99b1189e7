package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// reconcileDelete deletes the Proxy's instances (the serving one and one
// being retired) and drops the finalizer only once Get says NotFound for
// each, so an instance is never left behind by a Delete that returned early
// or failed.
func (r *ProxyReconciler) reconcileDelete(ctx context.Context, px *egressv1.Proxy) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(px, Finalizer) {
		return ctrl.Result{}, nil
	}
	before := px.DeepCopy()
	res, done := r.deleteInstances(ctx, px)
	if !done {
		return res, r.writeStatus(ctx, before, px)
	}
	if released, err := r.releasePoolAddress(ctx, px); err != nil || !released {
		if err == nil {
			err = errPoolPending{fmt.Sprintf("releasing the Proxy's address %s (IPAddressClaim %s/%s)", px.Status.EgressAddress.Address, px.Namespace, px.Name)}
		}
		r.report(px, observation{seen: addressPending, err: err})
		return ctrl.Result{RequeueAfter: poolPendingPoll}, r.writeStatus(ctx, before, px)
	}
	r.forget(key(px))
	if a := egressAddressOf(px, pooled(px)); a != nil && a.Reserve && a.Retain && px.Status.EgressAddress != nil {
		r.event(px, corev1.EventTypeNormal, ReasonEgressAddressRetained, "Delete",
			"address %s stays reserved (reclaimPolicy Retain), labelled with this Proxy's UID; a new Proxy takes it over with spec.egressAddress.name: %s",
			a.Name, a.Name)
	}
	controllerutil.RemoveFinalizer(px, Finalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, px))
}

func (r *ProxyReconciler) deleteInstances(ctx context.Context, px *egressv1.Proxy) (ctrl.Result, bool) {
	rec := recordOf(&px.Status)
	ids := px.Status.RecordedProviderIDs()
	if px.Annotations[egressv1.AnnotationForceRelease] == "true" {
		if len(ids) == 0 {
			return ctrl.Result{}, true
		}
		// The user gave up on the backend (a provider gone for good): the
		// instances are abandoned, and the event says which.
		logr.FromContextOrDiscard(ctx).Info("force-released: the backend instances are abandoned", "instances", ids)
		r.event(px, "Warning", "ForceReleased", "Delete",
			"deletion finished without deleting instance(s) %s on provider %q (annotation %s); remove them by hand if they still exist",
			strings.Join(ids, ", "), px.Spec.Provider, egressv1.AnnotationForceRelease)
		return ctrl.Result{}, true
	}
	entry, err := r.Providers.Get(px.Spec.Provider)
	if err != nil {
		if len(ids) == 0 {
			// No provider and nothing recorded: there is nothing to find
			// the Proxy's instances on.
			return ctrl.Result{}, true
		}
		r.report(px, observation{seen: noProvider, id: ids[0]})
		return ctrl.Result{}, false
	}
	ctx = logr.NewContext(ctx, logr.FromContextOrDiscard(ctx).WithValues("provider", entry.Name))

	// An instance the status does not record (a Create whose result a
	// killed operator never wrote, or a pass that acted on a cache that had
	// not caught up) is found by the Proxy's UID rather than left to the
	// collector's grace, and so is what such a Create made before its
	// instance (a ConfigMap, a seed volume), which no instance listing
	// shows. The crash soak (make soak) showed that no cheaper test of
	// "the status may be incomplete" catches every such window, so every
	// deletion pass lists; concurrent passes share the listings (sweep.go).
	found, err := r.ownedUnrecorded(ctx, entry, px, ids)
	if err == nil {
		err = r.deleteOwnedSecondaries(ctx, entry, px, append(ids, found...), instancesOnes)
	}
	if err != nil {
		return r.failedDelete(ctx, px, err), false
	}
	ids = append(ids, found...)
	if len(ids) == 0 {
		return r.deleteProxyOwn(ctx, entry, px)
	}
	r.report(px, observation{seen: deletingInstance, id: ids[0]})

	remaining := 0
	for _, id := range ids {
		err := r.deleteInstance(ctx, entry, id)
		if err == nil {
			_, err = r.get(ctx, entry, id)
		}
		switch {
		case errors.Is(err, provider.ErrNotFound):
			rec = forgetInstance(rec, id)
		case err != nil:
			// Keep the finalizer on every error: deleting the Proxy must
			// not leak the instance.
			rec.store(&px.Status)
			return r.failedDelete(ctx, px, err), false
		default:
			remaining++
		}
	}
	rec.store(&px.Status)
	if rec.current == "" && rec.retiring == "" {
		px.Status.IP, px.Status.Endpoint = "", ""
	}
	if remaining > 0 {
		return ctrl.Result{RequeueAfter: entry.PollInterval}, false
	}
	return r.deleteProxyOwn(ctx, entry, px)
}

// deleteProxyOwn deletes, once every instance is gone, the secondary
// resources that belong to the Proxy rather than to an instance: the egress
// address reserved for it (no backend deletes one an instance holds). Only
// a Proxy that asks for one pays the listing; what an earlier spec reserved
// is the collector's, as an orphan, once the Proxy is gone.
func (r *ProxyReconciler) deleteProxyOwn(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy) (ctrl.Result, bool) {
	if a := egressAddressOf(px, pooled(px)); a == nil || !a.Reserve || a.Retain {
		return ctrl.Result{}, true
	}
	if err := r.deleteOwnedSecondaries(ctx, entry, px, nil, proxysOwn); err != nil {
		return r.failedDelete(ctx, px, err), false
	}
	return ctrl.Result{}, true
}

// Which of a Proxy's secondary resources a deletion step deletes.
type secondaryScope int

const (
	// instancesOnes: those of an instance (named, or with an ID).
	instancesOnes secondaryScope = iota
	// proxysOwn: those of the Proxy itself (neither).
	proxysOwn
)

// ownedUnrecorded lists the provider's instances and returns those that
// carry the Proxy's UID and are not in recorded.
func (r *ProxyReconciler) ownedUnrecorded(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, recorded []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	insts, err := r.instancesOf(ctx, entry, string(px.UID))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, in := range insts {
		if in.UID == string(px.UID) && in.ID != "" && !slices.Contains(recorded, in.ID) && !slices.Contains(out, in.ID) {
			out = append(out, in.ID)
		}
	}
	if len(out) > 0 {
		logr.FromContextOrDiscard(ctx).Info("found instances of the Proxy that its status did not record; deleting them", "instances", out)
	}
	return out, nil
}

// deleteOwnedSecondaries deletes the secondary resources that carry the
// Proxy's UID and belong to none of the instances in ids (their Delete
// takes those with them). A provider without secondary resources costs
// nothing.
func (r *ProxyReconciler) deleteOwnedSecondaries(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, ids []string, scope secondaryScope) error {
	if entry.Secondary == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	secs, err := r.secondariesOf(ctx, entry, string(px.UID))
	if err != nil {
		return err
	}
	for _, s := range secs {
		own := s.Instance == "" && s.InstanceID == ""
		if s.Marks.UID != string(px.UID) || own != (scope == proxysOwn) || (!own && slices.Contains(ids, s.InstanceID)) {
			continue
		}
		logr.FromContextOrDiscard(ctx).Info("deleting a secondary resource of the Proxy that no recorded instance accounts for",
			"kind", s.Kind, "id", s.ID, "instance", s.Instance)
		if err := entry.Secondary.DeleteSecondary(ctx, s.ID); err != nil {
			return err
		}
	}
	return nil
}

// forgetInstance drops id from wherever rec records it.
func forgetInstance(rec record, id string) record {
	switch id {
	case rec.current:
		rec.current, rec.currentName = "", ""
	case rec.retiring:
		rec.retiring, rec.retiringName = "", ""
	}
	return gone(rec, id)
}

// failedDelete records a failure of the deletion pass by its class and says
// when to try again.
func (r *ProxyReconciler) failedDelete(ctx context.Context, px *egressv1.Proxy, err error) ctrl.Result {
	log := logr.FromContextOrDiscard(ctx)
	var res ctrl.Result
	switch provider.ClassOf(err) {
	case provider.ErrPermanent:
		log.Error(err, "the provider refuses to delete the instance; the Proxy keeps its finalizer")
	case provider.ErrQuotaExceeded:
		res.RequeueAfter = r.quotaBackoff.When(key(px))
	default:
		res.RequeueAfter = r.deleteBackoff.When(key(px))
		log.Info("transient failure deleting the instance; backing off", "error", err.Error(), "retryIn", res.RequeueAfter)
	}
	r.report(px, observation{seen: failure, err: err})
	return res
}
