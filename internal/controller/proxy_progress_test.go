package controller

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// progressingProvider reports a new progress on every read of a
// provisioning instance, as an image download counting MiB would.
type progressingProvider struct {
	*fake.Provider
	n atomic.Int64
}

func (p *progressingProvider) Get(ctx context.Context, id string) (provider.Instance, error) {
	inst, err := p.Provider.Get(ctx, id)
	if err == nil && inst.State == provider.StateProvisioning {
		inst.Progress = fmt.Sprintf("downloading image: %d/400 MiB", p.n.Add(1))
	}
	return inst, err
}

// TestProgressWritesAreBounded (issue 8): a Proxy polled every second for
// a minute while its provider's progress changes on every poll is written
// a bounded number of times (at most one per ProgressEvery, plus the
// transitions), and Ready's message shows the progress.
func TestProgressWritesAreBounded(t *testing.T) {
	for _, tc := range []struct {
		every     time.Duration
		maxWrites int
	}{
		{DefaultProgressEvery, 60/int(DefaultProgressEvery/time.Second) + 2},
		{time.Nanosecond, 62}, // no throttle: one write per poll, which the bound above excludes
	} {
		t.Run(tc.every.String(), func(t *testing.T) {
			entry, fp := fakeEntry("pool")
			pp := &progressingProvider{Provider: fp}
			entry.Provider = pp
			d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
			d.r.ProgressEvery = tc.every
			now := time.Unix(1_800_000_000, 0)
			d.r.progress.now = func() time.Time { return now }
			fp.SetProvisioningGets(1000)
			d.create(newProxy("web", "pool"))

			writes, last := 0, d.get("web").ResourceVersion
			for range 60 {
				d.reconcile("web")
				now = now.Add(time.Second)
				if rv := d.get("web").ResourceVersion; rv != last {
					writes, last = writes+1, rv
				}
			}
			px := d.get("web")
			if got := readyReason(px); got != "False/Provisioning" || !strings.Contains(conditionMessage(px), "downloading image: ") {
				t.Fatalf("Ready %s %q: want Provisioning with the progress", got, conditionMessage(px))
			}
			t.Logf("ProgressEvery %s: %d status writes in 60 polls over 60 s", tc.every, writes)
			if tc.every == DefaultProgressEvery && writes > tc.maxWrites {
				t.Errorf("%d status writes in 60 s of progress, want at most %d", writes, tc.maxWrites)
			}
			if tc.every != DefaultProgressEvery && writes < 55 {
				t.Errorf("without the throttle the test should see a write per poll, saw %d: it cannot tell the throttle works", writes)
			}
		})
	}
}
