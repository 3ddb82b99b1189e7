package proxmox

import (
	"context"
	"net/http"

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
	return httpobserve.Transport(httpobserve.WireLog(rt, wireLine), apiCallLine, nil)
}

// setWire installs a RoundTripper wrapper under the instrumented transport
// (tests only); it drops the built client.
func (p *Provider) setWire(w func(http.RoundTripper) http.RoundTripper) {
	p.api.mu.Lock()
	p.api.wrap, p.api.hc = w, nil
	p.api.mu.Unlock()
}
