// Package keyedlock serialises work per key (an instance name) without a
// global lock: Create and Delete of one instance never overlap, while calls
// for other instances go on. It holds memory only for keys that are locked
// or waited on, so a provider that sees millions of names over its life
// keeps none of them.
package keyedlock

import (
	"context"
	"sync"
)

// Locks is a set of mutexes, one per key, made on first use and dropped
// when nobody holds or waits for it. The zero value is ready; a Locks must
// not be copied after first use.
type Locks struct {
	mu   sync.Mutex
	keys map[string]*key
}

// key is one key's mutex: a one-slot semaphore, so that a waiter can give
// up when its ctx ends, and refs, the holder and waiters that keep it in
// the map.
type key struct {
	sem  chan struct{}
	refs int
}

// Lock waits for key's lock until ctx ends, and returns the function that
// releases it (calling it more than once is harmless). A ctx that has ended
// (before or while waiting) returns ctx's error and holds nothing; the
// caller classifies it (a provider returns it as Transient).
func (l *Locks) Lock(ctx context.Context, name string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.keys == nil {
		l.keys = map[string]*key{}
	}
	k := l.keys[name]
	if k == nil {
		k = &key{sem: make(chan struct{}, 1)}
		l.keys[name] = k
	}
	k.refs++
	l.mu.Unlock()

	select {
	case k.sem <- struct{}{}:
	case <-ctx.Done():
		l.drop(name, k)
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-k.sem
			l.drop(name, k)
		})
	}, nil
}

// drop ends one holder's or waiter's interest in k, and forgets k once no
// one is left.
func (l *Locks) drop(name string, k *key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k.refs--
	if k.refs == 0 && l.keys[name] == k {
		delete(l.keys, name)
	}
}

// Len is how many keys are held or waited on: the memory Locks keeps.
func (l *Locks) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
