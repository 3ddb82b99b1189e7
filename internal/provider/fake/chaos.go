package fake

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The chaos mode: a flaky, slow backend, for the fault drills
// (test/drills). Every call but Check waits a random extra delay of up to
// maxDelay (its ctx still ends it) and then fails Transient with
// probability rate, before anything else the call does: a failed call
// changes nothing on the backend. Check is left out, so the health loop
// does not turn the provider Unhealthy and back, which would enqueue every
// Proxy of it and blur the calls counted per operation. The draws come
// from one generator seeded by the caller: the same seed gives the same
// sequence of draws (which call gets which draw depends on the order the
// calls arrive in).

// errChaos is what a chaos failure wraps.
var errChaos = errors.New("fake: chaos failure")

// chaosMode is a Provider's chaos state. The zero value is off.
type chaosMode struct {
	mu       sync.Mutex
	rate     float64
	maxDelay time.Duration
	rnd      *rand.Rand
	failed   map[string]int
}

// SetChaos makes every call but Check wait up to maxDelay extra and then
// fail Transient with probability rate (0 to 1), drawn from a generator
// seeded with seed. A rate and maxDelay of 0 turn it off; Reset does too.
func (p *Provider) SetChaos(rate float64, maxDelay time.Duration, seed uint64) {
	p.chaos.mu.Lock()
	defer p.chaos.mu.Unlock()
	p.chaos.rate, p.chaos.maxDelay = min(max(rate, 0), 1), max(maxDelay, 0)
	p.chaos.rnd = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p.chaos.failed = map[string]int{}
}

// ChaosFailures returns how many calls of op chaos failed since SetChaos.
func (p *Provider) ChaosFailures(op string) int {
	p.chaos.mu.Lock()
	defer p.chaos.mu.Unlock()
	return p.chaos.failed[op]
}

// reset turns chaos off, for Reset.
func (c *chaosMode) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rate, c.maxDelay, c.rnd, c.failed = 0, 0, nil, nil
}

// draw returns one call's delay and whether it fails.
func (c *chaosMode) draw(op string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rnd == nil || op == provider.OpCheck {
		return 0, false
	}
	var delay time.Duration
	if c.maxDelay > 0 {
		delay = time.Duration(c.rnd.Int64N(int64(c.maxDelay) + 1))
	}
	fail := c.rnd.Float64() < c.rate
	if fail {
		c.failed[op]++
	}
	return delay, fail
}

// applyChaos is the chaos step of a call's prologue: the delay, then the
// failure, if the draw says so.
func (p *Provider) applyChaos(ctx context.Context, op string) error {
	delay, fail := p.chaos.draw(op)
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return provider.CtxErr(ctx, p.name, op)
		}
	}
	if fail {
		return p.fail(op, provider.ErrTransient, errChaos)
	}
	return nil
}
