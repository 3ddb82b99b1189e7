package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
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
	r.forget(key(px))
	controllerutil.RemoveFinalizer(px, Finalizer)
	if err := r.Client.Update(ctx, px); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

func (r *ProxyReconciler) deleteInstances(ctx context.Context, px *egressv1.Proxy) (ctrl.Result, bool) {
	px.Status.Phase = egressv1.PhaseDeleting
	ids := nonEmpty(px.Status.ProviderID, px.Status.RetiringProviderID)
	if len(ids) == 0 {
		// Nothing was recorded. An instance made by a Create whose status
		// write was lost is collected by the garbage collector, which finds
		// its UID on no Proxy.
		return ctrl.Result{}, true
	}
	if px.Annotations[egressv1.AnnotationForceRelease] == "true" {
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
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonProviderNotFound,
			fmt.Sprintf("cannot delete instance %s: spec.provider %q names no entry in the providers config; add it back, or set the annotation %s=true to abandon the instance", ids[0], px.Spec.Provider, egressv1.AnnotationForceRelease))
		return ctrl.Result{}, false
	}
	ctx = logr.NewContext(ctx, logr.FromContextOrDiscard(ctx).WithValues("provider", entry.Name))
	r.setReady(px, metav1.ConditionFalse, egressv1.ReasonDeleting, "deleting instance "+ids[0])

	remaining := 0
	for _, id := range ids {
		err := r.deleteInstance(ctx, entry, id)
		if err == nil {
			_, err = r.get(ctx, entry, id)
		}
		switch {
		case errors.Is(err, provider.ErrNotFound):
			if id == px.Status.ProviderID {
				px.Status.ProviderID, px.Status.IP, px.Status.Endpoint = "", "", ""
			} else {
				px.Status.RetiringProviderID = ""
			}
		case err != nil:
			// Keep the finalizer on every error: deleting the Proxy must
			// not leak the instance.
			return r.failedDelete(ctx, px, err), false
		default:
			remaining++
		}
	}
	if remaining > 0 {
		return ctrl.Result{RequeueAfter: entry.PollInterval}, false
	}
	r.event(px, "Normal", "InstanceDeleted", "Delete", "instance deleted from provider %q", entry.Name)
	return ctrl.Result{}, true
}

func (r *ProxyReconciler) failedDelete(ctx context.Context, px *egressv1.Proxy, err error) ctrl.Result {
	log := logr.FromContextOrDiscard(ctx)
	msg := "deleting the instance: " + err.Error()
	switch provider.ClassOf(err) {
	case provider.ErrPermanent:
		log.Error(err, "the provider refuses to delete the instance; the Proxy keeps its finalizer")
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonPermanentFailure, msg)
		return ctrl.Result{}
	case provider.ErrQuotaExceeded:
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonQuotaExceeded, msg)
		return ctrl.Result{RequeueAfter: r.quotaBackoff.When(key(px))}
	default:
		log.Info("transient failure deleting the instance; backing off", "error", err.Error())
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonBackendError, msg)
		return ctrl.Result{RequeueAfter: r.transientBackoff.When(key(px))}
	}
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
