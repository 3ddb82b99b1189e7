package fake_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
)

// outcomes runs n Creates of fresh names and says which failed ("x") and
// which succeeded (".").
func outcomes(t *testing.T, p *fake.Provider, n int) string {
	t.Helper()
	out := make([]byte, n)
	for i := range n {
		_, err := p.Create(t.Context(), request(fmt.Sprintf("c%03d", i), fmt.Sprintf("u%d", i)))
		switch {
		case err == nil:
			out[i] = '.'
		default:
			wantClass(t, "chaos Create", err, provider.ErrTransient)
			out[i] = 'x'
		}
	}
	return string(out)
}

func TestChaosFailsAtItsRateReproducibly(t *testing.T) {
	const n = 200
	a, b := newFake(t), newFake(t)
	a.SetChaos(0.3, 0, 7)
	b.SetChaos(0.3, 0, 7)
	got, again := outcomes(t, a, n), outcomes(t, b, n)
	if got != again {
		t.Errorf("the same seed gave two sequences:\n%s\n%s", got, again)
	}
	failed := a.ChaosFailures(provider.OpCreate)
	// 200 draws at p=0.3: mean 60, sd 6.5; 30..90 is beyond 4 sd.
	if failed < 30 || failed > 90 {
		t.Errorf("%d of %d Creates failed at rate 0.3", failed, n)
	}
	if records := len(a.Backend().Records()); records != n-failed {
		t.Errorf("%d instances on the backend after %d successful Creates: a failed call must make nothing", records, n-failed)
	}
	c := newFake(t)
	c.SetChaos(0.3, 0, 8)
	if other := outcomes(t, c, n); other == got {
		t.Error("seeds 7 and 8 gave the same sequence")
	}
}

func TestChaosLeavesCheckAlone(t *testing.T) {
	p := newFake(t)
	p.SetChaos(1, 0, 1)
	if r := p.Check(t.Context()); !r.Healthy {
		t.Errorf("Check under chaos: %+v, want the set result (Healthy)", r)
	}
	if _, err := p.ListByTag(t.Context()); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("ListByTag at rate 1: %v, want Transient", err)
	}
}

func TestChaosDelayEndsWithTheCallsContext(t *testing.T) {
	p := newFake(t)
	p.SetChaos(0, time.Hour, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Get(ctx, fake.ID("web")); !errors.Is(err, provider.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Errorf("Get with an ended ctx during the chaos delay: %v, want Transient wrapping context.Canceled", err)
	}
}

func TestResetTurnsChaosOff(t *testing.T) {
	p := newFake(t)
	p.SetChaos(1, 0, 1)
	if _, err := p.ListByTag(t.Context()); err == nil {
		t.Fatal("ListByTag at rate 1 succeeded")
	}
	p.Reset()
	if got := outcomes(t, p, 20); got != "...................." {
		t.Errorf("after Reset: %s, want every call to succeed", got)
	}
	if n := p.ChaosFailures(provider.OpList); n != 0 {
		t.Errorf("ChaosFailures after Reset = %d, want 0", n)
	}
}
