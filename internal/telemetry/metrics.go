package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric label names, shared by both provider call metrics.
const (
	LabelProvider   = "provider"
	LabelType       = "type"
	LabelOperation  = "operation"
	LabelErrorClass = "error_class"
)

// ErrorClassUnhealthy is the error_class of a Check that reported an
// unhealthy backend: Check has no error, so it has no provider class.
const ErrorClassUnhealthy = "Unhealthy"

var providerLabels = []string{LabelProvider, LabelType, LabelOperation, LabelErrorClass}

var (
	// ProviderCalls counts every provider call by outcome class ("none" for
	// success, provider.ClassName otherwise).
	ProviderCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_provider_calls_total",
		Help: "Provider calls, by configured provider, type, operation and error class (none on success).",
	}, providerLabels)

	// ProviderCallDuration is the latency of every provider call. The
	// buckets span an in-process create (milliseconds) to a VM create that
	// waits for a remote backend (provider.CallBound, 10 s; the call
	// timeout, 1 min, past that).
	ProviderCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "egress_proxy_provider_call_duration_seconds",
		Help:    "Duration of provider calls, by configured provider, type, operation and error class (none on success).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900},
	}, providerLabels)
)

// Registered in init, like controller-runtime's own metrics, so that the
// manager's metrics endpoint serves them and a second registration (one per
// registry, one per test) cannot panic.
func init() {
	crmetrics.Registry.MustRegister(ProviderCalls, ProviderCallDuration)
}
