package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// testProxyGroup (issue 24, first step) runs a ProxyGroup of two members
// on the kubernetes entry, deployed as users deploy the operator: both
// members Ready, the endpoint on the first ready; its Squid Pod deleted
// (grace 0, as a lost node's Pods go), the endpoint moves to the other and the group
// is back to two ready members once the first's Pod is made again; the
// group deleted, the cluster's garbage collector removes the members
// (their controller reference), and the operator their Pods and objects.
// The times are logged, not asserted.
func (cl *cluster) testProxyGroup(t *testing.T) {
	ctx := context.Background()
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: cl.ns, Name: "grp"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, Template: egressv1.ProxyTemplate{
			Spec: egressv1.ProxySpec{Provider: podsProvider, Port: proxyPort, AllowedSourceRanges: []string{podRange}},
		}},
	}
	if err := cl.c.Create(ctx, g); err != nil {
		t.Fatalf("creating ProxyGroup: %v", err)
	}
	// A failure below must not leave a group that makes its members again
	// while the suite's cleanup waits for every Proxy to go.
	t.Cleanup(func() { _ = client.IgnoreNotFound(cl.c.Delete(ctx, g)) })
	start := time.Now()
	waitGroup := func(what string, cond func(*egressv1.ProxyGroup) error) {
		t.Helper()
		testenv.EventuallyNilWithin(t, slow, "ProxyGroup grp: "+what, func() error {
			if err := cl.c.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
				return err
			}
			if err := cond(g); err != nil {
				return fmt.Errorf("%w; status %+v", err, g.Status)
			}
			return nil
		})
	}
	bothReady := func(g *egressv1.ProxyGroup) error {
		if g.Status.ReadyMembers != 2 || !meta.IsStatusConditionTrue(g.Status.Conditions, egressv1.ConditionAvailable) {
			return fmt.Errorf("not both ready")
		}
		return nil
	}
	waitGroup("both members ready", bothReady)
	t.Logf("ProxyGroup grp: apply -> both members ready %s, holder %s, endpoint %s", time.Since(start).Round(time.Millisecond), g.Status.Holder, g.Status.Endpoint)
	// The first member ready holds the endpoint (either may be first).
	first, next := g.Status.Holder, ""
	switch first {
	case "grp-0":
		next = "grp-1"
	case "grp-1":
		next = "grp-0"
	default:
		t.Fatalf("holder %q: want one of the members", first)
	}
	holder := &egressv1.Proxy{}
	if err := cl.c.Get(ctx, client.ObjectKey{Namespace: cl.ns, Name: first}, holder); err != nil {
		t.Fatal(err)
	}
	if g.Status.Endpoint == "" || g.Status.Endpoint != holder.Status.Endpoint {
		t.Fatalf("group endpoint %q, want the holder %s's %q", g.Status.Endpoint, first, holder.Status.Endpoint)
	}

	pod := cl.instanceObjects(t, holder).pods[0]
	lost := time.Now()
	if err := cl.c.Delete(ctx, &pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("deleting the holder's Pod %s: %v", pod.Name, err)
	}
	waitGroup("the endpoint on "+next, func(g *egressv1.ProxyGroup) error {
		if g.Status.Holder != next || g.Status.Endpoint == "" {
			return fmt.Errorf("not moved")
		}
		return nil
	})
	moved := time.Since(lost)
	waitGroup("both members ready again", bothReady)
	t.Logf("holder's Pod %s deleted: endpoint on %s (%s) after %s, both ready again after %s",
		pod.Name, next, g.Status.Endpoint, moved.Round(time.Millisecond), time.Since(lost).Round(time.Millisecond))

	members := make([]*egressv1.Proxy, 2)
	for i := range members {
		members[i] = &egressv1.Proxy{}
		if err := cl.c.Get(ctx, client.ObjectKey{Namespace: cl.ns, Name: fmt.Sprintf("grp-%d", i)}, members[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.c.Delete(ctx, g, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for _, m := range members {
		cl.waitGone(t, m) // the Proxy, and every object with its UID mark
	}
	t.Logf("ProxyGroup grp deleted: both members and their objects gone after %s", time.Since(deleted).Round(time.Millisecond))
}
