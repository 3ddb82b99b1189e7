// Package clientloop is a client that asks one URL again and again, as a
// proxy's users do, and keeps every answer: what the failover tests and
// drills measure (the longest gap in answers, the asks lost, what the
// destination saw).
package clientloop

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// Answer is one ask.
type Answer struct {
	At time.Time
	// OK: a 200 arrived whole; Body is its body, trimmed. A 200 whose
	// body broke off (a connection cut in a failover, the client's
	// timeout while reading) is not OK: it was not answered.
	OK   bool
	Body string
}

// Loop asks until the test ends.
type Loop struct {
	mu      sync.Mutex
	answers []Answer
}

// Start asks target through c every interval (each ask waits for the
// last: a slow answer delays the next), until the test ends.
func Start(t testing.TB, c *http.Client, target string, every time.Duration) *Loop {
	t.Helper()
	l := &Loop{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			a := Answer{At: time.Now()}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
			if err == nil {
				if resp, err := c.Do(req); err == nil {
					body, err := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					a.OK, a.Body = resp.StatusCode == http.StatusOK && err == nil, strings.TrimSpace(string(body))
				}
			}
			l.mu.Lock()
			l.answers = append(l.answers, a)
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// Answered is the number of asks answered so far.
func (l *Loop) Answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.answers {
		if a.OK {
			n++
		}
	}
	return n
}

// AwaitAnswered waits until more than n asks were answered (bound only
// stops a hung test).
func (l *Loop) AwaitAnswered(t testing.TB, n int, bound time.Duration, what string) {
	t.Helper()
	testenv.EventuallyNilWithin(t, bound, what, func() error {
		if got := l.Answered(); got <= n {
			return fmt.Errorf("%d answers, want more than %d", got, n)
		}
		return nil
	})
}

// GapSince is the longest time between two answered asks from the last
// answer before since on, and the asks since that went unanswered.
func (l *Loop) GapSince(since time.Time) (gap time.Duration, lost int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for _, a := range l.answers {
		if !a.OK {
			if !a.At.Before(since) {
				lost++
			}
			continue
		}
		if !last.IsZero() && !a.At.Before(since) && a.At.Sub(last) > gap {
			gap = a.At.Sub(last)
		}
		last = a.At
	}
	return gap, lost
}

// BodiesOtherThan are the answered bodies other than want, with counts.
func (l *Loop) BodiesOtherThan(want string) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, a := range l.answers {
		if a.OK && a.Body != want {
			out[a.Body]++
		}
	}
	return out
}
