package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// A group on a provider that keeps a front of its own (a GroupFronter:
// kubernetes, a Service over the member Pods with a PodDisruptionBudget)
// has the front's endpoint as its own: clients reach every ready member
// through it, and no member holds the endpoint. The group records the
// entry that keeps the front (status.frontProvider) and carries
// GroupFrontFinalizer, so that the front goes with the group, or with the
// entry when the template moves to another; the collector removes a front
// whose group is gone anyway (its UID mark is the group's).

// GroupFrontFinalizer is on a ProxyGroup whose provider keeps a front for
// it, until the front is removed.
const GroupFrontFinalizer = "egress.proxy-operator.dev/group-front"

// frontTimeout bounds one front call, as moveTimeout bounds a move.
const frontTimeout = 30 * time.Second

// frontRefusedRecheck is how soon a group whose front was refused for good
// asks again: what a person does to end the refusal (renaming the object
// in the way) is on the backend, which the group does not watch. A var
// for the tests.
var frontRefusedRecheck = time.Minute

// groupFrontState is the outcome of frontGroup: the entry that keeps the
// front and its endpoint, and, for a refusal only a person can end, the
// Stalled condition.
type groupFrontState struct {
	provider, endpoint string
	stalled            *metav1.Condition
}

// frontGroup makes or keeps the group's front on the template's entry, and
// removes one an earlier entry keeps. A transient failure is returned
// with what is known (the endpoint the status had), so the status is
// written first and the pass tried again with backoff.
func (r *ProxyGroupReconciler) frontGroup(ctx context.Context, g *egressv1.ProxyGroup) (groupFrontState, error) {
	if r.Providers == nil {
		return groupFrontState{}, nil
	}
	name := g.Spec.Template.Spec.Provider
	if prev := g.Status.FrontProvider; prev != "" && prev != name {
		// The template moved to another entry: its front goes first.
		if err := r.removeFront(ctx, g, prev); err != nil {
			return groupFrontState{provider: prev}, err
		}
	}
	entry, err := r.Providers.Get(name)
	if err != nil || entry.Fronter == nil {
		// No front (the members say what is wrong with an entry).
		return groupFrontState{}, nil
	}
	st := groupFrontState{provider: entry.Name}
	if g.Status.FrontProvider == entry.Name {
		st.endpoint = g.Status.Endpoint
	}
	if controllerutil.AddFinalizer(g, GroupFrontFinalizer) {
		// Before the front exists, so that it never outlives the group.
		if err := r.Client.Update(ctx, g); err != nil {
			return groupFrontState{provider: g.Status.FrontProvider, endpoint: st.endpoint}, err
		}
	}
	fctx, cancel := context.WithTimeout(ctx, frontTimeout)
	endpoint, err := entry.Fronter.FrontGroup(fctx, provider.GroupFront{Group: groupRef(g),
		Port: specPort(g.Spec.Template.Spec), Members: g.Spec.Members})
	cancel()
	switch {
	case provider.ClassOf(err) == provider.ErrPermanent:
		st.stalled = &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: egressv1.GroupReasonFrontFailed, Message: fmt.Sprintf("the group's front on provider entry %q: %v", entry.Name, err)}
		st.endpoint = ""
		return st, nil
	case err != nil:
		return st, fmt.Errorf("keeping the group's front on provider entry %q: %w", entry.Name, err)
	}
	st.endpoint = endpoint
	return st, nil
}

// finalizeFront removes the group's front once the group is deleted, then
// lets the group go. An entry that is gone, or keeps no front any more,
// leaves what there is to the collector.
func (r *ProxyGroupReconciler) finalizeFront(ctx context.Context, g *egressv1.ProxyGroup) error {
	if !controllerutil.ContainsFinalizer(g, GroupFrontFinalizer) {
		return nil
	}
	name := g.Status.FrontProvider
	if name == "" {
		name = g.Spec.Template.Spec.Provider
	}
	if err := r.removeFront(ctx, g, name); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(g, GroupFrontFinalizer)
	return r.Client.Update(ctx, g)
}

// removeFront removes the group's front from entry name. Only a transient
// failure is returned: one only a person could end is logged and left to
// the collector, which removes a front whose group is gone.
func (r *ProxyGroupReconciler) removeFront(ctx context.Context, g *egressv1.ProxyGroup, name string) error {
	log := logr.FromContextOrDiscard(ctx)
	if r.Providers == nil {
		return nil
	}
	entry, err := r.Providers.Get(name)
	if err != nil || entry.Fronter == nil {
		log.Info("the group's front is left to the garbage collector: its provider entry is gone or keeps no front", "provider", name)
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, frontTimeout)
	err = entry.Fronter.RemoveGroupFront(fctx, groupRef(g))
	cancel()
	switch {
	case provider.ClassOf(err) == provider.ErrPermanent:
		log.Error(err, "the group's front could not be removed; the garbage collector removes it once the group is gone", "provider", name)
	case err != nil:
		return fmt.Errorf("removing the group's front on provider entry %q: %w", name, err)
	default:
		r.event(g, "FrontRemoved", "removed the group's front on provider entry %s", name)
	}
	return nil
}

// groupRef names g to providers.
func groupRef(g *egressv1.ProxyGroup) provider.GroupRef {
	return provider.GroupRef{Namespace: g.Namespace, Name: g.Name, UID: string(g.UID)}
}
