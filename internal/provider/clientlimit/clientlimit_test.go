package clientlimit

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestApply builds a real client from each result: what counts is the
// limiter client-go makes, not the fields.
func TestApply(t *testing.T) {
	carried := flowcontrol.NewTokenBucketRateLimiter(100, 200)
	for _, tc := range []struct {
		what      string
		in        *rest.Config
		qps       float32
		burst     int
		wantQPS   float32 // 0: no limiter at all
		wantBurst int
	}{
		{"a limit", &rest.Config{}, 7.5, 9, 7.5, 9},
		{"none: zero", &rest.Config{}, 0, 9, 0, 0},
		{"none: negative", &rest.Config{}, -1, 0, 0, 0},
		{"none over a kubeconfig's limiter", &rest.Config{QPS: 100, Burst: 200, RateLimiter: carried}, -1, 0, 0, 0},
		{"a limit over a kubeconfig's limiter", &rest.Config{QPS: 100, Burst: 200, RateLimiter: carried}, 3, 4, 3, 4},
	} {
		t.Run(tc.what, func(t *testing.T) {
			tc.in.Host = "https://127.0.0.1:1" // never dialled
			before := *tc.in
			out := Apply(tc.in, tc.qps, tc.burst)
			if tc.in.QPS != before.QPS || tc.in.Burst != before.Burst || tc.in.RateLimiter != before.RateLimiter {
				t.Fatal("Apply changed the config it was given")
			}
			c, err := kubernetes.NewForConfig(out)
			if err != nil {
				t.Fatal(err)
			}
			rl := c.CoreV1().RESTClient().GetRateLimiter()
			if tc.wantQPS == 0 {
				if rl != nil {
					t.Fatalf("a client with a limiter of %v/s, want none", rl.QPS())
				}
				return
			}
			if rl == nil {
				t.Fatal("a client with no limiter")
			}
			if rl.QPS() != tc.wantQPS {
				t.Errorf("limiter at %v/s, want %v", rl.QPS(), tc.wantQPS)
			}
			n := 0
			for rl.TryAccept() && n <= 10000 {
				n++
			}
			if n < tc.wantBurst || n > tc.wantBurst+1 {
				t.Errorf("a fresh bucket let %d requests through at once, want the burst %d", n, tc.wantBurst)
			}
		})
	}
}
