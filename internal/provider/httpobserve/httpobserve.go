// Package httpobserve is the observation every HTTP-speaking provider puts
// on its client's transport: one V(1) log line per API request with the
// logger of the request's ctx (the operation's), and one child span
// "HTTP <METHOD>" per request under the operation span. Spans are
// parent-gated: a request made outside any span starts no root trace of
// its own. Request and response bodies are never logged; the V(1) line
// leaves the query out (it may carry a token), and the V(5) wire log
// (WireLog) gives it with credential-like keys redacted. The operation a
// request serves rides on its ctx (WithOp).
package httpobserve

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

// WireVerbosity is the wire log's tier.
const WireVerbosity = 5

// WireLog wraps next with the V(WireVerbosity) wire log: one line per
// request with its operation (WithOp), method, path, query (credential-like
// keys redacted), the sizes of its bodies (never the bodies: a request body
// may carry user-data) and the status. The Authorization header is never
// logged (a provider adds it below this layer or above it, never here).
func WireLog(next http.RoundTripper, line string) http.RoundTripper {
	return RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		log := logr.FromContextOrDiscard(req.Context()).V(WireVerbosity)
		if !log.Enabled() {
			return next.RoundTrip(req)
		}
		start := time.Now()
		resp, err := next.RoundTrip(req)
		kv := []any{"op", OpOf(req.Context()), "method", req.Method, "path", req.URL.Path,
			"query", safeQuery(req.URL.Query()), "requestBody", elided(req.ContentLength),
			"duration", time.Since(start).Round(time.Millisecond)}
		if err != nil {
			log.Info(line, append(kv, "error", err.Error())...)
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
		log.Info(line, append(kv, "status", resp.StatusCode, "contentType", resp.Header.Get("Content-Type"),
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
		case "key", "access_token", "token", "assertion", "password", "secret":
			q.Set(k, "redacted")
		}
	}
	return q.Encode()
}
