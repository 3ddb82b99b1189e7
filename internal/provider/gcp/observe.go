package gcp

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Logging tiers (the seeds'): V(1) one outcome line per operation (written
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

// wireVerbosity is the wire log's tier.
const wireVerbosity = 5

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
	return httpobserve.Transport(wireLog(rt), apiCallLine, p.tracerProvider)
}

// wireLog writes the V(5) wire line of every request.
func wireLog(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		log := logr.FromContextOrDiscard(req.Context()).V(wireVerbosity)
		if !log.Enabled() {
			return next.RoundTrip(req)
		}
		start := time.Now()
		resp, err := next.RoundTrip(req)
		kv := []any{"op", httpobserve.OpOf(req.Context()), "method", req.Method, "path", req.URL.Path,
			"query", safeQuery(req.URL.Query()), "requestBody", elided(req.ContentLength),
			"duration", time.Since(start).Round(time.Millisecond)}
		if err != nil {
			log.Info(wireLine, append(kv, "error", err.Error())...)
			return resp, err
		}
		n := int64(-1)
		if resp.Body != nil {
			body, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body))
			if rerr == nil {
				n = int64(len(body))
			}
		}
		log.Info(wireLine, append(kv, "status", resp.StatusCode, "contentType", resp.Header.Get("Content-Type"),
			"responseBody", elided(n))...)
		return resp, err
	})
}

// elided describes a body by its size only.
func elided(n int64) string {
	switch {
	case n < 0:
		return "elided"
	case n == 0:
		return "none"
	}
	return "elided " + strconv.FormatInt(n, 10) + " bytes"
}

// safeQuery is the query without anything that could carry a credential.
func safeQuery(q url.Values) string {
	for k := range q {
		switch strings.ToLower(k) {
		case "key", "access_token", "token", "assertion":
			q.Set(k, "redacted")
		}
	}
	return q.Encode()
}

// roundTripFunc is httpobserve's, for this package.
type roundTripFunc = httpobserve.RoundTripFunc
