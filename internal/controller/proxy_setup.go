package controller

import (
	"context"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// secretRefIndex indexes Proxies by the Secret their cloud-init comes from.
const secretRefIndex = "spec.cloudInitSecretRef.name"

// DefaultMaxConcurrentReconciles lets one slow Create (a VM that blocks for
// minutes) never delay the other Proxies.
const DefaultMaxConcurrentReconciles = 8

// SetupWithManager registers the reconciler. providersChanged receives an
// event whenever the provider set changes; every Proxy is then re-evaluated.
func (r *ProxyReconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrent int, providersChanged <-chan event.GenericEvent) error {
	r.init()
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultMaxConcurrentReconciles
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &egressv1.Proxy{}, secretRefIndex,
		func(o client.Object) []string {
			if ref := o.(*egressv1.Proxy).Spec.CloudInitSecretRef; ref != nil {
				return []string{ref.Name}
			}
			return nil
		}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&egressv1.Proxy{}, builder.WithPredicates(specOrLifecycleChanged{}, r.Scope.predicate())).
		// Secrets are watched by metadata only: a changed cloud-init Secret
		// reshapes its Proxies, and no Secret content is ever cached.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.proxiesForSecret), builder.OnlyMetadata).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrent}).
		Named("proxy")
	if providersChanged != nil {
		b = b.WatchesRawSource(source.Channel(providersChanged, handler.EnqueueRequestsFromMapFunc(r.allProxies)))
	}
	return b.Complete(telemetry.Reconciler(r.TracerProvider, "Proxy", r))
}

func (r *ProxyReconciler) proxiesForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	list := &egressv1.ProxyList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{secretRefIndex: o.GetName()}); err != nil {
		return nil
	}
	return requests(list)
}

func (r *ProxyReconciler) allProxies(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &egressv1.ProxyList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	return requests(list)
}

func requests(list *egressv1.ProxyList) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	}
	return out
}

// specOrLifecycleChanged passes updates that change what the reconciler acts
// on (spec, deletion, finalizers, annotations) and drops the ones the
// reconciler caused itself by writing status, which would otherwise cost a
// backend read per status write.
type specOrLifecycleChanged struct{ predicate.Funcs }

func (specOrLifecycleChanged) Update(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return true
	}
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() ||
		!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		!reflect.DeepEqual(o.GetFinalizers(), n.GetFinalizers()) ||
		!reflect.DeepEqual(o.GetAnnotations(), n.GetAnnotations())
}

// ProvidersChangedEvent is the event sent on the providers-changed channel.
func ProvidersChangedEvent() event.GenericEvent {
	return event.GenericEvent{Object: &metav1.PartialObjectMetadata{}}
}
