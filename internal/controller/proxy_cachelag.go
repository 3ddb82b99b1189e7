package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A pass reads its Proxy from the manager's cache, which may still hold
// the version this reconciler's own last write replaced: controller-runtime
// runs a key again as soon as its pass ends when an event came during the
// pass (a claim bound, a timer, another controller's write), and that pass
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

// forget drops what is known of k (it is gone).
func (c *cacheLag) forget(k types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.replaced, k)
}
