package health

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// MetricProviderHealthy is the gauge's name.
const MetricProviderHealthy = "egress_proxy_provider_healthy"

// providerHealthy is package-global because a registry accepts a
// collector once; every Loop in the process writes its own providers'
// series.
var providerHealthy = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: MetricProviderHealthy,
	Help: "1 when the provider's last health check found its backend healthy, 0 when not; absent for providers that cannot be checked.",
}, []string{"provider", "type"})

func init() {
	metrics.Registry.MustRegister(providerHealthy)
}

// setGauge records a checked provider. A reload can change an entry's
// type under the same name; the series under the old type goes, and only
// then, so a scrape never misses a series that stays.
func setGauge(name, typ, oldTyp string, healthy bool) {
	if oldTyp != "" && oldTyp != typ {
		dropGauge(name)
	}
	v := 0.0
	if healthy {
		v = 1
	}
	providerHealthy.WithLabelValues(name, typ).Set(v)
}

// dropGauge removes every series of the provider.
func dropGauge(name string) {
	providerHealthy.DeletePartialMatch(prometheus.Labels{"provider": name})
}
