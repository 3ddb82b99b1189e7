package otelcol

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

// newTracerProvider exports spans as service over OTLP/HTTP with exporter
// options opts (none: from the OTEL_EXPORTER_OTLP_* variables, as the
// operator's), batched as the operator does; shut down when the test ends.
func newTracerProvider(t *testing.T, service string, opts ...otlptracehttp.Option) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// waitSpans polls the collector until it has written n spans, and returns
// them.
func waitSpans(t *testing.T, c *Collector, n int) []Span {
	t.Helper()
	var spans []Span
	testenv.EventuallyNil(t, fmt.Sprintf("the collector wrote %d spans", n), func() error {
		var err error
		if spans, err = c.Spans(); err != nil {
			return err
		}
		if len(spans) < n {
			return fmt.Errorf("%d spans so far: %v", len(spans), names(spans))
		}
		return nil
	})
	return spans
}

// TestCollectorReceivesSpans sends a small tree over OTLP/HTTP to a real
// collector, configured the operator's way (OTEL_EXPORTER_OTLP_ENDPOINT =
// Endpoint()), and reads it back whole.
func TestCollectorReceivesSpans(t *testing.T) {
	c := Start(t)
	if !strings.HasPrefix(c.Endpoint(), "http://127.0.0.1:") || c.TracesURL() != c.Endpoint()+"/v1/traces" {
		t.Fatalf("Endpoint() = %q, TracesURL() = %q, want http://127.0.0.1:PORT and that/v1/traces", c.Endpoint(), c.TracesURL())
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.Endpoint())
	tp := newTracerProvider(t, "otelcol-test")
	tr := tp.Tracer("otelcol-test")

	ctx := context.Background()
	ctxRoot, root := tr.Start(ctx, "root")
	ctxChild, child := tr.Start(ctxRoot, "child")
	_, grand := tr.Start(ctxChild, "grandchild", trace.WithAttributes(attribute.String("url.full", "https://api/pods"), attribute.Int("try", 3)))
	grand.SetStatus(codes.Error, "409 Conflict")
	grand.End()
	child.End()
	root.End()
	_, linked := tr.Start(ctx, "linked", trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: root.SpanContext()}))
	linked.End()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}

	spans := waitSpans(t, c, 4)
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4: %v", len(spans), names(spans))
	}
	got := map[string]Span{}
	for _, s := range spans {
		got[s.Name] = s
		if s.Service != "otelcol-test" {
			t.Errorf("%s: service.name %q, want otelcol-test", s.Name, s.Service)
		}
		if s.Start == 0 || s.End < s.Start {
			t.Errorf("%s: start %d, end %d", s.Name, s.Start, s.End)
		}
	}
	traceA, traceB := root.SpanContext().TraceID().String(), linked.SpanContext().TraceID().String()
	for _, w := range []struct {
		name          string
		sent          trace.Span
		trace, parent string
	}{
		{"root", root, traceA, ""},
		{"child", child, traceA, root.SpanContext().SpanID().String()},
		{"grandchild", grand, traceA, child.SpanContext().SpanID().String()},
		{"linked", linked, traceB, ""},
	} {
		s := got[w.name]
		if s.TraceID != w.trace || s.SpanID != w.sent.SpanContext().SpanID().String() || s.ParentSpanID != w.parent {
			t.Errorf("%s: trace %s span %s parent %q, want trace %s span %s parent %q",
				w.name, s.TraceID, s.SpanID, s.ParentSpanID, w.trace, w.sent.SpanContext().SpanID(), w.parent)
		}
	}
	g := got["grandchild"]
	if g.Attrs["url.full"] != "https://api/pods" || g.Attrs["try"] != "3" {
		t.Errorf("grandchild's attributes: %v", g.Attrs)
	}
	if g.Status != codes.Error || g.StatusMessage != "409 Conflict" {
		t.Errorf("grandchild's status: %v %q, want Error \"409 Conflict\"", g.Status, g.StatusMessage)
	}
	wantLink := []Link{{TraceID: traceA, SpanID: root.SpanContext().SpanID().String()}}
	if l := got["linked"].Links; !slices.Equal(l, wantLink) {
		t.Errorf("linked's links: %v, want %v", l, wantLink)
	}

	// The helpers on what a real collector wrote.
	if r := names(Roots(spans, traceA)); !slices.Equal(r, []string{"root"}) {
		t.Errorf("Roots = %v, want [root]", r)
	}
	if a := names(Ancestors(spans, g)); !slices.Equal(a, []string{"child", "root"}) {
		t.Errorf("Ancestors(grandchild) = %v, want [child root]", a)
	}
	tree := Tree(spans, traceA, "try")
	t.Logf("\n%s", tree)
	if want := "trace " + traceA + "\n  root\n    child\n      grandchild try=3 (error: 409 Conflict)\n"; tree != want {
		t.Errorf("Tree:\n%s\nwant:\n%s", tree, want)
	}
	if w := names(SpansWith(spans, "api/pods")); !slices.Equal(w, []string{"grandchild"}) {
		t.Errorf("SpansWith(api/pods) = %v, want [grandchild]", w)
	}
}

// TestSpansHoldOnlyWhatArrived: spans exported where no collector listens
// are not in Spans(), even once the collector has written later ones, so
// a check that reads "no such span" can fail.
func TestSpansHoldOnlyWhatArrived(t *testing.T) {
	c := Start(t)
	port, err := childproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	lost := newTracerProvider(t, "lost",
		otlptracehttp.WithEndpointURL(fmt.Sprintf("http://127.0.0.1:%d/v1/traces", port)),
		// Fail now rather than retry for a minute.
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
		otlptracehttp.WithTimeout(5*time.Second))
	ctx := context.Background()
	_, s := lost.Tracer("lost").Start(ctx, "lost span")
	s.End()
	if err := lost.ForceFlush(ctx); err == nil {
		t.Fatalf("exporting to 127.0.0.1:%d, where nothing listens, succeeded", port)
	}

	// The collector is up and writing: a span sent to it is read back, the
	// lost one still is not.
	delivered := newTracerProvider(t, "delivered", otlptracehttp.WithEndpointURL(c.TracesURL()))
	_, s = delivered.Tracer("delivered").Start(ctx, "delivered span")
	s.End()
	if err := delivered.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}
	spans := waitSpans(t, c, 1)
	if got := names(spans); !slices.Equal(got, []string{"delivered span"}) {
		t.Errorf("spans %v, want only [delivered span]", got)
	}
	if lostSpans := SpansWith(spans, "lost"); len(lostSpans) != 0 {
		t.Errorf("spans that never reached the collector: %v", lostSpans)
	}
}

// fatalRecorder is a testing.TB whose Fatal ends the calling goroutine
// and records the message, for testing what Start says when it fails.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

// startFailure runs Start and returns what it failed with.
func startFailure(t *testing.T) string {
	t.Helper()
	f := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(f)
	}()
	<-done
	if f.msg == "" {
		t.Fatal("Start succeeded, want it to fail")
	}
	return f.msg
}

func TestStartFailures(t *testing.T) {
	t.Run("no binary where build.sh puts it", func(t *testing.T) {
		t.Setenv(BinaryEnv, "")
		// build.sh path then names a binary in this empty cache.
		t.Setenv("OTELCOL_CACHE", t.TempDir())
		msg := startFailure(t)
		for _, want := range []string{"no OpenTelemetry Collector at", "`make test` builds it", "hack/tools/otelcol/build.sh"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q does not say %q", msg, want)
			}
		}
	})
	t.Run("OTELCOL names no file", func(t *testing.T) {
		t.Setenv(BinaryEnv, filepath.Join(t.TempDir(), "otelcol"))
		if msg := startFailure(t); !strings.Contains(msg, BinaryEnv+"=") {
			t.Errorf("message %q does not name %s", msg, BinaryEnv)
		}
	})
	t.Run("the collector exits at start: its log is shown", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "otelcol")
		script := "#!/bin/sh\necho 'error decoding config: bad receiver' >&2\nexit 1\n"
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv(BinaryEnv, bin)
		msg := startFailure(t)
		for _, want := range []string{"exited before listening on 127.0.0.1:", "error decoding config: bad receiver"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q does not say %q", msg, want)
			}
		}
	})
}
