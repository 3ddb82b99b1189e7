package fakehttp

import "sync"

// Always as a fault's Times keeps it until the queue is cleared.
const Always = -1

// Faults is a fake's queue of injected faults of type F, tried in the
// order queued. The zero value is empty.
type Faults[F any] struct {
	mu    sync.Mutex
	queue []*queued[F]
}

type queued[F any] struct {
	pattern Pattern
	times   int
	fault   *F
}

// Add queues f for the next times calls p selects: 0 is 1, Always is
// every call.
func (q *Faults[F]) Add(p Pattern, times int, f *F) {
	if times == 0 {
		times = 1
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, &queued[F]{pattern: p, times: times, fault: f})
}

// Take returns the first fault queued whose pattern selects the call and
// that accept (nil: any) takes, counting one of its uses, or nil. A fault
// whose uses are spent leaves the queue.
func (q *Faults[F]) Take(method, path string, accept func(*F) bool) *F {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, e := range q.queue {
		if !e.pattern.Matches(method, path) || (accept != nil && !accept(e.fault)) {
			continue
		}
		if e.times != Always {
			e.times--
			if e.times <= 0 {
				q.queue = append(q.queue[:i:i], q.queue[i+1:]...)
			}
		}
		return e.fault
	}
	return nil
}

// Clear drops every queued fault.
func (q *Faults[F]) Clear() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = nil
}
