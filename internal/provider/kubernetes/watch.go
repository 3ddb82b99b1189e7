package kubernetes

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientset "k8s.io/client-go/kubernetes"
)

// The instance watch (provider.InstanceWatcher): from its first call on,
// the provider watches this installation's Pods (in its namespace, or in
// every one) and tells of each Pod that changed or went: the kubelet
// turning its readiness, an eviction, a deletion by hand. The reconciler
// then reads that Proxy at once, not at its running resync. The watch
// needs `watch` on pods (the provider's RBAC components grant it; Check
// names it when missing); without it the polls still find every change.

// podWatch is the provider's watch state.
type podWatch struct {
	changed atomic.Pointer[func(id string)]
	once    sync.Once
	mu      sync.Mutex
	cancel  context.CancelFunc // nil until started
	closed  bool
}

// watchRetry bounds the pause before the watch starts again after it
// failed (a missing right, the API server away); doubling from a second.
const watchRetry = 30 * time.Second

// WatchInstances implements provider.InstanceWatcher.
func (p *Provider) WatchInstances(changed func(id string)) { p.pods.changed.Store(&changed) }

// startWatch starts the watch on c, once, when a watcher is set.
func (p *Provider) startWatch(c clientset.Interface) {
	f := p.pods.changed.Load()
	if f == nil {
		return
	}
	p.pods.once.Do(func() {
		p.pods.mu.Lock()
		defer p.pods.mu.Unlock()
		if p.pods.closed {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		p.pods.cancel = cancel
		go p.watchPods(ctx, c, *f)
	})
}

// stopWatch ends the watch; Close calls it.
func (p *Provider) stopWatch() {
	p.pods.mu.Lock()
	defer p.pods.mu.Unlock()
	p.pods.closed = true
	if p.pods.cancel != nil {
		p.pods.cancel()
	}
}

// watchPods watches until ctx ends, resuming from the last resource
// version it saw, and from a fresh listing when that is too old.
func (p *Provider) watchPods(ctx context.Context, c clientset.Interface, changed func(id string)) {
	pods := c.CoreV1().Pods(p.cfg.Namespace) // "" watches every namespace
	rv, pause := "", time.Second
	for ctx.Err() == nil {
		if rv == "" {
			// One Pod is enough: the listing's resource version is where
			// the watch starts.
			list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: p.selector(), Limit: 1})
			if err != nil {
				pause = p.waitWatch(ctx, pause)
				continue
			}
			rv = list.ResourceVersion
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: p.selector(), ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			pause = p.waitWatch(ctx, pause)
			continue
		}
		pause = time.Second
		rv = p.followWatch(ctx, w, rv, changed)
	}
}

// followWatch tells of each change w brings until it ends, and returns
// the resource version to resume from ("" to list again).
func (p *Provider) followWatch(ctx context.Context, w watch.Interface, rv string, changed func(id string)) string {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv // the API server ended it (its timeout): resume
			}
			if ev.Type == watch.Error {
				if apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) || apierrors.IsGone(apierrors.FromObject(ev.Object)) {
					return ""
				}
				return rv
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = pod.ResourceVersion
			// Added is the provider's own Create (its caller knows), or a
			// Pod it lists anyway; a bookmark only moves rv.
			if (ev.Type == watch.Modified || ev.Type == watch.Deleted) && p.ours(pod.Labels) {
				changed(instanceID(pod.Namespace, pod.Name))
			}
		}
	}
}

// waitWatch pauses before the watch starts again; it returns the next
// pause.
func (p *Provider) waitWatch(ctx context.Context, pause time.Duration) time.Duration {
	select {
	case <-ctx.Done():
	case <-time.After(pause):
	}
	return min(2*pause, watchRetry)
}
