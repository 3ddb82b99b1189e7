package operator

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestProvidersConfigChangeDeliversEveryChangedName: item 10, "a
// providers-config change enqueues only the Proxies of the entries that
// changed". Every changed entry's name reaches the reconciler's channel as
// its own event, however many changes come while nobody reads it, and
// telling a change never blocks (Apply runs the listeners inline).
func TestProvidersConfigChangeDeliversEveryChangedName(t *testing.T) {
	out := make(chan event.GenericEvent) // unbuffered, and not read yet
	q := newChangeQueue(out)
	const n = 50
	for i := 0; i < n; i++ { // would block on the first send if add sent
		q.add([]string{fmt.Sprintf("p%02d", i), "shared"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	seen := map[string]int{}
	for len(seen) < n+1 {
		ev := <-out
		seen[ev.Object.GetName()]++
	}
	for i := 0; i < n; i++ {
		if name := fmt.Sprintf("p%02d", i); seen[name] != 1 {
			t.Errorf("%s delivered %d times, want once", name, seen[name])
		}
	}
	// A name still pending when it changes again is delivered once: the
	// reconciler maps it to its Proxies when it reads the event.
	if seen["shared"] != 1 {
		t.Errorf("the pending name was delivered %d times, want once", seen["shared"])
	}
	// Later changes are delivered too.
	q.add([]string{"late"})
	if ev := <-out; ev.Object.GetName() != "late" {
		t.Errorf("got %q, want late", ev.Object.GetName())
	}
}
