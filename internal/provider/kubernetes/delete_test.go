package kubernetes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestGoing(t *testing.T) {
	now := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { ts := metav1.NewTime(now.Add(d)); return &ts }
	for _, tc := range []struct {
		name        string
		deletion    *metav1.Time
		deletedByUs bool
		want        bool
	}{
		{"untouched", nil, false, false},
		{"deleted by us, not seen since", nil, true, true},
		{"terminating within its grace", at(20 * time.Second), true, true},
		{"terminating within its grace, someone else's delete", at(time.Second), false, true},
		{"past its grace: delete again", at(-time.Second), true, false},
		{"grace 0 left terminating", at(0), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{DeletionTimestamp: tc.deletion}
			if got := going(obj, tc.deletedByUs, now); got != tc.want {
				t.Errorf("going = %v, want %v", got, tc.want)
			}
		})
	}
}

// A Pod on a node that is lost stays terminating past its grace: no
// kubelet ends it. Delete then removes it with a grace of 0, so that the
// Proxy's replacement (same name) and the Service's endpoints are free.
// The Pod here is bound to a node no kubelet runs, and evicted with a
// grace of 1 s, as the taint manager evicts from an unreachable node.
func TestDeletePastGraceOnALostNode(t *testing.T) {
	p, cs, ns, inst, name := runningInstance(t, "lostnode")
	ctx := context.Background()
	pods := cs.CoreV1().Pods(ns)
	if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Target: corev1.ObjectReference{Kind: "Node", Name: "lost-node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding pod %s to a node: %v", name, err)
	}
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}); err != nil {
		t.Fatalf("evicting pod %s: %v", name, err)
	}
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp == nil {
		t.Fatalf("pod %s after its eviction: %v, %+v; want it terminating (its node has no kubelet)", name, err, pod)
	}
	deadline := pod.DeletionTimestamp.Time
	testenv.EventuallyNil(t, "the provider sees pod "+name+" terminating past its grace", func() error {
		got, err := p.Get(ctx, inst.ID)
		if err != nil {
			return err
		}
		if got.State != provider.StateTerminated || !time.Now().After(deadline) {
			return fmt.Errorf("state %s at %s, grace ends %s", got.State, time.Now().Format(time.StampMilli), deadline.Format(time.StampMilli))
		}
		return nil
	})
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if pod, err := pods.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod %s after Delete past its grace: %v (deletionTimestamp %v); want it gone", name, err, pod.DeletionTimestamp)
	}
}
