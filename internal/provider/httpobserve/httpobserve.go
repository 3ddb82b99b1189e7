// Package httpobserve is the observation every HTTP-speaking provider puts
// on its client's transport: one V(1) log line per API request with the
// logger of the request's ctx (the operation's), and one child span
// "HTTP <METHOD>" per request under the operation span. Spans are
// parent-gated: a request made outside any span starts no root trace of
// its own. Request and response bodies are never logged, nor the query
// (it may carry a token).
package httpobserve

import (
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
)

// Transport wraps rt. line is the log message ("kubernetes api call",
// "gcp api call"); tp is the tracer provider, nil for the global one.
func Transport(rt http.RoundTripper, line string, tp trace.TracerProvider) http.RoundTripper {
	logged := RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		kv := []any{"method", req.Method, "path", req.URL.Path, "duration", time.Since(start).Round(time.Millisecond)}
		if resp != nil {
			kv = append(kv, "status", resp.StatusCode)
		}
		if err != nil {
			kv = append(kv, "error", err.Error())
		}
		logr.FromContextOrDiscard(req.Context()).V(1).Info(line, kv...)
		return resp, err
	})
	opts := []otelhttp.Option{
		otelhttp.WithFilter(func(r *http.Request) bool {
			return trace.SpanContextFromContext(r.Context()).IsValid()
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "HTTP " + r.Method }),
	}
	if tp != nil {
		opts = append(opts, otelhttp.WithTracerProvider(tp))
	}
	return otelhttp.NewTransport(logged, opts...)
}

// RoundTripFunc is a function as an http.RoundTripper.
type RoundTripFunc func(*http.Request) (*http.Response, error)

func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
