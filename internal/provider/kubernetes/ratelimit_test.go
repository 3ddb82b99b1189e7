package kubernetes

import (
	"testing"

	"k8s.io/client-go/rest"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// TestProviderClientRatePolicy: item 10, "an explicit, documented client
// rate policy for the kubernetes provider's client". ctrl.GetConfig, where
// the provider takes its cluster config from, sets QPS -1 (no client-side
// limit); the provider's client must run with its own limit all the same.
func TestProviderClientRatePolicy(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:1", QPS: -1} // as ctrl.GetConfig returns it
	p, err := newWithConfig(testProviderName, Config{}, provider.Options{InstallationID: "rate"}, rc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.clientFor()
	if err != nil {
		t.Fatal(err)
	}
	rl := c.CoreV1().RESTClient().GetRateLimiter()
	if rl == nil {
		t.Fatal("the provider's client has no client-side rate limiter")
	}
	if rl.QPS() != clientQPS {
		t.Errorf("the provider's client runs at %v QPS, want %v", rl.QPS(), float32(clientQPS))
	}
}
