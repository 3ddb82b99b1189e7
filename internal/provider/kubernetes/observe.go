package kubernetes

import (
	"context"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Logging tiers: V(1) one line per operation outcome and one
// "kubernetes api call" line per API request, V(2) detail (the instance
// spec, objects left alone). CloudInit is never passed to a logger: nothing
// in this package reads it. Request and response bodies are never logged.

// logger is the call's logger: the method boundary (provider.WithBoundary,
// applied by the registry) has named it and tagged it with the provider,
// and writes each call's outcome line.
func (p *Provider) logger(ctx context.Context) logr.Logger {
	return logr.FromContextOrDiscard(ctx)
}

// observeTransport wraps the client's transport (httpobserve): one
// "kubernetes api call" line and one parent-gated "HTTP <METHOD>" span per
// API request.
func (p *Provider) observeTransport(rt http.RoundTripper) http.RoundTripper {
	return httpobserve.Transport(rt, "kubernetes api call", p.tracerProvider)
}

// roundTripFunc is httpobserve's, for this package's tests.
type roundTripFunc = httpobserve.RoundTripFunc
