package providertest

import (
	"context"
	"sync"
)

// Faults is the fault bookkeeping a Backend hook needs: failures queued per
// operation and holds per operation. A provider's test seam (a fault func, a
// transport) asks Next before each backend call. The zero value is ready.
type Faults struct {
	mu     sync.Mutex
	fails  map[string][]error
	blocks map[string]chan struct{}
}

// FailNext queues err for the next call of op.
func (f *Faults) FailNext(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails == nil {
		f.fails = map[string][]error{}
	}
	f.fails[op] = append(f.fails[op], err)
}

// Block holds every call of op until the returned release is called
// (idempotent) or the call's ctx ends.
func (f *Faults) Block(op string) (release func()) {
	hold := make(chan struct{})
	f.mu.Lock()
	if f.blocks == nil {
		f.blocks = map[string]chan struct{}{}
	}
	f.blocks[op] = hold
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.blocks[op] == hold {
				delete(f.blocks, op)
			}
			f.mu.Unlock()
			close(hold)
		})
	}
}

// Next is what a call of op meets: a queued failure (returned as injected),
// else a hold it waits out; ctx's error if ctx ends first.
func (f *Faults) Next(ctx context.Context, op string) (injected, err error) {
	f.mu.Lock()
	if q := f.fails[op]; len(q) > 0 {
		f.fails[op] = q[1:]
		f.mu.Unlock()
		return q[0], nil
	}
	hold := f.blocks[op]
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, nil
}

// Armed says a failure is queued for, or a hold set on, one of ops: a
// provider that answers some calls from a cache reads live while so, so
// that the call meets the fault.
func (f *Faults) Armed(ops ...string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range ops {
		if len(f.fails[op]) > 0 || f.blocks[op] != nil {
			return true
		}
	}
	return false
}
