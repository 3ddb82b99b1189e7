// Package kubelet plays the kubelet for the kubernetes provider's Pods on
// a control plane with no nodes (envtest), for the commands that run
// the operator on that provider (test/soak, test/benchfleet): each new Pod
// the provider marks managed is set Running and Ready with an address from
// 192.0.2.0/24 (TEST-NET-1, a status value only: nothing is ever sent to
// it). Without it no Proxy would become Ready. A Pod no node runs is
// deleted at once by the API server, so the operator's deletes take effect
// at once too.
package kubelet

import (
	"context"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// workers mark Pods at once; a few, so a create wave of thousands of Pods
// is not served one round trip at a time.
const workers = 4

// Kubelet watches the managed Pods of one namespace and marks each one
// that is not Running yet.
type Kubelet struct {
	c      client.Client
	cache  cache.Cache
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	logf   func(format string, args ...any)
	marked atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

// Start watches namespace through cfg (a watch, not a poll: a fleet of
// thousands of Pods listed every moment would load the API server the
// caller measures) until Stop. logf gets the failures to mark a Pod.
func Start(ctx context.Context, cfg *rest.Config, namespace string, logf func(format string, args ...any)) (*Kubelet, error) {
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		return nil, fmt.Errorf("kubelet client: %w", err)
	}
	pods, err := cache.New(cfg, cache.Options{
		Scheme:               testenv.Scheme,
		DefaultNamespaces:    map[string]cache.Config{namespace: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{provider.MarkManaged: provider.MarkManagedValue}),
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet cache: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	k := &Kubelet{
		c: c, cache: pods, logf: logf, cancel: cancel, done: make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]()),
	}
	inf, err := pods.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kubelet informer: %w", err)
	}
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pending(pod) {
			k.queue.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("kubelet handler: %w", err)
	}
	cacheDone := make(chan struct{})
	go func() { defer close(cacheDone); _ = pods.Start(ctx) }()
	if !pods.WaitForCacheSync(ctx) {
		cancel()
		<-cacheDone
		return nil, fmt.Errorf("kubelet: the Pods of %s never synced", namespace)
	}
	workersDone := make(chan struct{}, workers)
	for range workers {
		go func() {
			defer func() { workersDone <- struct{}{} }()
			for k.work(ctx) {
			}
		}()
	}
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
		for range workers {
			<-workersDone
		}
		<-cacheDone
		close(k.done)
	}()
	return k, nil
}

// Stop stops the watch and the workers and waits for them.
func (k *Kubelet) Stop() { k.cancel(); <-k.done }

// Marked is how many Pods were set Running so far.
func (k *Kubelet) Marked() int64 { return k.marked.Load() }

func pending(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodRunning && pod.DeletionTimestamp == nil
}

func (k *Kubelet) work(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.mark(ctx, key); err != nil {
		if ctx.Err() == nil {
			k.logf("kubelet: %v", err)
		}
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

func (k *Kubelet) mark(ctx context.Context, key types.NamespacedName) error {
	var pod corev1.Pod
	if err := k.cache.Get(ctx, key, &pod); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !pending(&pod) {
		return nil
	}
	n := k.marked.Add(1)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = fmt.Sprintf("192.0.2.%d", n%250+1)
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	err := k.c.Status().Update(ctx, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// A newer Pod is on its way through the watch, which queues it
		// again if it is still not Running.
		return nil
	case err != nil:
		return fmt.Errorf("marking Pod %s Running: %w", pod.Name, err)
	}
	return nil
}
