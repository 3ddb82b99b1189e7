// Package clientlimit says what a client-side rate limit setting means for a
// client-go config, once for every client of the operator: the manager's
// (--kube-api-qps) and the kubernetes provider's (clientQPS). A positive
// rate is a token bucket of that rate and burst; zero or below is none, and
// the API server's priority and fairness does the throttling. Either way
// the setting replaces whatever limit the kubeconfig carried.
package clientlimit

import "k8s.io/client-go/rest"

// Apply returns a copy of cfg limited to qps requests per second with
// burst above it, or with no client-side limit when qps is not positive.
func Apply(cfg *rest.Config, qps float32, burst int) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	// A limiter carried in cfg would override QPS and Burst.
	cfg.RateLimiter = nil
	cfg.QPS, cfg.Burst = qps, burst
	if qps <= 0 {
		// client-go makes no limiter for a QPS below 0 (0 would mean its
		// default of 5).
		cfg.QPS = -1
	}
	return cfg
}
