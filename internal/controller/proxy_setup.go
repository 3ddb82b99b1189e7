package controller

import (
	"context"
	"reflect"
	"slices"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
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

// providerIndex indexes Proxies by spec.provider, so that a change of one
// provider (its config entry, its health) enqueues only its own Proxies.
const providerIndex = "spec.provider"

// DefaultMaxConcurrentReconciles lets one slow Create (a VM that blocks for
// minutes) never delay the other Proxies, and keeps a wave of Pods going:
// a kubernetes pass is three round trips to the API server, so with no
// client-side limit the workers are what paces a wave. 1,000 Proxies on
// that provider came up in 21.2 s with 8 workers, 14.4 s with 32 and
// 16.7 s with 100, where the API server is the limit (make bench-fleet,
// docs/performance.md). Karpenter runs its NodeClaim launch at 1,000.
const DefaultMaxConcurrentReconciles = 32

// instanceIndex indexes Proxies by the instances their status records as
// current and retiring, so that an instance a provider saw change enqueues
// its Proxy.
const instanceIndex = "status.instances"

// Changes are the channels that bring a pass outside the Proxies' own
// watch; a nil channel brings none.
type Changes struct {
	// Providers receives one event per provider entry added, rebuilt or
	// removed, named after it (ChangedEvent); the Proxies of that
	// entry are re-evaluated.
	Providers <-chan event.GenericEvent
	// Instances receives one event per instance its provider saw change
	// by itself (provider.InstanceWatcher), named by its ID
	// (ChangedEvent); its Proxy is read at once.
	Instances <-chan event.GenericEvent
}

// SetupWithManager registers the reconciler, with the channels of changes.
//
// Secrets are not watched: a watch needs list and watch on every Secret of
// the cluster. A Proxy's cloud-init Secret is read (get) on each of its
// passes instead, so a changed Secret takes effect at the Proxy's next pass.
func (r *ProxyReconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrent int, changes Changes) error {
	r.init()
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultMaxConcurrentReconciles
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &egressv1.Proxy{}, providerIndex,
		func(o client.Object) []string { return []string{o.(*egressv1.Proxy).Spec.Provider} }); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &egressv1.Proxy{}, instanceIndex, func(o client.Object) []string {
		st := o.(*egressv1.Proxy).Status
		return slices.DeleteFunc([]string{st.ProviderID, st.RetiringProviderID}, func(id string) bool { return id == "" })
	}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&egressv1.Proxy{}, builder.WithPredicates(specOrLifecycleChanged{}, r.Scope.predicate())).
		// A provider that turns Healthy releases its latched Proxies.
		Watches(&egressv1.ProviderHealth{}, handler.EnqueueRequestsFromMapFunc(r.proxiesOfProvider),
			builder.WithPredicates(becameHealthy{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrent}).
		Named("proxy")
	if changes.Providers != nil {
		b = b.WatchesRawSource(source.Channel(changes.Providers, handler.EnqueueRequestsFromMapFunc(r.proxiesOfProvider)))
	}
	if changes.Instances != nil {
		b = b.WatchesRawSource(source.Channel(changes.Instances, handler.EnqueueRequestsFromMapFunc(r.proxiesOfInstance)))
	}
	return b.Complete(telemetry.Reconciler(r.TracerProvider, "Proxy", r))
}

// proxiesOfProvider maps an object named after a provider entry (a
// ProviderHealth, a ChangedEvent of Changes.Providers) to that entry's Proxies.
func (r *ProxyReconciler) proxiesOfProvider(ctx context.Context, o client.Object) []reconcile.Request {
	return r.proxiesBy(ctx, providerIndex, o.GetName())
}

// proxiesOfInstance maps a ChangedEvent of Changes.Instances to the Proxy whose status
// records that instance (none for an instance no Proxy records any more).
func (r *ProxyReconciler) proxiesOfInstance(ctx context.Context, o client.Object) []reconcile.Request {
	return r.proxiesBy(ctx, instanceIndex, o.GetName())
}

// proxiesBy lists the Proxies whose index holds value, as requests.
func (r *ProxyReconciler) proxiesBy(ctx context.Context, index, value string) []reconcile.Request {
	list := &egressv1.ProxyList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index: value}); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "listing the Proxies to read again", "index", index, "value", value)
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

// becameHealthy passes a ProviderHealth whose Healthy condition is True
// now and was not before (or that is created Healthy).
type becameHealthy struct{ predicate.Funcs }

func (becameHealthy) Create(e event.CreateEvent) bool { return healthy(e.Object) }
func (becameHealthy) Update(e event.UpdateEvent) bool {
	return healthy(e.ObjectNew) && !healthy(e.ObjectOld)
}
func (becameHealthy) Delete(event.DeleteEvent) bool   { return false }
func (becameHealthy) Generic(event.GenericEvent) bool { return false }

func healthy(o client.Object) bool {
	ph, ok := o.(*egressv1.ProviderHealth)
	return ok && meta.IsStatusConditionTrue(ph.Status.Conditions, egressv1.ConditionHealthy)
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

// ChangedEvent is the event sent on a channel of Changes for name (a
// providers-config entry added, rebuilt or removed; an instance's ID): its
// Object's Name is name, which the channel's map function reads.
func ChangedEvent(name string) event.GenericEvent {
	return event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}
