package providertest

import (
	"sync"
	"testing"
)

// Restartable keeps the provider a Backend built last, so that its
// Restart can stop that one the way a killed process stops and build the
// next over the same backend.
type Restartable[P interface{ Close() error }] struct {
	mu  sync.Mutex
	cur P
}

// Built records p as the current provider and returns it.
func (r *Restartable[P]) Built(p P) P {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur = p
	return p
}

// Current is the provider built last.
func (r *Restartable[P]) Current() P {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Restart closes the current provider (its background steps end where
// they are) and returns the one build makes, which build records with
// Built.
func (r *Restartable[P]) Restart(t *testing.T, build func(*testing.T) P) P {
	t.Helper()
	if err := r.Current().Close(); err != nil {
		t.Logf("closing the provider before its restart: %v", err)
	}
	return build(t)
}
