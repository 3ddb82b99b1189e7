package controller

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A pass reads its Proxy or ProxyGroup from the manager's cache, which
// may still hold the version the reconciler's own last write replaced:
// controller-runtime runs a key again as soon as its pass ends when an
// event came during the pass (a claim bound, a timer, another controller's write), and that pass
// can start before the write's own watch event has reached the cache. Such
// a copy lacks what the write recorded (the ID of the instance just
// created), so acting on it repeats the Create: idempotent, yet a wasted
// backend call and a status write bound to conflict. ReplicaSets meet the
// same lag with expectations; here each write remembers the
// resourceVersion it replaced, and a pass that reads that version does
// nothing: the write's own event brings the next pass. An object never
// returns to a resourceVersion it had, so equality is a safe test even
// though versions are opaque.
type cacheLag struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName]string
}

// cacheLagRecheck is when a pass that found the cache behind runs again
// should the write's event not have come by then (it always comes, also
// after a watch restarts: the relist brings the newer version).
const cacheLagRecheck = time.Second

// wrote records that a pass on k wrote over resourceVersion rv.
func (c *cacheLag) wrote(k types.NamespacedName, rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.replaced == nil {
		c.replaced = map[types.NamespacedName]string{}
	}
	c.replaced[k] = rv
}

// behind says the cache's copy of k, at rv, is the version the last write
// replaced; a copy of any other version ends the wait.
func (c *cacheLag) behind(k types.NamespacedName, rv string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.replaced[k]
	if ok && old != rv {
		delete(c.replaced, k)
	}
	return ok && old == rv
}

// pass runs one pass (run) over obj, just read from the cache as k:
// nothing when obj is the version the reconciler's last write replaced,
// and a quiet requeue when a write of the pass lost a race with another
// writer (a spec change, the other reconciler's write), whose change the
// next pass reads. What a pass did before its write failed is idempotent
// (provider calls, member writes preconditioned on what was read), and
// whatever it made that the status then misses is found by the sweeps
// (ownedUnrecorded at deletion, supersedeUnrecorded after a spec change).
func (c *cacheLag) pass(ctx context.Context, k types.NamespacedName, obj client.Object, run func() (ctrl.Result, error)) (ctrl.Result, error) {
	read := obj.GetResourceVersion()
	if c.behind(k, read) {
		return ctrl.Result{RequeueAfter: cacheLagRecheck}, nil
	}
	res, err := run()
	if obj.GetResourceVersion() != read {
		// The pass wrote obj (a client write updates it with the answer).
		c.wrote(k, read)
	}
	if apierrors.IsConflict(err) {
		logr.FromContextOrDiscard(ctx).V(1).Info("changed since the pass read it; reconciling again")
		return ctrl.Result{Requeue: true}, nil
	}
	return res, err
}

// forget drops what is known of k (it is gone).
func (c *cacheLag) forget(k types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.replaced, k)
}
