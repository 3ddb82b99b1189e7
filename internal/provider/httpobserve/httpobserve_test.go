package httpobserve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A request under a span gets a child span and a log line; one outside any
// span gets the log line and no span; the query is never logged.
func TestTransportSpansOnlyUnderAParentAndLogsEachRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var logs strings.Builder
	log := funcr.New(func(_, args string) { logs.WriteString(args + "\n") }, funcr.Options{Verbosity: 1})
	c := &http.Client{Transport: Transport(http.DefaultTransport, "test api call", tp)}

	get := func(ctx context.Context) {
		t.Helper()
		req, err := http.NewRequestWithContext(logr.NewContext(ctx, log), http.MethodGet, srv.URL+"/v1/things?token=SECRET", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	get(context.Background())
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans without a parent, want 0", n)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "provider.create")
	get(ctx)
	parent.End()
	var child sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "HTTP GET" {
			child = s
		}
	}
	if child == nil || child.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("no HTTP GET child of the operation span: %v", rec.Ended())
	}
	if got := strings.Count(logs.String(), `"test api call"`); got != 2 {
		t.Fatalf("%d log lines, want 2:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), `"status"=418`) || strings.Contains(logs.String(), "SECRET") {
		t.Fatalf("log lines:\n%s", logs.String())
	}
}

func TestOpRidesOnTheContext(t *testing.T) {
	ctx := context.Background()
	if op := OpOf(ctx); op != "" {
		t.Errorf("OpOf(no op) = %q, want empty", op)
	}
	if op := OpOf(WithOp(WithOp(ctx, "get"), OpCreateStep)); op != OpCreateStep {
		t.Errorf("OpOf = %q, want the innermost %q", op, OpCreateStep)
	}
}
