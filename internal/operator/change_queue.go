package operator

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/controller"
)

// changeQueue carries names from the registry to one of the Proxy
// reconciler's channels, one event per name: the names of changed
// providers-config entries, or the IDs of instances their providers saw
// change. add never blocks (the registry calls it inside Apply, a
// provider from its own goroutines) and never drops a name: names wait
// here, each once, until the reconciler reads them, so a name that changes
// again while pending needs no second event (the reconciler maps it to
// its Proxies when it reads it).
type changeQueue struct {
	out chan<- event.GenericEvent

	mu      sync.Mutex
	pending []string
	queued  map[string]bool
	wake    chan struct{}
}

func newChangeQueue(out chan<- event.GenericEvent) *changeQueue {
	return &changeQueue{out: out, queued: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// add queues names; it is the registry's OnChange listener (and, one name
// at a time, its OnInstanceChange listener).
func (q *changeQueue) add(names []string) {
	q.mu.Lock()
	for _, n := range names {
		if !q.queued[n] {
			q.queued[n] = true
			q.pending = append(q.pending, n)
		}
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is pending already; it sees these names too
	}
}

// next takes the oldest pending name.
func (q *changeQueue) next() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return "", false
	}
	n := q.pending[0]
	q.pending = q.pending[1:]
	delete(q.queued, n)
	return n, true
}

// Start sends the pending names until ctx ends; it implements
// manager.Runnable.
func (q *changeQueue) Start(ctx context.Context) error {
	for {
		name, ok := q.next()
		if !ok {
			select {
			case <-q.wake:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case q.out <- controller.ChangedEvent(name):
		case <-ctx.Done():
			return nil
		}
	}
}

// NeedLeaderElection is false: names pile up (each once) on a standby too,
// and reach the reconciler when it starts, which re-reads every Proxy then
// anyway.
func (q *changeQueue) NeedLeaderElection() bool { return false }
