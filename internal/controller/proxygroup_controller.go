package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// ProxyGroupReconciler keeps a ProxyGroup's member Proxies: as many as
// spec.members, made from the template and placed by spec.spread, rolled
// one at a time when the template changes, and the group's endpoint on a
// ready one. The members are ordinary Proxies: the Proxy reconciler makes
// and keeps their instances, the collector knows them, and deleting the
// group deletes them (their controller reference). What to do is decided
// in proxygroup_plan.go.
type ProxyGroupReconciler struct {
	Client client.Client
	// APIReader reads the group's address claim uncached, as the Proxy
	// reconciler reads its own (the IPAM kinds may not be served).
	APIReader client.Reader
	// Providers tells a group on an entry with an addressPool, which
	// holds an address of its own (proxygroup_address.go); nil: none does.
	Providers Providers
	Recorder  events.EventRecorder
	// Scope is the Proxy reconciler's: a group is served by the
	// installation that serves its members (the template's className).
	Scope Scope
	// InstanceChanged, when set, tells the Proxy reconciler that an
	// instance changed under its Proxy (the group's egress address moved
	// to or from it), so the member's status follows at once instead of
	// at its running resync.
	InstanceChanged func(id string)

	// lag keeps a pass off a cached copy its own last write replaced
	// (cachelag.go).
	lag cacheLag
}

// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxygroups,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxygroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxygroups/finalizers,verbs=update
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxies,verbs=create;delete

// SetupWithManager registers the reconciler: a group is read again when it
// changes and when one of its members does.
func (r *ProxyGroupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool {
		g, ok := o.(*egressv1.ProxyGroup)
		return ok && r.includes(g)
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&egressv1.ProxyGroup{}, builder.WithPredicates(inScope)).
		Owns(&egressv1.Proxy{}).
		Named("proxygroup").
		Complete(r)
}

// includes says the installation serves group g.
func (r *ProxyGroupReconciler) includes(g *egressv1.ProxyGroup) bool {
	return r.Scope.Includes(&egressv1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace},
		Spec:       egressv1.ProxySpec{ClassName: g.Spec.Template.Spec.ClassName},
	})
}

// Reconcile takes one step of the group's plan and writes its status.
func (r *ProxyGroupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g := &egressv1.ProxyGroup{}
	if err := r.Client.Get(ctx, req.NamespacedName, g); err != nil {
		if apierrors.IsNotFound(err) {
			r.lag.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return r.lag.pass(ctx, req.NamespacedName, g, func() (ctrl.Result, error) { return r.reconcileGroup(ctx, g) })
}

// reconcileGroup is one pass over g, read from the cache.
func (r *ProxyGroupReconciler) reconcileGroup(ctx context.Context, g *egressv1.ProxyGroup) (ctrl.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	if !r.includes(g) {
		return ctrl.Result{}, nil
	}
	if !g.DeletionTimestamp.IsZero() {
		// Its members go with it (their controller reference); its
		// front is removed here.
		return ctrl.Result{}, r.finalizeFront(ctx, g)
	}
	members, conflict, err := r.members(ctx, g)
	if err != nil {
		return ctrl.Result{}, err
	}
	addressing, err := r.addressing(ctx, g, members)
	if err != nil {
		return ctrl.Result{}, err
	}
	// A failure to keep the front for now is returned after the status.
	front, frontErr := r.frontGroup(ctx, g)
	addressing.front = front.endpoint
	plan := planGroup(g, members, g.Status.Holder, addressing, time.Now())
	if conflict != "" && plan.stalled == nil {
		plan.stalled = &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: egressv1.GroupReasonMemberConflict, Message: conflict}
	}
	if addressing.stalled != nil && plan.stalled == nil {
		plan.stalled = addressing.stalled
	}
	if front.stalled != nil && plan.stalled == nil {
		plan.stalled = front.stalled
	}
	for _, i := range plan.create {
		px := desiredMember(g, i, addressing)
		if err := r.Client.Create(ctx, px); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Not the group's (members() saw only its own): said in
				// Stalled by the next pass.
				continue
			}
			return ctrl.Result{}, fmt.Errorf("making member %s: %w", px.Name, err)
		}
		log.Info("member made", "member", px.Name, "zone", px.Spec.Placement.Zone)
		r.event(g, "MemberCreated", "made member %s%s", px.Name, inZone(px.Spec.Placement.Zone))
	}
	for _, px := range plan.remove {
		if err := r.Client.Delete(ctx, px, client.Preconditions{UID: &px.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("removing member %s: %w", px.Name, err)
		}
		r.event(g, "MemberRemoved", "removed member %s (spec.members is %d)", px.Name, g.Spec.Members)
	}
	if px := plan.roll; px != nil {
		want := desiredMember(g, plan.rollIndex, addressing)
		px.Spec = want.Spec
		if px.Annotations == nil {
			px.Annotations = map[string]string{}
		}
		for k, v := range want.Annotations {
			px.Annotations[k] = v
		}
		for k, v := range want.Labels {
			px.Labels[k] = v
		}
		if err := r.Client.Update(ctx, px); err != nil {
			if apierrors.IsInvalid(err) {
				// The template asks what a Proxy refuses (an immutable
				// field): only a person can fix it.
				plan.stalled = &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue,
					Reason: egressv1.GroupReasonMemberFailed, Message: fmt.Sprintf("member %s refuses the template: %v", px.Name, err)}
			} else {
				return ctrl.Result{}, fmt.Errorf("rolling member %s: %w", px.Name, err)
			}
		} else {
			log.Info("member rolled to the template", "member", px.Name)
			r.event(g, "MemberRolled", "gave member %s the current template (%d left)", px.Name, plan.stale-1)
		}
	}
	holder := ""
	// The holder's Event is recorded once the status that names the new
	// holder is written: a pass on a stale copy of the group (the cache
	// behind its own last write) sees the old holder, and its write
	// conflicts; had it recorded the Event first, one move would be told
	// twice.
	var holderMoved func()
	switch {
	case addressing.pooled:
		// The members hold the group's address among themselves (VRRP):
		// the holder is the one whose guest reports holding it.
		holder, addressing.claimants = addressHolder(members, int(g.Spec.Members))
		if holder != g.Status.Holder && holder != "" {
			// Between two holders VRRP may leave a moment with none
			// reported: each new holder is said.
			msg := fmt.Sprintf("the group's address %s is held by member %s (before: %s)", g.Status.Address, holder, orNone(g.Status.Holder))
			holderMoved = func() { r.event(g, "HolderMoved", "%s", msg) }
		}
	case addressing.front == "":
		// A front reaches every ready member: no holder then. Otherwise
		// the operator picks one.
		holder = pickHolder(members, int(g.Spec.Members), g.Status.Holder)
		if holder != g.Status.Holder && g.Status.Holder != "" {
			msg := fmt.Sprintf("the endpoint moved from member %s to %s", g.Status.Holder, orNone(holder))
			holderMoved = func() { r.event(g, "HolderMoved", "%s", msg) }
		}
	}
	kept, move, refused := r.dueGroupEgressMove(g, members, holder)
	if refused != nil && plan.stalled == nil {
		plan.stalled = refused
	}
	var res ctrl.Result
	if addressing.waiting != "" {
		// Claims are read uncached: no watch brings their binding.
		res.RequeueAfter = poolPendingPoll
	}
	if plan.recheck > 0 && (res.RequeueAfter == 0 || plan.recheck < res.RequeueAfter) {
		// A member's progress deadline passes with no change to watch.
		res.RequeueAfter = plan.recheck
	}
	if front.stalled != nil && (res.RequeueAfter == 0 || frontRefusedRecheck < res.RequeueAfter) {
		res.RequeueAfter = frontRefusedRecheck
	}
	writeStatus := func(force bool) error {
		st := groupStatus(g, members, plan, holder, g.Status.Conditions, addressing)
		st.EgressAddress = kept.statusOf()
		st.FrontProvider = front.provider
		if !force && equalGroupStatus(g.Status, st) {
			return nil
		}
		g.Status = st
		return r.Client.Status().Update(ctx, g)
	}
	// Before a move the status is written even when nothing in it
	// changed: the write carries the resourceVersion read, so a pass on a
	// stale copy of the group that r.lag let through (the version between
	// a pass's two writes) conflicts here and moves nothing. Where the
	// address is lives only in the status: a stale pass that moved it,
	// and whose write then failed, would leave the status naming an
	// instance that no longer holds it, and nothing would move it back.
	if err := writeStatus(move != nil); err != nil {
		return ctrl.Result{}, err
	}
	if holderMoved != nil {
		holderMoved()
	}
	if move == nil {
		if frontErr != nil {
			return ctrl.Result{}, frontErr
		}
		return res, nil
	}
	// A move that failed for now is tried again with backoff, after the
	// status (where the address is now) is written.
	moved, refused, moveErr := r.moveGroupEgressAddress(ctx, move)
	if moved != nil {
		kept = moved
	}
	if refused != nil && plan.stalled == nil {
		plan.stalled = refused
	}
	if err := writeStatus(false); err != nil {
		return ctrl.Result{}, err
	}
	if moved != nil && moved.note != "" {
		r.event(g, ReasonEgressAddressMoved, "%s", moved.note)
	}
	if moveErr != nil {
		return ctrl.Result{}, moveErr
	}
	if frontErr != nil {
		return ctrl.Result{}, frontErr
	}
	return res, nil
}

// members reads the group's members by index: the Proxies it controls.
// A Proxy under a member's name that the group does not control is left
// alone and named in the returned conflict.
func (r *ProxyGroupReconciler) members(ctx context.Context, g *egressv1.ProxyGroup) (map[int]*egressv1.Proxy, string, error) {
	list := &egressv1.ProxyList{}
	if err := r.Client.List(ctx, list, client.InNamespace(g.Namespace), client.MatchingLabels{egressv1.LabelGroup: g.Name}); err != nil {
		return nil, "", err
	}
	members := map[int]*egressv1.Proxy{}
	for i := range list.Items {
		px := &list.Items[i]
		if i, ok := memberIndex(px); ok && ownedBy(px, g) {
			members[i] = px
		}
	}
	for i := range int(g.Spec.Members) {
		if members[i] != nil {
			continue
		}
		other := &egressv1.Proxy{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: memberName(g.Name, i)}, other)
		if err == nil {
			return members, fmt.Sprintf("Proxy %s, member %d's name, is not this group's: rename or delete it", other.Name, i), nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, "", err
		}
	}
	return members, "", nil
}

func (r *ProxyGroupReconciler) event(g *egressv1.ProxyGroup, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(g, nil, "Normal", reason, reason, format, args...)
	}
}

// equalGroupStatus says a write would change nothing (SetStatusCondition
// keeps a condition's transition time while its status stays).
func equalGroupStatus(a, b egressv1.ProxyGroupStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}

func inZone(z string) string {
	if z == "" {
		return ""
	}
	return " in zone " + z
}

func orNone(s string) string {
	if s == "" {
		return "none (no member is ready)"
	}
	return s
}
