package controller

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

func planGroupOf(members int32, zones ...string) *egressv1.ProxyGroup {
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", UID: "uid-g", Generation: 3},
		Spec: egressv1.ProxyGroupSpec{Members: members, Template: egressv1.ProxyTemplate{
			Spec: egressv1.ProxySpec{Provider: "pool", Port: 3128}}},
	}
	if len(zones) > 0 {
		g.Spec.Spread = &egressv1.GroupSpread{Zones: zones, AllowSharing: true}
	}
	return g
}

// memberState is a member as a table row gives it.
type memberState struct {
	stale, ready, reconciling, stalled bool
	// awaitingPeers: a pooled group's newcomer, no instance, waiting for
	// the others to list it (spec.groupAddress empty).
	awaitingPeers bool
	// unsettledFor: how long ago it stopped being settled (its
	// Reconciling, or its Ready when not ready, turned so then).
	unsettledFor time.Duration
}

func membersOf(g *egressv1.ProxyGroup, states map[int]memberState) map[int]*egressv1.Proxy {
	out := map[int]*egressv1.Proxy{}
	for i, s := range states {
		px := desiredMember(g, i, groupAddressing{})
		px.Generation = 5
		if s.stale {
			px.Annotations[egressv1.AnnotationTemplateHash] = "older"
		}
		cond := func(t string, on bool, reason string) {
			st := metav1.ConditionFalse
			if on {
				st = metav1.ConditionTrue
			}
			meta.SetStatusCondition(&px.Status.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, ObservedGeneration: 5})
		}
		cond(egressv1.ConditionReady, s.ready, "R")
		if s.reconciling {
			cond(egressv1.ConditionReconciling, true, "Replacing")
		}
		if s.stalled {
			cond(egressv1.ConditionStalled, true, "PermanentFailure")
		}
		if s.unsettledFor > 0 {
			for j := range px.Status.Conditions {
				if c := &px.Status.Conditions[j]; c.Status == metav1.ConditionTrue && c.Type == egressv1.ConditionReconciling ||
					c.Status == metav1.ConditionFalse && c.Type == egressv1.ConditionReady {
					c.LastTransitionTime = metav1.NewTime(time.Now().Add(-s.unsettledFor))
				}
			}
		}
		px.Status.Endpoint = "10.0.0." + strconv.Itoa(i) + ":3128"
		if s.awaitingPeers {
			px.Spec.GroupAddress = &egressv1.MemberGroupAddress{}
			px.Status.Endpoint = ""
		} else {
			px.Status.ProviderID = "fake://" + px.Name
		}
		out[i] = px
	}
	return out
}

// TestPlanGroup: what a group does next, one step at a time.
func TestPlanGroup(t *testing.T) {
	ready, stale := memberState{ready: true}, memberState{stale: true, ready: true}
	for _, tc := range []struct {
		name    string
		members int32
		states  map[int]memberState
		holder  string
		create  []int
		remove  []string
		roll    string // "" none
		stalled bool
		// late: the member named in Stalled (ProgressDeadlineExceeded).
		late string
		// recheck: a deadline passes within a minute (plan.recheck).
		recheck bool
	}{
		{name: "a new group makes every member", members: 3, states: nil, create: []int{0, 1, 2}},
		{name: "a missing member is made again", members: 2, states: map[int]memberState{1: ready}, create: []int{0}},
		{name: "scaled down: the highest go first", members: 1, states: map[int]memberState{0: ready, 1: ready, 2: ready},
			remove: []string{"g-2", "g-1"}},
		{name: "all current: nothing to do", members: 2, states: map[int]memberState{0: ready, 1: ready}, holder: "g-0"},
		{name: "a roll starts with a member that does not hold the endpoint", members: 2,
			states: map[int]memberState{0: stale, 1: stale}, holder: "g-0", roll: "g-1"},
		{name: "the holder goes last", members: 3,
			states: map[int]memberState{0: ready, 1: stale, 2: ready}, holder: "g-1", roll: "g-1"},
		{name: "a stale member that is not ready goes first: nothing is lost", members: 3,
			states: map[int]memberState{0: stale, 1: stale, 2: {stale: true}}, holder: "g-0", roll: "g-2"},
		{name: "the roll waits while a member is not ready", members: 3,
			states: map[int]memberState{0: stale, 1: {}, 2: stale}, holder: "g-0"},
		{name: "the roll waits while a member replaces its instance", members: 2,
			states: map[int]memberState{0: stale, 1: {ready: true, reconciling: true}}, holder: "g-0"},
		{name: "the roll waits while a member is missing", members: 2,
			states: map[int]memberState{0: stale}, holder: "g-0", create: []int{1}},
		{name: "a member failed for good stops the roll", members: 3,
			states: map[int]memberState{0: stale, 1: {stalled: true, ready: true}, 2: stale}, holder: "g-0", stalled: true},
		{name: "a member replacing its instance within the progress deadline: the roll waits", members: 3,
			states: map[int]memberState{0: stale, 1: {ready: true, reconciling: true, unsettledFor: 9 * time.Minute}, 2: stale}, holder: "g-0", recheck: true},
		{name: "past the progress deadline: Stalled names the member", members: 3,
			states: map[int]memberState{0: stale, 1: {ready: true, reconciling: true, unsettledFor: 11 * time.Minute}, 2: stale}, holder: "g-0",
			stalled: true, late: "g-1"},
		{name: "a rolled member that never becomes ready: Stalled names it", members: 2,
			states: map[int]memberState{0: stale, 1: {unsettledFor: 11 * time.Minute}}, holder: "g-0", stalled: true, late: "g-1"},
		{name: "a stale member past the deadline is still rolled: nothing is lost", members: 2,
			states: map[int]memberState{0: ready, 1: {stale: true, unsettledFor: 11 * time.Minute}}, holder: "g-0", roll: "g-1", stalled: true, late: "g-1"},
		{name: "grown on a pool: a newcomer waiting to be listed does not hold up the others' roll to list it", members: 3,
			states: map[int]memberState{0: stale, 1: stale, 2: {awaitingPeers: true}}, holder: "g-0", roll: "g-1"},
		{name: "grown on a pool: a newcomer waiting past the progress deadline is no reason to stop", members: 3,
			states: map[int]memberState{0: ready, 1: stale, 2: {awaitingPeers: true, unsettledFor: 11 * time.Minute}}, holder: "g-0", roll: "g-1"},
		{name: "a failure for good is named before a late member", members: 3,
			states: map[int]memberState{0: {unsettledFor: 11 * time.Minute}, 1: {stalled: true, ready: true}, 2: ready}, holder: "g-2", stalled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := planGroupOf(tc.members)
			plan := planGroup(g, membersOf(g, tc.states), tc.holder, groupAddressing{}, time.Now())
			if !slices.Equal(plan.create, tc.create) {
				t.Errorf("create %v, want %v", plan.create, tc.create)
			}
			var removed []string
			for _, px := range plan.remove {
				removed = append(removed, px.Name)
			}
			if !slices.Equal(removed, tc.remove) {
				t.Errorf("remove %v, want %v", removed, tc.remove)
			}
			rolled := ""
			if plan.roll != nil {
				rolled = plan.roll.Name
				if plan.roll.Name != memberName("g", plan.rollIndex) {
					t.Errorf("roll %s with index %d", plan.roll.Name, plan.rollIndex)
				}
			}
			if rolled != tc.roll {
				t.Errorf("roll %q, want %q", rolled, tc.roll)
			}
			if (plan.stalled != nil) != tc.stalled {
				t.Errorf("stalled %+v, want %v", plan.stalled, tc.stalled)
			}
			if tc.late != "" {
				if plan.stalled == nil || plan.stalled.Reason != egressv1.GroupReasonProgressDeadlineExceeded ||
					!strings.HasPrefix(plan.stalled.Message, "member "+tc.late+" has not been ready and settled for 11m0s (spec.progressDeadlineSeconds 600)") {
					t.Errorf("stalled %+v, want %s named past the deadline", plan.stalled, tc.late)
				}
			} else if plan.stalled != nil && plan.stalled.Reason == egressv1.GroupReasonProgressDeadlineExceeded {
				t.Errorf("stalled %+v: no member is past the deadline", plan.stalled)
			}
			if soon := plan.recheck > 0 && plan.recheck <= time.Minute; soon != tc.recheck {
				t.Errorf("recheck in %s, want one within a minute: %v", plan.recheck, tc.recheck)
			}
		})
	}
}

// TestPickHolder: the holder stays while it is ready, else the
// lowest-indexed ready member takes the endpoint.
func TestPickHolder(t *testing.T) {
	g := planGroupOf(3)
	for _, tc := range []struct {
		name   string
		states map[int]memberState
		prev   string
		want   string
	}{
		{"the first ready member", map[int]memberState{0: {}, 1: {ready: true}, 2: {ready: true}}, "", "g-1"},
		{"the holder stays while ready", map[int]memberState{0: {ready: true}, 1: {ready: true}, 2: {ready: true}}, "g-2", "g-2"},
		{"a holder that is not ready loses it", map[int]memberState{0: {ready: true}, 1: {ready: true}, 2: {}}, "g-2", "g-0"},
		{"a removed holder loses it", map[int]memberState{0: {ready: true}}, "g-5", "g-0"},
		{"none ready: none", map[int]memberState{0: {}, 1: {}}, "g-0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pickHolder(membersOf(g, tc.states), 3, tc.prev); got != tc.want {
				t.Errorf("holder %q, want %q", got, tc.want)
			}
		})
	}
}

// TestGroupStatus: members, the holder's endpoint, and the conditions.
func TestGroupStatus(t *testing.T) {
	g := planGroupOf(2, "a", "b")
	cond := func(st egressv1.ProxyGroupStatus, typ string) string {
		c := meta.FindStatusCondition(st.Conditions, typ)
		if c == nil {
			return "-"
		}
		return string(c.Status) + "/" + c.Reason
	}
	members := membersOf(g, map[int]memberState{0: {ready: true}, 1: {ready: true}})
	st := groupStatus(g, members, planGroup(g, members, "g-1", groupAddressing{}, time.Now()), "g-1", nil, groupAddressing{})
	if st.ReadyMembers != 2 || st.Holder != "g-1" || st.Endpoint != "10.0.0.1:3128" || st.ObservedGeneration != 3 ||
		len(st.Members) != 2 || st.Members[0].Zone != "a" || st.Members[1].Zone != "b" || !st.Members[0].Current {
		t.Errorf("status %+v", st)
	}
	if got := []string{cond(st, egressv1.ConditionAvailable), cond(st, egressv1.ConditionDegraded), cond(st, egressv1.ConditionReconciling), cond(st, egressv1.ConditionStalled)}; !slices.Equal(got, []string{
		"True/HolderReady", "False/MembersReady", "-", "-"}) {
		t.Errorf("all ready: conditions %v", got)
	}

	members = membersOf(g, map[int]memberState{0: {}, 1: {stale: true, stalled: true}})
	st = groupStatus(g, members, planGroup(g, members, "", groupAddressing{}, time.Now()), "", st.Conditions, groupAddressing{})
	if got := []string{cond(st, egressv1.ConditionAvailable), cond(st, egressv1.ConditionDegraded), cond(st, egressv1.ConditionReconciling), cond(st, egressv1.ConditionStalled)}; !slices.Equal(got, []string{
		"False/NoReadyMember", "True/MembersNotReady", "True/Rolling", "True/MemberFailed"}) {
		t.Errorf("none ready, one failed: conditions %v", got)
	}
	if st.Endpoint != "" || st.Members[1].Current {
		t.Errorf("no holder: endpoint %q; stale member current %v", st.Endpoint, st.Members[1].Current)
	}
}

// TestDesiredMember: a member is the template placed in its zone, with the
// group's labels and controller reference, and its spec's hash; a zone
// changes the hash (a spread change rolls too).
func TestDesiredMember(t *testing.T) {
	g := planGroupOf(3, "a", "b")
	g.Spec.Template.Metadata.Labels = map[string]string{"team": "x", egressv1.LabelGroup: "spoofed"}
	px := desiredMember(g, 2, groupAddressing{})
	if px.Name != "g-2" || px.Spec.Placement.Zone != "a" || px.Labels["team"] != "x" || px.Labels[egressv1.LabelGroup] != "g" ||
		px.Labels[egressv1.LabelGroupMember] != "2" || !ownedBy(px, g) {
		t.Errorf("member %+v", px.ObjectMeta)
	}
	if i, ok := memberIndex(px); !ok || i != 2 {
		t.Errorf("memberIndex = %d, %v", i, ok)
	}
	if desiredMember(g, 0, groupAddressing{}).Annotations[egressv1.AnnotationTemplateHash] == desiredMember(g, 1, groupAddressing{}).Annotations[egressv1.AnnotationTemplateHash] {
		t.Error("members in different zones have one hash")
	}
	if desiredMember(g, 0, groupAddressing{}).Annotations[egressv1.AnnotationTemplateHash] != px.Annotations[egressv1.AnnotationTemplateHash] {
		t.Error("members in one zone have different hashes")
	}
}
