package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// What a group is made of and what its next step is, decided here from the
// group and its members as read, without I/O (tables in
// proxygroup_plan_test.go); proxygroup_controller.go only carries it out.

// memberName is the name of member i of group g.
func memberName(g string, i int) string { return g + "-" + strconv.Itoa(i) }

// memberZone is where member i goes: spread.zones[i mod len], or "" when
// the group is not spread.
func memberZone(g *egressv1.ProxyGroup, i int) string {
	if g.Spec.Spread == nil || len(g.Spec.Spread.Zones) == 0 {
		return ""
	}
	return g.Spec.Spread.Zones[i%len(g.Spec.Spread.Zones)]
}

// memberSpec is member i's spec: the template's, placed in its zone, with
// its part in the group's address when the group holds one.
func memberSpec(g *egressv1.ProxyGroup, i int, a groupAddressing) egressv1.ProxySpec {
	spec := *g.Spec.Template.Spec.DeepCopy()
	if z := memberZone(g, i); z != "" {
		spec.Placement.Zone = z
	}
	spec.GroupAddress = desiredGroupAddress(a, int(g.Spec.Members), i)
	return spec
}

// specHash names a member spec: equal specs, equal hashes.
func specHash(spec egressv1.ProxySpec) string {
	b, _ := json.Marshal(spec) // a ProxySpec always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// desiredMember is member i as the group wants it: the template's labels
// and annotations under the group's own, a controller reference to the
// group (deleting the group deletes it), and the spec with its hash.
func desiredMember(g *egressv1.ProxyGroup, i int, a groupAddressing) *egressv1.Proxy {
	spec := memberSpec(g, i, a)
	labels := maps.Clone(g.Spec.Template.Metadata.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[egressv1.LabelGroup] = g.Name
	labels[egressv1.LabelGroupMember] = strconv.Itoa(i)
	annotations := maps.Clone(g.Spec.Template.Metadata.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[egressv1.AnnotationTemplateHash] = specHash(spec)
	return &egressv1.Proxy{
		ObjectMeta: metav1.ObjectMeta{
			Name: memberName(g.Name, i), Namespace: g.Namespace,
			Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: egressv1.GroupVersion.String(), Kind: "ProxyGroup",
				Name: g.Name, UID: g.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: spec,
	}
}

// memberIndex is a member's index from its label; false when it has none.
func memberIndex(px *egressv1.Proxy) (int, bool) {
	i, err := strconv.Atoi(px.Labels[egressv1.LabelGroupMember])
	return i, err == nil && i >= 0 && px.Name == memberName(px.Labels[egressv1.LabelGroup], i)
}

// ownedBy says px's controller is the group.
func ownedBy(px *egressv1.Proxy, g *egressv1.ProxyGroup) bool {
	ref := metav1.GetControllerOf(px)
	return ref != nil && ref.UID == g.UID
}

// memberReady says the member's Ready is True for its current spec.
func memberReady(px *egressv1.Proxy) bool {
	c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == px.Generation
}

// memberSettled says the member is ready and has nothing under way (its
// own make-before-break replacement keeps it ready while a new instance
// boots: Reconciling says so). A roll moves on only past settled members.
func memberSettled(px *egressv1.Proxy) bool {
	return memberReady(px) && !meta.IsStatusConditionTrue(px.Status.Conditions, egressv1.ConditionReconciling)
}

// awaitingPeers says the member has no instance and waits for the group
// to give it its part in the group's address, which the group does once
// the other members list it among their peers (desiredGroupAddress): a
// roll of the others is what it waits for, so it must not hold the roll
// up.
func awaitingPeers(px *egressv1.Proxy) bool {
	ga := px.Spec.GroupAddress
	return ga != nil && ga.Address == "" && px.Status.ProviderID == ""
}

// memberStalled is the member's Stalled condition when True: a failure
// only a person can end.
func memberStalled(px *egressv1.Proxy) *metav1.Condition {
	c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionStalled)
	if c != nil && c.Status == metav1.ConditionTrue {
		return c
	}
	return nil
}

// memberUnsettledSince is when the member last stopped being ready and
// settled: its Reconciling condition's transition while True (a boot or a
// replacement under way), else its Ready's while not True; zero when
// neither says (a spec its reconciler has not read yet).
func memberUnsettledSince(px *egressv1.Proxy) time.Time {
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReconciling); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// defaultProgressDeadline is spec.progressDeadlineSeconds' default (a
// Deployment's).
const defaultProgressDeadline = 600 * time.Second

// progressDeadline is how long a member may stay unsettled.
func progressDeadline(g *egressv1.ProxyGroup) time.Duration {
	if s := g.Spec.ProgressDeadlineSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second
	}
	return defaultProgressDeadline
}

// overdue says why member px, unsettled past the group's progress
// deadline at now, holds the group up; nil when it is settled or within
// the deadline, and then left is the time until it would be overdue (0:
// nothing to wait for).
func overdue(g *egressv1.ProxyGroup, px *egressv1.Proxy, now time.Time) (stalled *metav1.Condition, left time.Duration) {
	since := memberUnsettledSince(px)
	if memberSettled(px) || since.IsZero() {
		return nil, 0
	}
	deadline := progressDeadline(g)
	if left := deadline - now.Sub(since); left > 0 {
		return nil, left
	}
	why := "its Ready is not True"
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c != nil {
		why = fmt.Sprintf("Ready %s (%s): %s", c.Status, c.Reason, c.Message)
	}
	return &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: egressv1.GroupReasonProgressDeadlineExceeded,
		Message: fmt.Sprintf("member %s has not been ready and settled for %s (spec.progressDeadlineSeconds %d): %s; the roll waits for it",
			px.Name, now.Sub(since).Round(time.Second), int(deadline/time.Second), why)}, 0
}

// groupPlan is the group's next step: members to make, to remove, at most
// one to roll, and why it waits when it does.
type groupPlan struct {
	create []int
	remove []*egressv1.Proxy
	// roll is the member to give its new spec now, or nil.
	roll *egressv1.Proxy
	// rollIndex is roll's index.
	rollIndex int
	// stale counts members on an older spec (roll among them).
	stale int
	// stalled, when set, says why the group cannot go on by itself.
	stalled *metav1.Condition
	// recheck is when the first unsettled member's progress deadline
	// passes; 0: none to wait for.
	recheck time.Duration
}

// planGroup decides the next step from the group's members (those it
// controls, by index) and the holder it had. A template change reaches
// one member at a time: first a member that is not ready anyway, then,
// only while every member is settled, the lowest-indexed one that does not
// hold the endpoint, the holder last; so never fewer than members-1 are
// ready because of the roll. A member failed for good stops the roll, and
// one unsettled past the progress deadline at now is named in Stalled.
func planGroup(g *egressv1.ProxyGroup, members map[int]*egressv1.Proxy, holder string, a groupAddressing, now time.Time) groupPlan {
	var plan groupPlan
	n := int(g.Spec.Members)
	for i := range n {
		if members[i] == nil {
			plan.create = append(plan.create, i)
		}
	}
	for _, i := range slices.Backward(slices.Sorted(maps.Keys(members))) {
		if i >= n {
			plan.remove = append(plan.remove, members[i])
		}
	}
	allSettled := len(plan.create) == 0
	var staleNotReady, staleReady []int
	var late *metav1.Condition
	for i := range n {
		px := members[i]
		if px == nil {
			continue
		}
		if c := memberStalled(px); c != nil && plan.stalled == nil {
			plan.stalled = &metav1.Condition{Type: egressv1.ConditionStalled, Status: metav1.ConditionTrue,
				Reason:  egressv1.GroupReasonMemberFailed,
				Message: fmt.Sprintf("member %s cannot go on: %s (%s); the roll waits for a change of the template or of the member's cause", px.Name, c.Message, c.Reason)}
		}
		// A newcomer waiting to be listed waits for the others' roll.
		if !awaitingPeers(px) {
			switch c, left := overdue(g, px, now); {
			case c != nil && late == nil:
				late = c
			case left > 0 && (plan.recheck == 0 || left < plan.recheck):
				plan.recheck = left
			}
			allSettled = allSettled && memberSettled(px)
		}
		ready := memberReady(px)
		if px.Annotations[egressv1.AnnotationTemplateHash] == specHash(memberSpec(g, i, a)) {
			continue
		}
		plan.stale++
		if ready {
			staleReady = append(staleReady, i)
		} else {
			staleNotReady = append(staleNotReady, i)
		}
	}
	if plan.stalled == nil {
		plan.stalled = late // a failure for good says more
	}
	pick := -1
	switch {
	case len(staleNotReady) > 0:
		pick = staleNotReady[0] // not serving anyway: nothing is lost
	case len(staleReady) > 0 && allSettled && plan.stalled == nil:
		pick = staleReady[0]
		for _, i := range staleReady {
			if members[i].Name != holder {
				pick = i
				break
			}
		}
	}
	if pick >= 0 {
		plan.roll, plan.rollIndex = members[pick], pick
	}
	return plan
}

// addressHolder is, on a pool, the ready member whose serving instance
// reports holding the group's address, and every ready member that does:
// more than one is two guests holding the address at once (a VRRP split),
// and then no member is named.
func addressHolder(members map[int]*egressv1.Proxy, n int) (string, []string) {
	var claim []string
	for i := range n {
		if px := members[i]; px != nil && memberReady(px) && px.Status.HoldsGroupAddress != nil && *px.Status.HoldsGroupAddress {
			claim = append(claim, px.Name)
		}
	}
	if len(claim) != 1 {
		return "", claim
	}
	return claim[0], claim
}

// pickHolder keeps the holder while it is a ready member, else takes the
// lowest-indexed ready member; "" when none is ready.
func pickHolder(members map[int]*egressv1.Proxy, n int, prev string) string {
	for i := range n {
		if px := members[i]; px != nil && px.Name == prev && memberReady(px) {
			return prev
		}
	}
	for i := range n {
		if px := members[i]; px != nil && memberReady(px) {
			return px.Name
		}
	}
	return ""
}

// groupStatus is the status the group shows for its members and plan,
// with the holder already picked. Its conditions: Available (a ready
// member holds the endpoint), Degraded (fewer ready than asked), and
// kstatus's Reconciling (members being made, removed or rolled) and
// Stalled (the plan's).
func groupStatus(g *egressv1.ProxyGroup, members map[int]*egressv1.Proxy, plan groupPlan, holder string, prev []metav1.Condition, a groupAddressing) egressv1.ProxyGroupStatus {
	n := int(g.Spec.Members)
	st := egressv1.ProxyGroupStatus{ObservedGeneration: g.Generation, Holder: holder, Conditions: slices.Clone(prev)}
	// egress are the ready members' observed egress addresses, behind a
	// front: the group's is the one they agree on.
	egress := map[string]bool{}
	for i := range n {
		px := members[i]
		if px == nil {
			continue
		}
		ready := metav1.ConditionFalse
		if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c != nil {
			ready = c.Status
		}
		if memberReady(px) {
			st.ReadyMembers++
		}
		st.Members = append(st.Members, egressv1.GroupMemberStatus{
			Name: px.Name, Zone: memberZone(g, i), Ready: ready, Endpoint: px.Status.Endpoint,
			Current: px.Annotations[egressv1.AnnotationTemplateHash] == specHash(memberSpec(g, i, a)),
		})
		if addr, ok := a.members[i]; ok {
			st.Members[len(st.Members)-1].Address = addr.String()
		}
		switch {
		case a.pooled:
			if a.virtual.IsValid() && memberReady(px) && px.Status.EgressIP == a.virtual.Addr().String() {
				st.EgressIP = px.Status.EgressIP // what the holder's echo saw
			}
		case a.front != "":
			if memberReady(px) && px.Status.EgressIP != "" {
				egress[px.Status.EgressIP] = true
			}
		case px.Name == holder:
			st.Endpoint, st.EgressIP = px.Status.Endpoint, px.Status.EgressIP
		}
	}
	if a.pooled && a.virtual.IsValid() {
		st.Address = a.virtual.Addr().String()
		st.Endpoint = net.JoinHostPort(st.Address, strconv.Itoa(int(specPort(g.Spec.Template.Spec))))
	}
	if a.front != "" {
		st.Endpoint = a.front
		if len(egress) == 1 {
			for ip := range egress {
				st.EgressIP = ip
			}
		}
	}
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: g.Generation})
	}
	switch {
	case a.pooled && !a.virtual.IsValid():
		set(egressv1.ConditionAvailable, metav1.ConditionFalse, egressv1.GroupReasonAddressPending, a.waiting)
	case a.pooled && st.ReadyMembers > 0 && len(a.claimants) > 1:
		set(egressv1.ConditionAvailable, metav1.ConditionTrue, egressv1.GroupReasonAddressHeld,
			fmt.Sprintf("the group's address %s is reported held by members %s at once (VRRP: each elected itself; the members' adverts may not reach each other)",
				st.Address, strings.Join(a.claimants, " and ")))
	case a.pooled && st.ReadyMembers > 0 && holder != "":
		set(egressv1.ConditionAvailable, metav1.ConditionTrue, egressv1.GroupReasonAddressHeld,
			fmt.Sprintf("the group's address %s is held by member %s, one of its %d ready members (VRRP)", st.Address, holder, st.ReadyMembers))
	case a.pooled && st.ReadyMembers > 0:
		set(egressv1.ConditionAvailable, metav1.ConditionTrue, egressv1.GroupReasonAddressHeld,
			fmt.Sprintf("the group's address %s is held by one of its %d ready members (VRRP)", st.Address, st.ReadyMembers))
	case a.pooled:
		set(egressv1.ConditionAvailable, metav1.ConditionFalse, egressv1.GroupReasonNoReadyMember,
			fmt.Sprintf("none of the %d members is ready to hold the group's address %s", n, st.Address))
	case a.front != "" && st.ReadyMembers > 0:
		set(egressv1.ConditionAvailable, metav1.ConditionTrue, egressv1.GroupReasonFrontServing,
			fmt.Sprintf("the group's front %s reaches its %d ready members", st.Endpoint, st.ReadyMembers))
	case holder != "":
		set(egressv1.ConditionAvailable, metav1.ConditionTrue, egressv1.GroupReasonHolderReady,
			fmt.Sprintf("member %s is ready and holds the endpoint %s", holder, st.Endpoint))
	default:
		set(egressv1.ConditionAvailable, metav1.ConditionFalse, egressv1.GroupReasonNoReadyMember,
			fmt.Sprintf("none of the %d members is ready", n))
	}
	if int(st.ReadyMembers) < n {
		set(egressv1.ConditionDegraded, metav1.ConditionTrue, egressv1.GroupReasonMembersNotReady,
			fmt.Sprintf("%d of %d members ready", st.ReadyMembers, n))
	} else {
		set(egressv1.ConditionDegraded, metav1.ConditionFalse, egressv1.GroupReasonMembersReady,
			fmt.Sprintf("all %d members ready", n))
	}
	switch {
	case len(plan.create) > 0 || len(plan.remove) > 0:
		set(egressv1.ConditionReconciling, metav1.ConditionTrue, egressv1.GroupReasonScaling,
			fmt.Sprintf("%d members to make, %d to remove", len(plan.create), len(plan.remove)))
	case plan.stale > 0:
		set(egressv1.ConditionReconciling, metav1.ConditionTrue, egressv1.GroupReasonRolling,
			fmt.Sprintf("%d of %d members on an older template, rolled one at a time", plan.stale, n))
	case int(st.ReadyMembers) < n:
		set(egressv1.ConditionReconciling, metav1.ConditionTrue, egressv1.GroupReasonMembersNotReady,
			fmt.Sprintf("%d of %d members ready", st.ReadyMembers, n))
	default:
		meta.RemoveStatusCondition(&st.Conditions, egressv1.ConditionReconciling)
	}
	if plan.stalled != nil {
		c := *plan.stalled
		c.ObservedGeneration = g.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, egressv1.ConditionStalled)
	}
	return st
}
