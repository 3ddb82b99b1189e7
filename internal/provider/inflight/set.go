package inflight

import (
	"maps"
	"sync"
)

// Set says, by instance name, what each step in flight is for (its host or
// zone, its Proxy), so that a provider's ListByTag and Get can report an
// instance from its first moment, before the backend shows it. A provider
// adds a name before Table.Start and removes it when the step returns.
// The zero value is ready.
type Set[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

// Add records v for name.
func (s *Set[V]) Add(name string, v V) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]V{}
	}
	s.m[name] = v
}

// Remove forgets name.
func (s *Set[V]) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, name)
}

// Get is what name was recorded with.
func (s *Set[V]) Get(name string) (V, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[name]
	return v, ok
}

// Snapshot is a copy of the set.
func (s *Set[V]) Snapshot() map[string]V {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.m)
}
