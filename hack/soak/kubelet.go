package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// kubeletPeriod is how often the stand-in kubelet looks for new Pods.
const kubeletPeriod = 250 * time.Millisecond

// startKubelet plays the kubelet for the provider's Pods, the way the
// controller's tests do: no node runs them, so each new Pod is marked
// Running and Ready with an address from 192.0.2.0/24 (TEST-NET-1, a status
// value only: nothing is ever sent to it). Without it no Proxy would become
// Ready. A Pod no node runs is deleted at once by the API server, so the
// operator's deletes take effect at once too. The returned func stops it.
func (s *soak) startKubelet(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(kubeletPeriod)
		defer tick.Stop()
		n := 0
		for {
			if err := s.markPodsRunning(ctx, &n); err != nil && ctx.Err() == nil {
				s.out.say("kubelet: %v", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (s *soak) markPodsRunning(ctx context.Context, n *int) error {
	var pods corev1.PodList
	if err := s.cp.client().List(ctx, &pods, client.InNamespace(backendNamespace), client.MatchingLabels{provider.MarkManaged: provider.MarkManagedValue}); err != nil {
		return err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.Phase == corev1.PodRunning || pod.DeletionTimestamp != nil {
			continue
		}
		*n++
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = fmt.Sprintf("192.0.2.%d", *n%250+1)
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if err := s.cp.client().Status().Update(ctx, pod); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("marking Pod %s Running: %w", pod.Name, err)
		}
	}
	return nil
}
