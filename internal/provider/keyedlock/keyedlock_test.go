package keyedlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// briefly is the deadline of a Lock that must fail because the key is held:
// the result does not depend on it, only how long the test waits.
const briefly = 50 * time.Millisecond

// mustLock takes name's lock or fails the test.
func mustLock(t *testing.T, l *Locks, name string) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	unlock, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return unlock
}

// expectHeld proves name's lock is taken: a Lock with a short deadline
// runs out.
func expectHeld(t *testing.T, l *Locks, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), briefly)
	defer cancel()
	unlock, err := l.Lock(ctx, name)
	if err == nil {
		unlock()
		t.Fatalf("Lock(%q) succeeded while another holder has it", name)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock(%q) while held: %v, want the ctx's deadline", name, err)
	}
}

func TestLocksSerialiseOneKey(t *testing.T) {
	var l Locks
	unlock := mustLock(t, &l, "a")
	expectHeld(t, &l, "a")
	unlock()
	mustLock(t, &l, "a")()

	// Many holders of one key in turn: the plain counter is safe only if
	// they never overlap (-race says so), and inside never exceeds 1.
	var wg sync.WaitGroup
	inside, most, total := 0, 0, 0
	for range 32 {
		wg.Go(func() {
			unlock, err := l.Lock(t.Context(), "a")
			if err != nil {
				t.Errorf("Lock: %v", err)
				return
			}
			defer unlock()
			inside++
			most = max(most, inside)
			total++
			inside--
		})
	}
	wg.Wait()
	if most != 1 || total != 32 {
		t.Errorf("holders of one key: at most %d at once over %d turns, want 1 over 32", most, total)
	}
	if n := l.Len(); n != 0 {
		t.Errorf("Len after every holder left = %d, want 0", n)
	}
}

func TestLocksOtherKeysGoOn(t *testing.T) {
	var l Locks
	defer mustLock(t, &l, "a")()
	// Would run out if one lock covered every key.
	unlock := mustLock(t, &l, "b")
	unlock()
	if n := l.Len(); n != 1 {
		t.Errorf("Len with only a held = %d, want 1", n)
	}
}

func TestLocksEndedCtxHoldsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		held bool // another holder has the key while the ctx ends
	}{
		{"ended before, key free", false},
		{"ends while waiting", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Locks
			var unlockOther func()
			if tc.held {
				unlockOther = mustLock(t, &l, "a")
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			if tc.held {
				go func() {
					_, err := l.Lock(ctx, "a")
					done <- err
				}()
				// The waiter is counted before it waits; cancel once it is.
				testenv.Eventually(t, "the waiter parked on a", func() bool { return l.waiters("a") == 2 })
				cancel()
			} else {
				cancel()
				_, err := l.Lock(ctx, "a")
				done <- err
			}
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock with an ended ctx: %v, want context.Canceled", err)
			}
			if unlockOther != nil {
				unlockOther()
			}
			if n := l.Len(); n != 0 {
				t.Errorf("Len after the waiter gave up and the holder left = %d, want 0", n)
			}
			mustLock(t, &l, "a")()
		})
	}
}

func TestLocksUnlockTwiceIsHarmless(t *testing.T) {
	var l Locks
	first := mustLock(t, &l, "a")
	first()
	second := mustLock(t, &l, "a")
	defer second()
	first() // must not release second's hold
	expectHeld(t, &l, "a")
}

func TestLocksForgetKeys(t *testing.T) {
	var l Locks
	for i := range 1000 {
		mustLock(t, &l, fmt.Sprintf("proxy-%d", i))()
	}
	if n := l.Len(); n != 0 {
		t.Errorf("Len after 1000 keys were locked and released = %d, want 0: memory grows with every name seen", n)
	}
}

// waiters is how many holders and waiters keep name, for tests that must
// know a waiter is parked.
func (l *Locks) waiters(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.keys[name]; k != nil {
		return k.refs
	}
	return 0
}

func BenchmarkLocks(b *testing.B) {
	ctx := context.Background()
	b.Run("uncontended", func(b *testing.B) {
		var l Locks
		for b.Loop() {
			unlock, _ := l.Lock(ctx, "a")
			unlock()
		}
	})
	b.Run("parallel distinct keys", func(b *testing.B) {
		var l Locks
		var n sync.Mutex
		next := 0
		b.RunParallel(func(pb *testing.PB) {
			n.Lock()
			name := fmt.Sprintf("proxy-%d", next)
			next++
			n.Unlock()
			for pb.Next() {
				unlock, _ := l.Lock(ctx, name)
				unlock()
			}
		})
	})
	b.Run("parallel one key", func(b *testing.B) {
		var l Locks
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				unlock, _ := l.Lock(ctx, "a")
				unlock()
			}
		})
	})
}
