package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
)

// traceBuilder makes spans for the table below: a reconcile trace with a
// provider call and its HTTP requests, as the operator emits them.
type traceBuilder struct {
	n     int
	spans []otelcol.Span
}

func (b *traceBuilder) id() string { b.n++; return fmt.Sprintf("%016x", b.n) }

func (b *traceBuilder) add(traceID, parent, name string, attrs map[string]string) otelcol.Span {
	s := otelcol.Span{TraceID: traceID, SpanID: b.id(), ParentSpanID: parent, Name: name,
		Start: int64(1_000_000 + b.n), Service: operatorService, Attrs: attrs}
	b.spans = append(b.spans, s)
	return s
}

var proxyAttrs = map[string]string{"proxy.namespace": "e2e-x", "proxy.name": "traced"}

func (b *traceBuilder) reconcile(traceID, rid string) otelcol.Span {
	return b.add(traceID, "", spanReconcileProxy, map[string]string{
		"proxy.namespace": "e2e-x", "proxy.name": "traced", "reconcile.id": rid})
}

func (b *traceBuilder) http(traceID, parent, method, path string) otelcol.Span {
	return b.add(traceID, parent, "HTTP "+method, map[string]string{"url.full": "https://10.96.77.1:443" + path})
}

// lifecycleSpans is a whole, well-formed lifecycle; break changes one
// thing in it.
func lifecycleSpans(breakIt func(b *traceBuilder, create, del otelcol.Span)) []otelcol.Span {
	b := &traceBuilder{}
	r1 := b.reconcile("t1", "r1")
	create := b.add("t1", r1.SpanID, spanProviderCreate, proxyAttrs)
	for _, kind := range []string{"configmaps", "services", "pods"} {
		b.http("t1", create.SpanID, "POST", "/api/v1/namespaces/e2e-x/"+kind)
	}
	b.http("t1", create.SpanID, "POST", "/apis/networking.k8s.io/v1/namespaces/e2e-x/networkpolicies")
	r2 := b.reconcile("t2", "r2")
	get := b.add("t2", r2.SpanID, "provider.get", proxyAttrs)
	b.http("t2", get.SpanID, "GET", "/api/v1/namespaces/e2e-x/pods/traced")
	r3 := b.reconcile("t3", "r3")
	del := b.add("t3", r3.SpanID, spanProviderDelete, proxyAttrs)
	b.http("t3", del.SpanID, "GET", "/api/v1/namespaces/e2e-x/pods/traced")
	b.http("t3", del.SpanID, "DELETE", "/api/v1/namespaces/e2e-x/pods/traced")
	// Another Proxy's reconcile and a garbage collection round touching
	// this one: neither is this Proxy's reconcile trace.
	b.add("t4", "", spanReconcileProxy, map[string]string{"proxy.namespace": "e2e-x", "proxy.name": "other", "reconcile.id": "r4"})
	gc := b.add("t5", "", "gc.collect", nil)
	b.add("t5", gc.SpanID, "provider.delete_secondary", proxyAttrs)
	if breakIt != nil {
		breakIt(b, create, del)
	}
	return b.spans
}

func TestTraceTree(t *testing.T) {
	for _, tc := range []struct {
		name             string
		breakIt          func(b *traceBuilder, create, del otelcol.Span)
		completeErr, err string // substrings; "" for none
	}{
		{name: "whole lifecycle"},
		{
			name: "a provider call started from a fresh context: its own trace",
			breakIt: func(b *traceBuilder, _, _ otelcol.Span) {
				s := b.add("t6", "", "provider.get", proxyAttrs)
				b.http("t6", s.SpanID, "GET", "/api/v1/namespaces/e2e-x/pods/traced")
			},
			err: "split over traces",
		},
		{
			name: "a reconcile in flight: its provider call received, its root not yet",
			breakIt: func(b *traceBuilder, _, _ otelcol.Span) {
				b.add("t8", "00000000000000ff", "provider.list", proxyAttrs)
			},
			completeErr: "not received yet",
		},
		{
			name: "two reconciles in one trace",
			breakIt: func(b *traceBuilder, _, _ otelcol.Span) {
				i := slices.IndexFunc(b.spans, func(s otelcol.Span) bool { return s.Attrs["reconcile.id"] == "r2" })
				b.add("t2", b.spans[i].SpanID, spanReconcileProxy, map[string]string{
					"proxy.namespace": "e2e-x", "proxy.name": "traced", "reconcile.id": "r9"})
			},
			err: "two reconciles in one trace",
		},
		{
			name: "one reconcile's ID rooting two traces",
			breakIt: func(b *traceBuilder, _, _ otelcol.Span) {
				b.reconcile("t7", "r2")
			},
			err: "is the root of two traces",
		},
		{
			// Its parent is never received in its own trace: the test
			// waits for it, and fails by time-out with this message.
			name: "a span whose parent is in another trace",
			breakIt: func(b *traceBuilder, create, _ otelcol.Span) {
				b.add("t2", create.SpanID, "provider.get", proxyAttrs)
			},
			completeErr: "not received yet",
		},
		{
			name: "HTTP spans under the reconcile, not the provider call",
			breakIt: func(b *traceBuilder, _, _ otelcol.Span) {
				b.http("t2", b.spans[0].SpanID, "GET", "/api/v1/namespaces/e2e-x/pods/traced")
				// Same trace ID as the root for the parent to resolve.
				b.spans[len(b.spans)-1].TraceID = "t1"
			},
			err: "want a provider call",
		},
		{
			name: "a span from another service",
			breakIt: func(b *traceBuilder, _, _ otelcol.Span) {
				b.spans[1].Service = "something-else"
			},
			err: "from service",
		},
		{
			name: "provider.create renamed",
			breakIt: func(b *traceBuilder, create, _ otelcol.Span) {
				for i := range b.spans {
					if b.spans[i].SpanID == create.SpanID {
						b.spans[i].Name = "provider.created"
					}
				}
			},
			completeErr: `no "reconcile Proxy" > "provider.create" > "HTTP POST"`,
		},
		{
			name: "a create without the NetworkPolicy's POST",
			breakIt: func(b *traceBuilder, _, _ otelcol.Span) {
				for i, s := range b.spans {
					if strings.HasSuffix(s.Attrs["url.full"], "/networkpolicies") {
						b.spans = append(b.spans[:i], b.spans[i+1:]...)
						return
					}
				}
			},
			completeErr: "[configmaps pods services]",
		},
		{
			name: "no delete's HTTP DELETE",
			breakIt: func(b *traceBuilder, _, del otelcol.Span) {
				for i, s := range b.spans {
					if s.ParentSpanID == del.SpanID && s.Name == spanHTTPDelete {
						b.spans = append(b.spans[:i], b.spans[i+1:]...)
						return
					}
				}
			},
			completeErr: `no "reconcile Proxy" > "provider.delete" > "HTTP DELETE"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLifecycle(lifecycleSpans(tc.breakIt), "e2e-x", "traced")
			assertErr(t, "complete", l.complete(), tc.completeErr)
			if tc.completeErr != "" {
				return
			}
			assertErr(t, "check", l.check(operatorService), tc.err)
		})
	}
}

func assertErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("%s: %v, want nil", what, err)
	case want != "" && err == nil:
		t.Fatalf("%s: nil, want an error with %q", what, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("%s: %v, want an error with %q", what, err, want)
	}
}

// TestRequestKind names the API collection a request's URL addresses
// (otelcol's tests cover how the spans are parsed).
func TestRequestKind(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs map[string]string
		want  string
	}{
		{spanHTTPPost, map[string]string{"url.full": "https://x/api/v1/namespaces/n/pods"}, "pods"},
		{spanHTTPPost, map[string]string{"url.full": "https://x/apis/networking.k8s.io/v1/namespaces/n/networkpolicies/"}, "networkpolicies"},
		{spanHTTPDelete, map[string]string{"url.full": "https://x/api/v1/namespaces/n/services/traced"}, "services"},
		// Older semantic conventions.
		{spanHTTPDelete, map[string]string{"http.url": "https://x/api/v1/namespaces/n/configmaps/traced"}, "configmaps"},
		{spanHTTPPost, nil, "?"},
		{spanHTTPPost, map[string]string{"url.full": "%zz"}, "?"},
	} {
		if got := requestKind(otelcol.Span{Name: tc.name, Attrs: tc.attrs}); got != tc.want {
			t.Errorf("requestKind(%s %v) = %q, want %q", tc.name, tc.attrs, got, tc.want)
		}
	}
}
