package gc

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// A pass is one span, the parent of its provider calls' spans, so a trace
// shows what one collection did on one provider.
func TestPassSpanParentsProviderSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	w := newWorld(t, "install-trace", nil)
	w.c.TracerProvider = tp
	p := w.provider("traced", fake.NewBackend())
	w.providers.mu.Lock()
	for _, e := range w.providers.list {
		if e.Provider == p {
			telemetry.Decorate(tp)(e)
		}
	}
	w.providers.mu.Unlock()
	w.plant(p, "proxy-orphan-x", "uid-gone")
	w.clock.Step(grace + 1)
	if acts := w.collect().Actions; len(acts) != 1 {
		t.Fatalf("actions = %+v", acts)
	}

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		byName[s.Name()] = s
	}
	pass, ok := byName["gc.collect"]
	if !ok {
		t.Fatalf("no gc.collect span among %v", names(sr.Ended()))
	}
	for _, child := range []string{"provider.list", "provider.delete"} {
		s, ok := byName[child]
		if !ok {
			t.Fatalf("no %s span among %v", child, names(sr.Ended()))
		}
		if s.Parent().SpanID() != pass.SpanContext().SpanID() {
			t.Errorf("%s is not a child of gc.collect", child)
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, 0, len(spans))
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
