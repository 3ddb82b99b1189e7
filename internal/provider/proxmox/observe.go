package proxmox

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Logging tiers (the project's, as gcp's): V(0) the insecureSkipTLSVerify
// warning; V(1) one outcome line per operation (written by the method
// boundary, provider.WithBoundary), one "proxmox api call" line per API
// request (httpobserve) and one per notable event (a task that failed, a
// lock waited out); V(2) detail (the resolved create parameters, without
// the user-data); V(5) the wire log: one "proxmox wire" line per request
// with its operation, method, path, query and the sizes of its bodies,
// never the bodies (the upload is the seed, which holds the user-data),
// never the Authorization header (the token; it is added below this
// layer's view and not read). Never logged anywhere: user-data, the token
// file's content, the CA.
//
// Spans: one "HTTP <METHOD>" child span per request under the operation
// span (httpobserve, parent-gated).

// wireVerbosity is the wire log's tier.
const wireVerbosity = 5

// Log lines.
const (
	apiCallLine  = "proxmox api call"
	wireLine     = "proxmox wire"
	insecureLine = "WARNING: pveproxy's TLS certificate is not verified (insecureSkipTLSVerify is set): anyone on the path can impersonate PVE and read the API token"
	taskFailLine = "proxmox task failed"
	lockWaitLine = "proxmox vm locked; waiting"
)

// logger is the call's logger: the method boundary has named it and
// tagged it with the provider.
func logger(ctx context.Context) logr.Logger { return logr.FromContextOrDiscard(ctx) }

// observeTransport wraps rt: the "proxmox api call" line and the span of
// every request (httpobserve), then the wire log.
func observeTransport(rt http.RoundTripper) http.RoundTripper {
	return httpobserve.Transport(wireLog(rt), apiCallLine, nil)
}

// wireLog writes the V(5) wire line of every request.
func wireLog(next http.RoundTripper) http.RoundTripper {
	return httpobserve.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		log := logger(req.Context()).V(wireVerbosity)
		if !log.Enabled() {
			return next.RoundTrip(req)
		}
		start := time.Now()
		resp, err := next.RoundTrip(req)
		kv := []any{"op", httpobserve.OpOf(req.Context()), "method", req.Method, "path", req.URL.Path,
			"query", req.URL.RawQuery, "requestBody", elided(req.ContentLength),
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
		log.Info(wireLine, append(kv, "status", resp.StatusCode, "responseBody", elided(n))...)
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

// setWire installs a RoundTripper wrapper under the instrumented transport
// (tests only); it drops the built client.
func (p *Provider) setWire(w func(http.RoundTripper) http.RoundTripper) {
	p.api.mu.Lock()
	p.api.wrap, p.api.hc = w, nil
	p.api.mu.Unlock()
}
