package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestProxyGroupFront: on an entry that keeps a front for a group (the
// fake's Fronter, as kubernetes' Service over the member Pods), the
// group's endpoint is the front's, over every ready member, with no
// holder; each member's instance is made knowing its group (so the front
// selects it); a member that stops serving moves nothing; deleting the
// group removes its front before the group goes.
func TestProxyGroupFront(t *testing.T) {
	entry, fp := fakeEntry("front")
	entry.Fronter = fake.Fronter{Provider: fp}
	ns, evs := startGroupManagerOn(t, entry)
	ctx := context.Background()
	g := createFrontedGroup(t, ns)
	wantEndpoint := fmt.Sprintf("front-web.%s:3128", ns)
	g = waitGroup(t, ns, "web", "the front's endpoint", func(g *egressv1.ProxyGroup) error {
		if err := allReady(2)(g); err != nil {
			return err
		}
		if g.Status.Endpoint != wantEndpoint || g.Status.FrontProvider != "front" ||
			groupCondition(g, egressv1.ConditionAvailable) != "True/FrontServing" {
			return fmt.Errorf("endpoint %q, frontProvider %q, Available %s", g.Status.Endpoint, g.Status.FrontProvider,
				groupCondition(g, egressv1.ConditionAvailable))
		}
		return nil
	})
	if g.Status.Holder != "" {
		t.Errorf("holder %q: a front reaches every ready member, no member holds it", g.Status.Holder)
	}
	if !controllerutil.ContainsFinalizer(g, GroupFrontFinalizer) {
		t.Errorf("finalizers %v: want %s while the group has a front", g.Finalizers, GroupFrontFinalizer)
	}
	ref := provider.GroupRef{Namespace: ns, Name: "web", UID: string(g.UID)}
	if f, ok := fp.Backend().Front(string(g.UID)); !ok || f.Group != ref || f.Port != 3128 || f.Members != 2 {
		t.Fatalf("front %+v (made %v), want group %+v, port 3128, members 2", f, ok, ref)
	}
	reqs := fp.CreateRequests()
	if len(reqs) != 2 {
		t.Fatalf("%d creates, want one per member", len(reqs))
	}
	for _, req := range reqs {
		if req.Group == nil || *req.Group != ref {
			t.Errorf("member %s's create names group %+v, want %+v", req.ProxyName, req.Group, ref)
		}
	}

	// A member stops serving: the front keeps the group available on the
	// other; nothing moves.
	px := &egressv1.Proxy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-1"}, px); err != nil {
		t.Fatal(err)
	}
	fp.Backend().SetServing(px.Status.InstanceName, fake.Serving{Serving: provider.ServingNotAnswering, Detail: "squid stopped"})
	waitGroup(t, ns, "web", "one member ready, still available through the front", func(g *egressv1.ProxyGroup) error {
		if g.Status.ReadyMembers != 1 || g.Status.Endpoint != wantEndpoint || groupCondition(g, egressv1.ConditionAvailable) != "True/FrontServing" {
			return fmt.Errorf("ready %d, endpoint %q, Available %s", g.Status.ReadyMembers, g.Status.Endpoint, groupCondition(g, egressv1.ConditionAvailable))
		}
		return nil
	})
	if moved := evs.with("HolderMoved"); len(moved) != 0 {
		t.Errorf("HolderMoved events %v behind a front", moved)
	}

	// Deleting the group removes its front first.
	if err := env.Client.Delete(ctx, g); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "group web gone", func() error {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &egressv1.ProxyGroup{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	if removed := fp.Backend().FrontsRemoved(); !reflect.DeepEqual(removed, []provider.GroupRef{ref}) {
		t.Fatalf("fronts removed %+v, want [%+v]", removed, ref)
	}
	if _, ok := fp.Backend().Front(string(g.UID)); ok {
		t.Error("the front is still there after the group is gone")
	}
	if ev := evs.with("FrontRemoved"); len(ev) != 1 {
		t.Errorf("FrontRemoved events %v, want one", ev)
	}
}

// TestProxyGroupFrontRefused: a front the provider refuses for good
// stalls the group naming it, and the group falls back to a holder's
// endpoint; a front that fails for now keeps what the status had and is
// tried again.
func TestProxyGroupFrontRefused(t *testing.T) {
	entry, fp := fakeEntry("front")
	entry.Fronter = fake.Fronter{Provider: fp}
	fp.SetError(provider.OpFrontGroup, provider.Errorf(provider.ErrPermanent, "service %s/proxygroup-web exists and is not this installation's", "x"))
	was := frontRefusedRecheck
	frontRefusedRecheck = 200 * time.Millisecond
	t.Cleanup(func() { frontRefusedRecheck = was })
	ns, _ := startGroupManagerOn(t, entry)
	ctx := context.Background()
	g := createFrontedGroup(t, ns)
	g = waitGroup(t, ns, "web", "stalled on the front, a holder's endpoint meanwhile", func(g *egressv1.ProxyGroup) error {
		c := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionStalled)
		if c == nil || c.Reason != egressv1.GroupReasonFrontFailed || g.Status.Holder == "" ||
			groupCondition(g, egressv1.ConditionAvailable) != "True/HolderReady" {
			return fmt.Errorf("Stalled %+v, holder %q, Available %s", c, g.Status.Holder, groupCondition(g, egressv1.ConditionAvailable))
		}
		if !strings.Contains(c.Message, `provider entry "front"`) || !strings.Contains(c.Message, "is not this installation's") {
			return fmt.Errorf("Stalled message %q names neither the entry nor the cause", c.Message)
		}
		return nil
	})

	// The refusal ends (a person renamed the object): the group asks
	// again by itself and the front takes over; then a transient failure
	// keeps the front's endpoint.
	fp.SetError(provider.OpFrontGroup, nil)
	wantEndpoint := fmt.Sprintf("front-web.%s:3128", ns)
	waitGroup(t, ns, "web", "the front's endpoint", func(g *egressv1.ProxyGroup) error {
		if g.Status.Endpoint != wantEndpoint || meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionStalled) != nil || g.Status.Holder != "" {
			return fmt.Errorf("endpoint %q, Stalled %+v, holder %q", g.Status.Endpoint, meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionStalled), g.Status.Holder)
		}
		return nil
	})
	calls := fp.Calls(provider.OpFrontGroup)
	fp.SetError(provider.OpFrontGroup, errors.New("the API server is away"))
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
		t.Fatal(err)
	}
	g.Spec.ProgressDeadlineSeconds = ptr.To(int32(900)) // any change: a new pass
	if err := env.Client.Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "the front tried again", func() error {
		if fp.Calls(provider.OpFrontGroup) < calls+2 {
			return fmt.Errorf("%d front calls since the failure began", fp.Calls(provider.OpFrontGroup)-calls)
		}
		return nil
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
		t.Fatal(err)
	}
	if g.Status.Endpoint != wantEndpoint || g.Status.FrontProvider != "front" {
		t.Errorf("after a transient failure: endpoint %q, frontProvider %q; want the front's kept", g.Status.Endpoint, g.Status.FrontProvider)
	}
	fp.SetError(provider.OpFrontGroup, nil)
}

// createFrontedGroup makes group web of two members on the fake entry
// "front".
func createFrontedGroup(t *testing.T, ns string) *egressv1.ProxyGroup {
	t.Helper()
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: egressv1.ProxyGroupSpec{Members: 2,
			Template: egressv1.ProxyTemplate{Spec: egressv1.ProxySpec{Provider: "front", Port: 3128, AllowedSourceRanges: []string{"127.0.0.0/8"}}}},
	}
	if err := env.Client.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	return g
}
