package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// TestProviderClientRatePolicy: item 10, "an explicit, documented client
// rate policy for the kubernetes provider's client". The provider's client
// has no client-side limit unless the entry sets clientQPS (as the
// manager's has none unless --kube-api-qps sets one), whatever the cluster
// config carried: ctrl.GetConfig's QPS -1, or a kubeconfig's own limiter.
func TestProviderClientRatePolicy(t *testing.T) {
	kubeconfigsOwn := func() *rest.Config {
		return &rest.Config{QPS: 100, Burst: 200, RateLimiter: flowcontrol.NewTokenBucketRateLimiter(100, 200)}
	}
	for _, tc := range []struct {
		what      string
		raw       string
		rc        *rest.Config
		qps       float32 // 0: no limiter
		wantBurst int
	}{
		// At Karpenter's 200/300, the earlier default, a wave of
		// 1,000 Proxies waited on the limiter: 4.6x the API server's own
		// time to come up, 7.0x to go (docs/performance.md).
		{"defaults over ctrl.GetConfig's -1: none", "", &rest.Config{QPS: -1}, 0, 0},
		{"defaults over a kubeconfig's own limiter: none", "", kubeconfigsOwn(), 0, 0},
		{"the entry's values", `{"clientQPS": 7.5, "clientBurst": 9}`, &rest.Config{QPS: -1}, 7.5, 9},
		{"the entry's rate alone, over a kubeconfig's own limiter", `{"clientQPS": 3}`, kubeconfigsOwn(), 3, DefaultClientBurst},
	} {
		t.Run(tc.what, func(t *testing.T) {
			cfg, errs := Parse([]byte(tc.raw), field.NewPath("kubernetes"))
			if tc.raw == "" {
				cfg, errs = Parse(nil, field.NewPath("kubernetes"))
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			tc.rc.Host = "https://127.0.0.1:1" // never dialled
			p, err := newWithConfig(testProviderName, cfg, provider.Options{InstallationID: "rate"}, tc.rc)
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.clientFor()
			if err != nil {
				t.Fatal(err)
			}
			rl := c.CoreV1().RESTClient().GetRateLimiter()
			if tc.qps == 0 {
				if rl != nil {
					t.Fatalf("the provider's client has a client-side limit of %v/s, want none", rl.QPS())
				}
				return
			}
			if rl == nil {
				t.Fatal("the provider's client has no client-side rate limiter")
			}
			if rl.QPS() != tc.qps {
				t.Errorf("the provider's client runs at %v QPS, want %v", rl.QPS(), tc.qps)
			}
			// The burst is what a fresh bucket lets through at once.
			n := 0
			for rl.TryAccept() {
				n++
				if n > 10000 {
					break
				}
			}
			if n < tc.wantBurst || n > tc.wantBurst+1 {
				t.Errorf("a fresh bucket let %d requests through at once, want the burst %d", n, tc.wantBurst)
			}
		})
	}
}

func TestClientRateLimitValidation(t *testing.T) {
	for raw, want := range map[string]string{
		`{"clientQPS": -1}`:                   "kubernetes.clientQPS: Invalid value: -1: must not be negative: leave it out for no client-side limit",
		`{"clientQPS": 5, "clientBurst": -2}`: "kubernetes.clientBurst: Invalid value: -2: must be at least 1",
		`{"clientBurst": 20}`:                 "kubernetes.clientBurst: Invalid value: 20: is the burst of a limit: set clientQPS too",
		`{"clientQPS": "x"}`:                  "kubernetes.clientQPS",
	} {
		_, errs := Parse([]byte(raw), field.NewPath("kubernetes"))
		if !strings.Contains(errs.ToAggregate().Error(), want) {
			t.Errorf("%s: errors %v, want %q", raw, errs, want)
		}
	}
}

// The health check has its own client-side limit: with the workload's
// limiter drained (a create or delete wave), Check still reads the API
// server, and reports it Healthy, within its timeout. It shared the
// workload's limiter before, and in make bench-fleet's 1,000-Proxy run
// ProviderHealth said Unreachable ("client rate limiter Wait ... would
// exceed context deadline") while the API server answered fine.
func TestCheckIsNotStarvedByTheWorkloadsLimiter(t *testing.T) {
	// One request every 100 s, no burst beyond it: the first call drains it.
	p := newAPIProvider(t, "inst", Config{ClientQPS: 0.01, ClientBurst: 1}, nil)
	ctx := context.Background()
	if _, err := p.Get(ctx, "default/proxy-drains-the-limiter"); err != nil && !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("the draining Get: %v", err)
	}
	// The workload's next request would wait about 100 s.
	waiting, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := p.Get(waiting, "default/proxy-waits")
	cancel()
	if err == nil || errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("a Get behind the drained limiter answered (%v): the limiter is not drained, the test proves nothing", err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if res := p.Check(checkCtx); !res.Healthy {
		t.Errorf("Check with the workload's limiter drained = %+v, want Healthy", res)
	}
}
