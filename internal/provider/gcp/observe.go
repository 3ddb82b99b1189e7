package gcp

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Logging tiers (the earlier providers'): V(1) one outcome line per operation (written
// by the method boundary), one "gcp api call" line per API request
// (httpobserve) and one per notable event (an insert submitted, an
// operation failed, a zone left out of a listing); V(2) detail (the curated
// insert request, addresses, firewall rules); V(5) the wire log: one "gcp
// wire" line per request with its method, path, query and the sizes of its
// bodies, never the bodies (payloads are elided: a request body carries the
// user-data), never the Authorization header (it is added below this layer).
// Never logged anywhere: user-data, key files, tokens.
//
// Spans: one "HTTP <METHOD>" child span per request under the operation
// span (httpobserve, parent-gated: a request outside any span starts no
// trace), list pages included (callRegistry restores their ctx).

// Log lines.
const (
	apiCallLine   = "gcp api call"
	tokenCallLine = "gcp token call"
	wireLine      = "gcp wire"
)

// zoneListWarnings counts the zones an aggregated listing left out
// because they answered with a warning (UNREACHABLE): ListByTag and
// ListSecondary go on without them, so this (and the log line) is where a
// zone that blinds the collector shows.
var zoneListWarnings = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "egress_proxy_gcp_zone_list_warnings_total",
	Help: "Zones a gcp provider's instance listing left out because the API answered with a warning for them (the others were listed), by provider, zone and warning code.",
}, []string{"provider", "zone", "code"})

func init() { crmetrics.Registry.MustRegister(zoneListWarnings) }

// observeTransport wraps rt: the "gcp api call" line and the span of
// every request (httpobserve), then the wire log.
func (p *Provider) observeTransport(rt http.RoundTripper) http.RoundTripper {
	return httpobserve.Transport(httpobserve.WireLog(rt, wireLine), apiCallLine, p.tracerProvider)
}

// roundTripFunc is httpobserve's, for this package.
type roundTripFunc = httpobserve.RoundTripFunc
