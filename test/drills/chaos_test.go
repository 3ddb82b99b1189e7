package drills

import (
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestDrillChaos: 30% of the provider's calls fail Transient and every
// call takes 0 to 2 s extra (fake.SetChaos, seeded). Every Proxy still
// converges to Ready with exactly one instance, then every Proxy is
// deleted and nothing is left on the backend. Figures: the time to all
// Ready and to all gone, the calls made per Proxy in each phase.
//
// The delete phase has a tail: a deletion pass needs four calls to
// succeed (the shared instance and secondary listings, Delete, the
// confirming Get: 0.7^4 = 0.24), and each failed pass doubles the Proxy's
// deletion backoff (2 s to 30 s, DeleteBackoffCap), so the slowest of 200
// Proxies needs about 19 passes: 14.4 minutes measured with seed 1 (with
// the create path's 5-minute cap it was 35 to 60). The bound allows for it.
//
//	DRILLS=1 DRILL_PROXIES=200 DRILL_SEED=1 go test ./test/drills -run Chaos -v
func TestDrillChaos(t *testing.T) {
	long(t)
	n := envInt(t, "DRILL_PROXIES", 50)
	seed := envInt(t, "DRILL_SEED", 1)
	const rate, maxDelay = 0.3, 2 * time.Second

	f := newFleet(t, "drill-chaos")
	f.start()
	p := f.provider()
	p.SetChaos(rate, maxDelay, uint64(seed))
	figure(t, "chaos.proxies", n)
	figure(t, "chaos.fail_rate", rate)
	figure(t, "chaos.max_extra_delay", maxDelay)
	figure(t, "chaos.seed", seed)

	before := callsOf(p)
	start := time.Now()
	f.createProxies("px", n)
	waitWithin(t, 45*time.Minute, "every Proxy Ready under chaos", func() error { return f.allReady(n) })
	toReady := time.Since(start)
	// Ready is written once the instance runs; the backend must hold one
	// per Proxy, the recorded one, whatever the failures in between.
	testenv.EventuallyNil(t, "one instance per Proxy", f.accounted)
	created := callsOf(p).minus(before)
	// The create phase's figures come now, so a delete that fails still
	// reports them.
	figure(t, "chaos.time_to_all_ready", toReady)
	figure(t, "chaos.create_phase_calls", created)
	figure(t, "chaos.create_phase_calls_per_proxy", created.perProxy(n))
	figure(t, "chaos.failed_calls_create_phase", p.ChaosFailures(provider.OpCreate)+p.ChaosFailures(provider.OpGet)+p.ChaosFailures(provider.OpList))

	before = callsOf(p)
	start = time.Now()
	f.deleteAll()
	waitWithin(t, 30*time.Minute, "every Proxy and instance gone under chaos", f.allGone)
	toGone := time.Since(start)
	deleted := callsOf(p).minus(before)

	figure(t, "chaos.time_to_all_gone", toGone)
	figure(t, "chaos.delete_phase_calls", deleted)
	figure(t, "chaos.delete_phase_calls_per_proxy", deleted.perProxy(n))
	total := 0
	for _, op := range dataOps {
		total += p.ChaosFailures(op)
	}
	figure(t, "chaos.failed_calls_total", total)
	figure(t, "chaos.calls_total", created.data()+deleted.data())
	if total == 0 {
		t.Error("no call failed: the chaos knob did nothing")
	}
}
