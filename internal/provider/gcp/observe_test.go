package gcp

import (
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// Seed gap (gcp, tracing): "the SDK adds otelhttp itself; not
// parent-gated".
//
// Every API request is an "HTTP <METHOD>" child span of the operation span
// it serves, list pages included (the SDK builds those requests without
// the caller's ctx; the call registry gives it back), and a call made
// outside any span starts no trace of its own (the earlier provider's SDK spans were
// not parent-gated).
func TestGapSDKSpansAreNotParentGated(t *testing.T) {
	env := gcptest.New(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	p := newTestProvider(t, env, nil)
	p.tracerProvider = tp
	b := bounded(p)

	// Outside any span: no span at all.
	if _, err := b.ListByTag(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(t.Context(), formatID(testZone, "proxy-none")); err == nil {
		t.Fatal("Get of nothing succeeded")
	}
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans without a parent span", n)
	}

	ctx, parent := tp.Tracer("test").Start(t.Context(), "provider.list")
	if _, err := b.ListByTag(ctx); err != nil {
		t.Fatal(err)
	}
	parent.End()
	ctx, getSpan := tp.Tracer("test").Start(t.Context(), "provider.get")
	_, _ = b.Get(ctx, formatID(testZone, "proxy-none"))
	getSpan.End()

	byParent := map[string][]string{}
	for _, s := range sr.Ended() {
		if s.Parent().IsValid() {
			byParent[s.Parent().SpanID().String()] = append(byParent[s.Parent().SpanID().String()], s.Name())
		}
	}
	if got := byParent[parent.SpanContext().SpanID().String()]; len(got) != 1 || got[0] != "HTTP GET" {
		t.Errorf("children of provider.list: %v; want the aggregated list page as HTTP GET", got)
	}
	if got := byParent[getSpan.SpanContext().SpanID().String()]; len(got) != 1 || got[0] != "HTTP GET" {
		t.Errorf("children of provider.get: %v; want one HTTP GET", got)
	}
}

// The wire log is V(5): one line per request with the operation, path,
// query and the bodies' sizes, never a body; nothing of it at V(4).
func TestWireLogElidesPayloads(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	ctx, logs := logCtx(t)
	req := testRequest("wire")
	req.CloudInit = provider.Sensitive("#cloud-config\n# SENTINEL-wire-user-data\n")
	if _, err := b.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitStep(t, p, req.Name)
	text := logs.String()
	var wire []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, `"msg"="gcp wire"`) {
			wire = append(wire, l)
		}
	}
	if len(wire) < 4 {
		t.Fatalf("%d wire lines, want one per request:\n%s", len(wire), text)
	}
	var insert string
	for _, l := range wire {
		if !strings.Contains(l, `"level"=5`) {
			t.Errorf("wire line not at V(5): %s", l)
		}
		if strings.Contains(l, `"method"="POST"`) && strings.Contains(l, `/zones/us-central1-a/instances"`) {
			insert = l
		}
	}
	if !strings.Contains(insert, `"op"="create.step"`) || !strings.Contains(insert, `"requestBody"="elided `) || !strings.Contains(insert, "requestId=") {
		t.Errorf("insert's wire line: %q", insert)
	}
	for _, secret := range []string{"SENTINEL-wire-user-data", "Authorization", "Bearer", env.Tokens.Token(env.Email)} {
		if strings.Contains(text, secret) {
			t.Errorf("%q reached the log", secret)
		}
	}
	// At V(4) the wire tier is silent.
	quiet, qlogs := logCtxAt(t, 4)
	if _, err := b.ListByTag(quiet); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(qlogs.String(), "gcp wire") {
		t.Errorf("wire lines at V(4):\n%s", qlogs)
	}
}
