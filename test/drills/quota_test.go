package drills

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// The reconciler's quota backoff (internal/controller/proxy_controller.go,
// init): per Proxy, 1 minute doubling to 30 minutes, reset when a call
// succeeds. A Proxy whose every Create is refused for quota is therefore
// tried at 0, 1, 3, 7, 15, 31 minutes...: never twice within a minute, and
// 1+⌊log2(W/1min + 1)⌋ times in a window of W. For N Proxies the backend
// sees at most N calls for Proxies in any minute and N·(1+⌊log2(W/1min+1)⌋)
// in W; besides them only the collector's listings (one per pass) and the
// health checks (one per interval), which do not grow with N.
const quotaBackoffBase = time.Minute

// quotaCallsBound is the most calls one Proxy makes in a window of w.
func quotaCallsBound(w time.Duration) int {
	return 1 + int(math.Floor(math.Log2(float64(w)/float64(quotaBackoffBase)+1)))
}

// proxyCalls are the calls made for Proxies (Create, Get, Delete); the
// listings are the collector's, one per pass per provider, and Check the
// health loop's, one per interval, whatever the number of Proxies.
func proxyCalls(c calls) int {
	return c[provider.OpCreate] + c[provider.OpGet] + c[provider.OpDelete]
}

// callSampler records the provider's Proxy calls every tick, so a drill
// can read the calls made in any window between two samples.
type callSampler struct {
	mu      sync.Mutex
	at      []time.Time
	counts  []int
	stopped chan struct{}
	cancel  context.CancelFunc
}

func sampleCalls(p *fake.Provider, every time.Duration) *callSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &callSampler{stopped: make(chan struct{}), cancel: cancel}
	record := func() {
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		s.counts = append(s.counts, proxyCalls(callsOf(p)))
		s.mu.Unlock()
	}
	record()
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				record()
				return
			case <-t.C:
				record()
			}
		}
	}()
	return s
}

func (s *callSampler) stop() {
	s.cancel()
	<-s.stopped
}

// maxInWindow is the most calls counted between two samples at most w
// apart.
func (s *callSampler) maxInWindow(w time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := 0
	for i := range s.at {
		for j := i + 1; j < len(s.at) && s.at[j].Sub(s.at[i]) <= w; j++ {
			best = max(best, s.counts[j]-s.counts[i])
		}
	}
	return best
}

// perMinute is the calls in each whole minute since the first sample.
func (s *callSampler) perMinute() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for i, next := 0, s.at[0].Add(time.Minute); ; next = next.Add(time.Minute) {
		j := i
		for j < len(s.at)-1 && !s.at[j+1].After(next) {
			j++
		}
		if j == i && s.at[len(s.at)-1].Before(next) {
			return out
		}
		out = append(out, s.counts[j]-s.counts[i])
		i = j
	}
}

// TestDrillQuota: the backend refuses every Create for quota under N
// Proxies for a window W, then the quota returns. During W the calls to
// the backend stay under the quota backoff's bound (above: N in any
// minute, N·(1+⌊log2(W/1min+1)⌋) in all); once the quota returns every
// Proxy converges, at its next backoff retry at the latest.
//
//	DRILLS=1 DRILL_PROXIES=200 DRILL_QUOTA_WINDOW=2m go test ./test/drills -run Quota -v
func TestDrillQuota(t *testing.T) {
	long(t)
	n := envInt(t, "DRILL_PROXIES", 50)
	window := envDuration(t, "DRILL_QUOTA_WINDOW", 2*time.Minute)

	f := newFleet(t, "drill-quota")
	f.start()
	p := f.provider()
	p.SetError(provider.OpCreate, provider.Errorf(provider.ErrQuotaExceeded, "fake: quota of instances exhausted"))

	sampler := sampleCalls(p, 5*time.Second)
	start := time.Now()
	f.createProxies("px", n)
	testenv.EventuallyNil(t, "every Proxy refused for quota once", func() error {
		if got := p.Calls(provider.OpCreate); got < n {
			return fmt.Errorf("%d of %d Proxies tried", got, n)
		}
		return nil
	})
	// The window is the fault's duration: nothing to await but time.
	time.Sleep(time.Until(start.Add(window)))
	sampler.stop()
	during := callsOf(p)
	p.SetError(provider.OpCreate, nil)
	lifted := time.Now()

	perProxy := quotaCallsBound(window)
	bound, minuteBound := n*perProxy, n
	listBound := int(window/f.opts.GCInterval) + 2
	busiest := sampler.maxInWindow(time.Minute)
	figure(t, "quota.proxies", n)
	figure(t, "quota.window", window)
	figure(t, "quota.backoff", "1m doubling to 30m per Proxy (internal/controller/proxy_controller.go)")
	figure(t, "quota.calls_during_window", during)
	figure(t, "quota.proxy_calls_during_window", fmt.Sprintf("%d (bound N*(1+floor(log2(W/1m+1))) = %d)", proxyCalls(during), bound))
	figure(t, "quota.proxy_calls_per_proxy", fmt.Sprintf("%.2f (bound %d)", float64(proxyCalls(during))/float64(n), perProxy))
	figure(t, "quota.proxy_calls_per_minute", strings.Trim(fmt.Sprint(sampler.perMinute()), "[]"))
	figure(t, "quota.proxy_calls_busiest_minute", fmt.Sprintf("%d (bound N = %d)", busiest, minuteBound))
	figure(t, "quota.gc_listings_during_window", fmt.Sprintf("%d (one per GC pass, every %s: bound %d)", during[provider.OpList], f.opts.GCInterval, listBound))
	figure(t, "quota.transient_backoff_would_allow_per_proxy", transientCallsIn(window))
	if got := proxyCalls(during); got > bound {
		t.Errorf("%d backend calls for %d Proxies out of quota in %s; the quota backoff allows at most %d", got, n, window, bound)
	}
	if busiest > minuteBound {
		t.Errorf("%d backend calls within one minute for %d Proxies out of quota; the quota backoff allows at most %d", busiest, n, minuteBound)
	}
	if got := during[provider.OpList]; got > listBound {
		t.Errorf("%d listings in %s; the collector lists once per pass, at most %d", got, window, listBound)
	}

	// The next retry of each Proxy is at most its last backoff away.
	waitWithin(t, 31*time.Minute, "every Proxy Ready once the quota returned", func() error { return f.allReady(n) })
	figure(t, "quota.time_to_all_ready_after_quota_returned", time.Since(lifted))
	testenv.EventuallyNil(t, "one instance per Proxy", f.accounted)
	f.deleteAll()
	waitWithin(t, 10*time.Minute, "every Proxy and instance gone", f.allGone)
}

// transientCallsIn is how many calls the Transient backoff (2 s doubling
// to 5 min) would make in w, for comparison.
func transientCallsIn(w time.Duration) int {
	n, at, wait := 1, time.Duration(0), 2*time.Second
	for at+wait <= w {
		at += wait
		n++
		wait = min(2*wait, 5*time.Minute)
	}
	return n
}
