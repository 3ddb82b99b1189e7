package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// testProxyGroup (issue 24) runs a ProxyGroup of two members on the
// kubernetes entry, deployed as users deploy the operator: both members
// Ready behind the group's one Service (the endpoint), with a
// PodDisruptionBudget the cluster's disruption controller counts; one
// member's Pod deleted (grace 0, as a lost node's Pods go), the Service's
// EndpointSlice drops it while the endpoint stays and the group stays
// Available, and takes the Pod made again; the group deleted, its front
// goes with it (the finalizer), the cluster's garbage collector removes the
// members (their controller reference), and the operator their Pods and
// objects. The times are logged, not asserted. This cluster runs no
// kube-proxy: the EndpointSlice is what kube-proxy (or a CNI's service
// implementation) would act on, so its change is the failover measured.
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
	frontEndpoint := fmt.Sprintf(".svc:%d", proxyPort)
	bothReady := func(g *egressv1.ProxyGroup) error {
		if g.Status.ReadyMembers != 2 || !meta.IsStatusConditionTrue(g.Status.Conditions, egressv1.ConditionAvailable) {
			return fmt.Errorf("not both ready")
		}
		if !strings.HasSuffix(g.Status.Endpoint, frontEndpoint) || g.Status.FrontProvider != podsProvider {
			return fmt.Errorf("endpoint %q from %q: not the group's Service", g.Status.Endpoint, g.Status.FrontProvider)
		}
		return nil
	}
	waitGroup("both members ready behind the group's Service", bothReady)
	endpoint := g.Status.Endpoint
	t.Logf("ProxyGroup grp: apply -> both members ready %s, endpoint %s", time.Since(start).Round(time.Millisecond), endpoint)
	if g.Status.Holder != "" {
		t.Errorf("holder %q: behind a Service no member holds the endpoint", g.Status.Holder)
	}
	host := strings.Split(strings.TrimSuffix(endpoint, frontEndpoint), ".")
	if len(host) != 2 {
		t.Fatalf("endpoint %q: want <service>.<namespace>.svc:%d", endpoint, proxyPort)
	}
	front := client.ObjectKey{Namespace: host[1], Name: host[0]}
	svc := &corev1.Service{}
	if err := cl.c.Get(ctx, front, svc); err != nil {
		t.Fatalf("the group's Service %s: %v", front, err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != proxyPort || len(svc.Spec.Selector) == 0 {
		t.Fatalf("Service %s: ports %+v, selector %v", front, svc.Spec.Ports, svc.Spec.Selector)
	}
	testenv.EventuallyNilWithin(t, slow, "the disruption controller counts the group's PodDisruptionBudget", func() error {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := cl.c.Get(ctx, front, pdb); err != nil {
			return err
		}
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 ||
			pdb.Status.ExpectedPods != 2 || pdb.Status.DisruptionsAllowed != 1 {
			return fmt.Errorf("minAvailable %v, status %+v", pdb.Spec.MinAvailable, pdb.Status)
		}
		return nil
	})

	members := make([]*egressv1.Proxy, 2)
	pods := make([]corev1.Pod, 2)
	for i := range members {
		members[i] = &egressv1.Proxy{}
		if err := cl.c.Get(ctx, client.ObjectKey{Namespace: cl.ns, Name: fmt.Sprintf("grp-%d", i)}, members[i]); err != nil {
			t.Fatal(err)
		}
		pods[i] = cl.instanceObjects(t, members[i]).pods[0]
		if a := pods[i].Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			t.Errorf("member %s's Pod %s has no preferred anti-affinity: %+v", members[i].Name, pods[i].Name, a)
		}
		for k, v := range svc.Spec.Selector {
			if pods[i].Labels[k] != v {
				t.Errorf("the Service's selector %s=%s does not select member %s's Pod %s (labels %v)", k, v, members[i].Name, pods[i].Name, pods[i].Labels)
			}
		}
	}
	// readyAddresses are the ready endpoints of the Service's slices.
	readyAddresses := func() (map[string]bool, error) {
		var l discoveryv1.EndpointSliceList
		if err := cl.c.List(ctx, &l, client.InNamespace(front.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: front.Name}); err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					for _, a := range e.Addresses {
						out[a] = true
					}
				}
			}
		}
		return out, nil
	}
	sliceHas := func(what string, want func(map[string]bool) error) time.Duration {
		t.Helper()
		began := time.Now()
		testenv.EventuallyNilWithin(t, slow, "Service "+front.String()+"'s EndpointSlice: "+what, func() error {
			got, err := readyAddresses()
			if err != nil {
				return err
			}
			if err := want(got); err != nil {
				return fmt.Errorf("%w (ready endpoints %v)", err, got)
			}
			return nil
		})
		return time.Since(began)
	}
	sliceHas("both members' Pods ready", func(got map[string]bool) error {
		if len(got) != 2 || !got[pods[0].Status.PodIP] || !got[pods[1].Status.PodIP] {
			return fmt.Errorf("want %s and %s", pods[0].Status.PodIP, pods[1].Status.PodIP)
		}
		return nil
	})

	lost := time.Now()
	if err := cl.c.Delete(ctx, &pods[0], client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("deleting member grp-0's Pod %s: %v", pods[0].Name, err)
	}
	sliceHas("grp-0's deleted Pod dropped", func(got map[string]bool) error {
		if got[pods[0].Status.PodIP] || !got[pods[1].Status.PodIP] {
			return fmt.Errorf("want only %s", pods[1].Status.PodIP)
		}
		return nil
	})
	dropped := time.Since(lost)
	if err := cl.c.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
		t.Fatal(err)
	}
	if g.Status.Endpoint != endpoint || !meta.IsStatusConditionTrue(g.Status.Conditions, egressv1.ConditionAvailable) {
		t.Errorf("with one member lost: endpoint %q (was %q), Available %v; want the Service's, True", g.Status.Endpoint, endpoint,
			meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionAvailable))
	}
	waitGroup("both members ready again", bothReady)
	sliceHas("both members' Pods ready again", func(got map[string]bool) error {
		if len(got) != 2 || !got[pods[1].Status.PodIP] {
			return fmt.Errorf("want %s and grp-0's new Pod", pods[1].Status.PodIP)
		}
		return nil
	})
	t.Logf("member grp-0's Pod %s deleted: the Service's EndpointSlice dropped it after %s (the endpoint %s unchanged), both members ready in it again after %s",
		pods[0].Name, dropped.Round(time.Millisecond), endpoint, time.Since(lost).Round(time.Millisecond))

	if err := cl.c.Delete(ctx, g, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for _, m := range members {
		cl.waitGone(t, m) // the Proxy, and every object with its UID mark
	}
	for _, o := range []client.Object{&corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
		testenv.EventuallyNilWithin(t, slow, fmt.Sprintf("the group's %T %s gone", o, front), func() error {
			err := cl.c.Get(ctx, front, o)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	}
	t.Logf("ProxyGroup grp deleted: its Service and PodDisruptionBudget, both members and their objects gone after %s", time.Since(deleted).Round(time.Millisecond))
}
