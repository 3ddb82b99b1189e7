package controller

import (
	"context"
	"sync"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// Every deletion pass lists the provider, to find what the Proxy's status
// does not record (proxy_delete.go). A delete wave of N Proxies made that N
// listings of the whole fleet per pass: O(N²) (make bench-fleet: 1,000
// Proxies on the kubernetes provider, 3 Pod LISTs per deleted Proxy). The
// passes of concurrent deletions share listings instead, in rounds: a pass
// joins the round that starts next, never one already running, so the
// listing it reads was started after it asked, and so after it saw its
// Proxy being deleted (nothing is created for such a Proxy any more: an
// instance the listing could miss would have to be newer). Rounds of one
// provider entry run one after another; a wave then lists about once per
// listing's duration.
//
// A provider that lists one Proxy's objects by its UID
// (provider.OwnerLister) is asked that instead, per pass: each listing is
// that Proxy's few objects, started by the pass itself, so a wave of N
// deletes reads O(N) objects rather than O(N) rounds of the fleet.

// instancesOf returns the instances a deletion pass of the Proxy with UID
// uid must look at: the Proxy's own through the entry's owner listing,
// else the fleet's from a shared round. Either listing started after the
// call.
func (r *ProxyReconciler) instancesOf(ctx context.Context, entry *registry.Entry, uid string) ([]provider.Instance, error) {
	if entry.Owned != nil {
		return entry.Owned.ListOwnedInstances(ctx, uid)
	}
	return r.sweeps.of(entry).instances.list(ctx, r.CallTimeout, entry.Provider.ListByTag)
}

// secondariesOf is instancesOf for the secondary resources; the entry has
// a SecondaryLister.
func (r *ProxyReconciler) secondariesOf(ctx context.Context, entry *registry.Entry, uid string) ([]provider.Secondary, error) {
	if entry.Owned != nil {
		return entry.Owned.ListOwnedSecondaries(ctx, uid)
	}
	return r.sweeps.of(entry).secondaries.list(ctx, r.CallTimeout, entry.Secondary.ListSecondary)
}

// listRounds shares the listings of one kind for one entry.
type listRounds[T any] struct {
	mu      sync.Mutex
	next    *listRound[T]
	running bool
}

type listRound[T any] struct {
	ctx   context.Context // the first joiner's, without its cancel: the round serves them all
	list  func(context.Context) ([]T, error)
	done  chan struct{}
	items []T
	err   error
	// joined counts the calls this round serves (tests wait on it).
	joined int
}

// list returns a listing by fn that started after this call, shared with
// the calls that joined the same round. ctx ending stops this call's wait,
// not the round. timeout bounds the round's listing.
func (l *listRounds[T]) list(ctx context.Context, timeout time.Duration, fn func(context.Context) ([]T, error)) ([]T, error) {
	l.mu.Lock()
	r := l.next
	if r == nil {
		r = &listRound[T]{ctx: context.WithoutCancel(ctx), list: fn, done: make(chan struct{})}
		l.next = r
	}
	r.joined++
	if !l.running {
		l.startLocked(timeout)
	}
	l.mu.Unlock()
	select {
	case <-r.done:
		return r.items, r.err
	case <-ctx.Done():
		return nil, provider.Errorf(provider.ErrTransient, "waiting for the provider's listing: %w", ctx.Err())
	}
}

// startLocked runs the round that was waiting; the next one starts when it
// has ended.
func (l *listRounds[T]) startLocked(timeout time.Duration) {
	r := l.next
	l.next, l.running = nil, true
	go func() {
		ctx, cancel := context.WithTimeout(r.ctx, timeout)
		r.items, r.err = r.list(ctx)
		cancel()
		close(r.done)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.running = false
		if l.next != nil {
			l.startLocked(timeout)
		}
	}()
}

// idle reports whether no round runs or waits.
func (l *listRounds[T]) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.running && l.next == nil
}

// sweepLists holds the rounds of each provider entry. Entries are keyed by
// identity: a reloaded entry of the same name is another provider, whose
// listings must not answer for the old one.
type sweepLists struct {
	mu      sync.Mutex
	byEntry map[*registry.Entry]*entrySweeps
}

type entrySweeps struct {
	instances   listRounds[provider.Instance]
	secondaries listRounds[provider.Secondary]
}

func (s *sweepLists) of(e *registry.Entry) *entrySweeps {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byEntry == nil {
		s.byEntry = map[*registry.Entry]*entrySweeps{}
	}
	// Entries replaced by a reload are dropped once their rounds are over.
	for k, v := range s.byEntry {
		if k != e && v.instances.idle() && v.secondaries.idle() {
			delete(s.byEntry, k)
		}
	}
	es := s.byEntry[e]
	if es == nil {
		es = &entrySweeps{}
		s.byEntry[e] = es
	}
	return es
}
