package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// A listing that blocks until the test releases it, numbering its starts.
type heldListing struct {
	starts  atomic.Int32
	release chan struct{}
}

func (h *heldListing) list(ctx context.Context) ([]int, error) {
	n := h.starts.Add(1)
	select {
	case <-h.release:
		return []int{int(n)}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A call never gets a listing that started before it asked: the calls made
// while a round runs share the next round, which starts when the running
// one ends. Three calls, two listings.
func TestListRoundsNeverServeAnOlderListing(t *testing.T) {
	var rounds listRounds[int]
	h := &heldListing{release: make(chan struct{})}
	ctx := context.Background()
	type result struct {
		items []int
		err   error
	}
	call := func() chan result {
		c := make(chan result, 1)
		go func() {
			items, err := rounds.list(ctx, time.Minute, h.list)
			c <- result{items, err}
		}()
		return c
	}
	first := call()
	testenv.Eventually(t, "the first listing running", func() bool { return h.starts.Load() == 1 })
	second, third := call(), call()
	// Both have joined the next round before the first listing ends.
	testenv.Eventually(t, "the next round waiting", func() bool {
		rounds.mu.Lock()
		defer rounds.mu.Unlock()
		return rounds.next != nil
	})
	close(h.release)
	for name, c := range map[string]chan result{"first": first, "second": second, "third": third} {
		want := 2
		if name == "first" {
			want = 1
		}
		r := <-c
		if r.err != nil || len(r.items) != 1 || r.items[0] != want {
			t.Errorf("%s call got %v, %v; want listing #%d", name, r.items, r.err, want)
		}
	}
	if n := h.starts.Load(); n != 2 {
		t.Errorf("%d listings for 3 calls (2 while one ran), want 2", n)
	}
	testenv.Eventually(t, "the rounds idle", rounds.idle)
}

// A caller that gives up stops its own wait only: the round goes on for the
// others, and its error is its own.
func TestListRoundsCallerCancelLeavesTheRound(t *testing.T) {
	var rounds listRounds[int]
	h := &heldListing{release: make(chan struct{})}
	cancelled, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := rounds.list(cancelled, time.Minute, h.list)
		gaveUp <- err
	}()
	testenv.Eventually(t, "the listing running", func() bool { return h.starts.Load() == 1 })
	other := make(chan []int, 1)
	go func() {
		items, _ := rounds.list(context.Background(), time.Minute, h.list)
		other <- items
	}()
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) || !errors.Is(err, provider.ErrTransient) {
		t.Errorf("the cancelled caller got %v, want a Transient context.Canceled", err)
	}
	close(h.release)
	if items := <-other; len(items) != 1 || items[0] != 2 {
		t.Errorf("the other caller got %v, want listing #2", items)
	}
}

// Many concurrent deletions share few listings, and each still sees what
// existed when it asked.
func TestListRoundsShareUnderLoad(t *testing.T) {
	var rounds listRounds[int]
	var mu sync.Mutex
	existing := 0
	var starts atomic.Int32
	fn := func(ctx context.Context) ([]int, error) {
		starts.Add(1)
		time.Sleep(2 * time.Millisecond) // a listing takes a while
		mu.Lock()
		defer mu.Unlock()
		return []int{existing}, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			existing++ // what exists when this call asks
			seenAtCall := existing
			mu.Unlock()
			items, err := rounds.list(context.Background(), time.Minute, fn)
			if err != nil || items[0] < seenAtCall {
				errs <- fmt.Errorf("call %d: listing %v (%v) older than the call, which saw %d", i, items, err, seenAtCall)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("200 calls, %d listings", starts.Load())
	if n := starts.Load(); n >= 200 {
		t.Errorf("%d listings for 200 concurrent calls: nothing shared", n)
	}
}
