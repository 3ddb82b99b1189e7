package controller

import (
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// Scope is the set of Proxies one installation serves, so that several
// installations share a cluster without touching each other's Proxies. A
// Proxy outside it does not exist for the reconciler: no write, no event,
// no finalizer added or removed, not even while it is being deleted.
type Scope struct {
	// Class is the spec.className served (--proxy-class); "" serves the
	// Proxies that name no class. spec.className is immutable, so a Proxy
	// never moves between installations.
	Class string
	// Namespaces served (--watch-namespaces); empty means all. The
	// manager's cache holds only these already: the check here keeps the
	// reconciler right whatever its client reads from.
	Namespaces []string
}

// Includes reports whether the installation of this scope serves px.
func (s Scope) Includes(px *egressv1.Proxy) bool {
	if px.Spec.ClassName != s.Class {
		return false
	}
	return len(s.Namespaces) == 0 || slices.Contains(s.Namespaces, px.Namespace)
}

// predicate drops the watch events of Proxies outside the scope, so they are
// never queued; Reconcile checks again for requests from other sources.
func (s Scope) predicate() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		px, ok := o.(*egressv1.Proxy)
		return ok && s.Includes(px)
	})
}
