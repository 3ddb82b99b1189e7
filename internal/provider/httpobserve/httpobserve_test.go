package httpobserve

import (
	"context"
	"io"
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

// The wire log says what a request was without what it carried: no body
// (a request body may be user-data), no credential in the query.
func TestWireLogElidesBodiesAndCredentials(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":"SENTINEL-RESPONSE"}`))
	}))
	defer srv.Close()
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{Verbosity: WireVerbosity})
	ctx := WithOp(logr.NewContext(context.Background(), log), OpCreateStep)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/upload?token=SENTINEL-TOKEN&node=pve1", strings.NewReader("SENTINEL-USERDATA"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: WireLog(http.DefaultTransport, "test wire")}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != `{"data":"SENTINEL-RESPONSE"}` {
		t.Errorf("the caller read %q: the wire log must hand the body on", body)
	}
	if len(lines) != 1 {
		t.Fatalf("%d wire lines, want 1: %q", len(lines), lines)
	}
	line := lines[0]
	for _, want := range []string{`"msg"="test wire"`, `"op"="create.step"`, `"method"="POST"`, `"path"="/upload"`, `node=pve1`, `token=redacted`,
		`"requestBody"="elided 17 bytes"`, `"status"=200`, `"responseBody"="elided 28 bytes"`} {
		if !strings.Contains(line, want) {
			t.Errorf("wire line lacks %s: %s", want, line)
		}
	}
	if strings.Contains(line, "SENTINEL") {
		t.Errorf("wire line carries a body or a credential: %s", line)
	}
}
