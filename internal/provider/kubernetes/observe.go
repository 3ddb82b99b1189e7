package kubernetes

import (
	"context"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
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

// observeTransport wraps the client's transport: one V(1) log line per API
// request with the logger of the request's ctx (the operation's), and one
// child span "HTTP <METHOD>" per request under the operation span. Spans
// are parent-gated: a call made outside any span (none, in practice)
// starts no root trace of its own.
func (p *Provider) observeTransport(rt http.RoundTripper) http.RoundTripper {
	logged := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		kv := []any{"method", req.Method, "path", req.URL.Path, "duration", time.Since(start).Round(time.Millisecond)}
		if resp != nil {
			kv = append(kv, "status", resp.StatusCode)
		}
		if err != nil {
			kv = append(kv, "error", err.Error())
		}
		p.logger(req.Context()).V(1).Info("kubernetes api call", kv...)
		return resp, err
	})
	opts := []otelhttp.Option{
		otelhttp.WithFilter(func(r *http.Request) bool {
			return trace.SpanContextFromContext(r.Context()).IsValid()
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "HTTP " + r.Method }),
	}
	if p.tracerProvider != nil {
		opts = append(opts, otelhttp.WithTracerProvider(p.tracerProvider))
	}
	return otelhttp.NewTransport(logged, opts...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
