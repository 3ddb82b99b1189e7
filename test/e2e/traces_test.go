package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// traceBuilder makes spans for the table below: a reconcile trace with a
// provider call and its HTTP requests, as the operator emits them.
type traceBuilder struct {
	n     int
	spans []span
}

func (b *traceBuilder) id() string { b.n++; return fmt.Sprintf("%016x", b.n) }

func (b *traceBuilder) add(traceID, parent, name string, attrs map[string]string) span {
	s := span{TraceID: traceID, SpanID: b.id(), ParentSpanID: parent, Name: name,
		Start: fmt.Sprint(1_000_000 + b.n), Service: operatorService, Attrs: attrs}
	b.spans = append(b.spans, s)
	return s
}

var proxyAttrs = map[string]string{"proxy.namespace": "e2e-x", "proxy.name": "traced"}

func (b *traceBuilder) reconcile(traceID, rid string) span {
	return b.add(traceID, "", spanReconcileProxy, map[string]string{
		"proxy.namespace": "e2e-x", "proxy.name": "traced", "reconcile.id": rid})
}

func (b *traceBuilder) http(traceID, parent, method, path string) span {
	return b.add(traceID, parent, "HTTP "+method, map[string]string{"url.full": "https://10.96.77.1:443" + path})
}

// lifecycleSpans is a whole, well-formed lifecycle; break changes one
// thing in it.
func lifecycleSpans(breakIt func(b *traceBuilder, create, del span)) []span {
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
		breakIt          func(b *traceBuilder, create, del span)
		completeErr, err string // substrings; "" for none
	}{
		{name: "whole lifecycle"},
		{
			name: "a provider call started from a fresh context: its own trace",
			breakIt: func(b *traceBuilder, _, _ span) {
				s := b.add("t6", "", "provider.get", proxyAttrs)
				b.http("t6", s.SpanID, "GET", "/api/v1/namespaces/e2e-x/pods/traced")
			},
			err: "split over traces",
		},
		{
			name: "a reconcile in flight: its provider call received, its root not yet",
			breakIt: func(b *traceBuilder, _, _ span) {
				b.add("t8", "00000000000000ff", "provider.list", proxyAttrs)
			},
			completeErr: "not received yet",
		},
		{
			name: "two reconciles in one trace",
			breakIt: func(b *traceBuilder, _, _ span) {
				i := slices.IndexFunc(b.spans, func(s span) bool { return s.Attrs["reconcile.id"] == "r2" })
				b.add("t2", b.spans[i].SpanID, spanReconcileProxy, map[string]string{
					"proxy.namespace": "e2e-x", "proxy.name": "traced", "reconcile.id": "r9"})
			},
			err: "two reconciles in one trace",
		},
		{
			name: "one reconcile's ID rooting two traces",
			breakIt: func(b *traceBuilder, _, _ span) {
				b.reconcile("t7", "r2")
			},
			err: "is the root of two traces",
		},
		{
			// Its parent is never received in its own trace: the test
			// waits for it, and fails by time-out with this message.
			name: "a span whose parent is in another trace",
			breakIt: func(b *traceBuilder, create, _ span) {
				b.add("t2", create.SpanID, "provider.get", proxyAttrs)
			},
			completeErr: "not received yet",
		},
		{
			name: "HTTP spans under the reconcile, not the provider call",
			breakIt: func(b *traceBuilder, _, _ span) {
				b.http("t2", b.spans[0].SpanID, "GET", "/api/v1/namespaces/e2e-x/pods/traced")
				// Same trace ID as the root for the parent to resolve.
				b.spans[len(b.spans)-1].TraceID = "t1"
			},
			err: "want a provider call",
		},
		{
			name: "a span from another service",
			breakIt: func(b *traceBuilder, _, _ span) {
				b.spans[1].Service = "something-else"
			},
			err: "from service",
		},
		{
			name: "provider.create renamed",
			breakIt: func(b *traceBuilder, create, _ span) {
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
			breakIt: func(b *traceBuilder, _, _ span) {
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
			breakIt: func(b *traceBuilder, _, del span) {
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

// TestParseCollectorOutput reads the file exporter's OTLP JSON among the
// collector's own log lines.
func TestParseCollectorOutput(t *testing.T) {
	export := map[string]any{"resourceSpans": []any{map[string]any{
		"resource": map[string]any{"attributes": []any{
			map[string]any{"key": "service.name", "value": map[string]any{"stringValue": operatorService}}}},
		"scopeSpans": []any{map[string]any{"spans": []any{map[string]any{
			"traceId": "aa", "spanId": "bb", "parentSpanId": "cc", "name": "HTTP POST", "startTimeUnixNano": "17",
			"attributes": []any{
				map[string]any{"key": "url.full", "value": map[string]any{"stringValue": "https://x/api/v1/namespaces/n/pods"}},
				map[string]any{"key": "http.response.status_code", "value": map[string]any{"intValue": "201"}},
			},
		}}}},
	}}}
	line, err := json.Marshal(export)
	if err != nil {
		t.Fatal(err)
	}
	out := "2026-12-01T18:00:00.000Z\tinfo\tservice@v0.161.0/service.go:1\tEverything is ready.\n" + string(line) + "\n"
	spans, err := parseCollectorOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	want := span{TraceID: "aa", SpanID: "bb", ParentSpanID: "cc", Name: "HTTP POST", Start: "17", Service: operatorService,
		Attrs: map[string]string{"url.full": "https://x/api/v1/namespaces/n/pods", "http.response.status_code": "201"}}
	if len(spans) != 1 || fmt.Sprint(spans[0]) != fmt.Sprint(want) {
		t.Fatalf("parsed %+v, want [%+v]", spans, want)
	}
	if got := requestKind(spans[0]); got != "pods" {
		t.Errorf("requestKind = %q, want pods", got)
	}
	if _, err := parseCollectorOutput("{not json\n"); err == nil {
		t.Error("a broken JSON line parsed without error")
	}
}
