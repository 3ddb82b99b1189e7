package telemetry_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// receiver keeps what an OTLP endpoint received, over HTTP or gRPC.
type receiver struct {
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
}

func (r *receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
}

// received is every span, each with its resource's attributes.
type received struct {
	span     *tracepb.Span
	resource map[string]string
	scope    string
}

func (r *receiver) spans() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []received
	for _, req := range r.reqs {
		for _, rs := range req.GetResourceSpans() {
			res := kvs(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, received{s, res, ss.GetScope().GetName()})
				}
			}
		}
	}
	return out
}

func kvs(attrs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range attrs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			m[kv.GetKey()] = strings.TrimSpace(v.String())
		}
	}
	return m
}

// ServeHTTP is the OTLP/HTTP binary protobuf endpoint, as a collector
// serves it.
func (r *receiver) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	if hr.Method != http.MethodPost || hr.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP traces request", http.StatusNotFound)
		return
	}
	if ct := hr.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = hr.Body
	if hr.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(hr.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(req)
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(resp))
}

// grpcReceiver is the OTLP/gRPC trace service over the same store.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	r *receiver
}

func (g grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// clearOTELEnv blanks every OTEL_* variable of the environment the tests
// run in, so that only the test's own settings count (empty is unset for
// Setup and the exporters).
func clearOTELEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
		}
	}
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
}

func TestOTLPHTTPRoundTrip(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv) // 127.0.0.1
	t.Cleanup(srv.Close)
	clearOTELEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	roundTrip(t, rcv)
}

func TestOTLPGRPCRoundTrip(t *testing.T) {
	rcv := &receiver{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, grpcReceiver{r: rcv})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	clearOTELEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String()) // http: plaintext
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	roundTrip(t, rcv)
}

// roundTrip exports a reconcile span with a provider.create child through
// Setup's provider and checks what the receiver decoded.
func roundTrip(t *testing.T, rcv *receiver) {
	var logs logLines
	ctx := logr.NewContext(context.Background(), logs.logger())
	tp, shutdown, err := telemetry.Setup(ctx, "egress-proxies-operator-test")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(*sdktrace.TracerProvider); !ok {
		t.Fatalf("Setup returned %T: export is off", tp)
	}
	if otel.GetTracerProvider() != tp {
		t.Error("Setup did not install the global tracer provider")
	}
	e, _, _ := newEntry(t, tp)
	r := telemetry.Reconciler(tp, "Proxy", reconcile.Func(func(ctx context.Context, r reconcile.Request) (reconcile.Result, error) {
		_, err := e.Provider.Create(telemetry.WithProxy(ctx, r.Namespace, r.Name, uid), createRequest(uid))
		return reconcile.Result{}, err
	}))
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	// Shutdown must flush: nothing is read before it returns, and nothing
	// waits for a timer.
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	got := rcv.spans()
	if len(got) != 2 {
		t.Fatalf("received %d spans, want 2", len(got))
	}
	byName := map[string]received{}
	for _, s := range got {
		byName[s.span.GetName()] = s
	}
	root, ok1 := byName["reconcile Proxy"]
	child, ok2 := byName["provider.create"]
	if !ok1 || !ok2 {
		t.Fatalf("received spans %v", byName)
	}
	if len(root.span.GetParentSpanId()) != 0 {
		t.Errorf("reconcile span has parent %x", root.span.GetParentSpanId())
	}
	if !bytes.Equal(child.span.GetParentSpanId(), root.span.GetSpanId()) || !bytes.Equal(child.span.GetTraceId(), root.span.GetTraceId()) {
		t.Errorf("provider.create parent %x trace %x, want span %x trace %x",
			child.span.GetParentSpanId(), child.span.GetTraceId(), root.span.GetSpanId(), root.span.GetTraceId())
	}
	if child.span.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("provider.create kind %v", child.span.GetKind())
	}
	for k, v := range map[string]string{
		"provider.name": e.Name, "provider.type": "fake", "proxy.namespace": "team-a", "proxy.name": "web",
		"proxy.uid": uid, "provider.instance.name": "proxy-team-a-web-1a2b3c", "error.class": "none",
	} {
		if a := kvs(child.span.GetAttributes()); a[k] != v {
			t.Errorf("provider.create %s = %q, want %q", k, a[k], v)
		}
	}
	if a := kvs(root.span.GetAttributes()); a["proxy.namespace"] != "team-a" || a["proxy.name"] != "web" {
		t.Errorf("reconcile span attributes %v", a)
	}
	for _, s := range got {
		if s.resource["service.name"] != "egress-proxies-operator-test" || s.resource["service.version"] == "" {
			t.Errorf("%s: resource %v", s.span.GetName(), s.resource)
		}
		if s.scope != telemetry.ScopeName {
			t.Errorf("%s: scope %q", s.span.GetName(), s.scope)
		}
	}
	// The exported IDs are the ones the log lines carried.
	if line, _ := logs.find(t, "fake instance ensured"); line["spanID"] != hex.EncodeToString(child.span.GetSpanId()) {
		t.Errorf("log spanID %v, exported span %x", line["spanID"], child.span.GetSpanId())
	}
}

func TestSetupOffIsNoop(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"unset":    {},
		"none":     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
		"disabled": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
	} {
		t.Run(name, func(t *testing.T) {
			clearOTELEnv(t)
			for k, v := range env {
				t.Setenv(k, v)
			}
			tp, shutdown, err := telemetry.Setup(context.Background(), "x")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := tp.(noop.TracerProvider); !ok {
				t.Errorf("tracer provider %T, want the no-op", tp)
			}
			if err := shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestSetupRejectsUnsupportedProtocol(t *testing.T) {
	clearOTELEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	tp, shutdown, err := telemetry.Setup(context.Background(), "x")
	if err == nil {
		t.Fatal("http/json accepted")
	}
	// Still usable, so a caller may log and run without traces.
	if _, ok := tp.(noop.TracerProvider); !ok || shutdown == nil {
		t.Errorf("got %T, shutdown nil: %t", tp, shutdown == nil)
	}
}
