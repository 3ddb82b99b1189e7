package kubernetes

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Each API request of a provider call is an "HTTP <METHOD>" span under the
// call's provider.* span (opened by the registry's decorator), and none is made
// without a parent.
func TestChildSpansNestUnderOperationSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	p := newAPIProvider(t, "install-trace", Config{}, nil)
	p.tracerProvider = tp
	ns := newNamespace(t, "trace", nil)

	// Without a parent span: no child spans at all.
	if _, err := p.Get(context.Background(), ns+"/missing"); err == nil {
		t.Fatal("Get of a missing Pod succeeded")
	}
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans without a parent", n)
	}

	// The operation span, as the registry's decorator opens it (the
	// decorator itself cannot be used here: the registry imports this
	// package).
	ctx, span := tp.Tracer("test").Start(context.Background(), "provider.create")
	req := provider.CreateRequest{Name: "proxy-trace-web-0123456789", Namespace: ns, ProxyName: "web", UID: "uid-trace", Port: 3128}
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	span.End()

	var op sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "provider.create" {
			op = s
		}
	}
	if op == nil {
		t.Fatal("no provider.create span")
	}
	children := 0
	for _, s := range sr.Ended() {
		if s.Name() == "HTTP GET" || s.Name() == "HTTP POST" {
			children++
			if s.Parent().SpanID() != op.SpanContext().SpanID() {
				t.Errorf("%s is not under %s", s.Name(), op.Name())
			}
		}
	}
	// A create reads, then makes the ConfigMap, the Service and the Pod.
	if children < 4 {
		t.Errorf("%d HTTP child spans under %s, want at least 4", children, op.Name())
	}
}
