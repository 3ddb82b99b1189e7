package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

const uid = "0b6f3c1e-7d2a-4c55-9e1f-3a8b2c4d5e6f"

var req = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "web"}}

// everyCall is a reconciler that makes one call of each kind, the way the
// Proxy reconciler does: its own logger values, then WithProxy.
func everyCall(t *testing.T, e *registry.Entry, id *string) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, r reconcile.Request) (reconcile.Result, error) {
		log := logr.FromContextOrDiscard(ctx).WithValues("via", "reconciler")
		ctx = logr.NewContext(ctx, log)
		log.Info("reconciling")
		ctx = telemetry.WithProxy(ctx, r.Namespace, r.Name, uid)
		inst, err := e.Provider.Create(ctx, createRequest(uid))
		if err != nil {
			t.Fatal(err)
		}
		*id = inst.ID
		if _, err := e.Provider.Get(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Provider.ListByTag(ctx); err != nil {
			t.Fatal(err)
		}
		if res := e.Checker.Check(ctx); !res.Healthy {
			t.Fatalf("check: %+v", res)
		}
		if err := e.Provider.Delete(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	})
}

func TestReconcileSpanParentsProviderSpans(t *testing.T) {
	rec, tp := newRecorder()
	e, _, _ := newEntry(t, tp)
	var logs logLines
	var id string
	r := telemetry.Reconciler(tp, "Proxy", everyCall(t, e, &id))

	ctx := logr.NewContext(context.Background(), logs.logger())
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}

	spans := rec.Ended()
	if len(spans) != 6 {
		t.Fatalf("spans %v, want the reconcile and 5 provider spans", spanNames(spans))
	}
	root := spanNamed(t, spans, "reconcile Proxy")
	if root.Parent().IsValid() {
		t.Errorf("reconcile span has a parent %v", root.Parent())
	}
	wantAttrs(t, root, map[string]string{"proxy.namespace": "team-a", "proxy.name": "web", "proxy.uid": uid, "reconcile.requeue_after_seconds": "2"})
	if root.Status().Code != codes.Unset {
		t.Errorf("reconcile span status %v", root.Status())
	}

	for _, tc := range []struct {
		span string
		id   string // "" when the operation takes no ID
	}{
		{"provider.create", id}, // the ID Create returned
		{"provider.get", id},
		{"provider.delete", id},
		{"provider.list", ""},
		{"provider.check", ""},
	} {
		s := spanNamed(t, spans, tc.span)
		if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s: parent %v, want the reconcile span %v", tc.span, s.Parent(), root.SpanContext())
		}
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: kind %v, want client", tc.span, s.SpanKind())
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("%s: status %v, want unset", tc.span, s.Status())
		}
		wantAttrs(t, s, map[string]string{
			"provider.name": e.Name, "provider.type": "fake",
			"proxy.namespace": "team-a", "proxy.name": "web", "proxy.uid": uid,
			"provider.instance.id": tc.id, "error.class": "none",
		})
		if s.InstrumentationScope().Name != telemetry.ScopeName {
			t.Errorf("%s: scope %q", tc.span, s.InstrumentationScope().Name)
		}
	}
	wantAttrs(t, spanNamed(t, spans, "provider.create"), map[string]string{"provider.instance.name": "proxy-team-a-web-1a2b3c", "provider.instance.state": "Running"})
	wantAttrs(t, spanNamed(t, spans, "provider.get"), map[string]string{"provider.instance.state": "Running"})
	wantAttrs(t, spanNamed(t, spans, "provider.list"), map[string]string{"provider.instance.count": "1"})
	wantAttrs(t, spanNamed(t, spans, "provider.check"), map[string]string{"provider.check.healthy": "true", "provider.check.reason": provider.ReasonHealthy})

	// Log lines: the reconciler's carry the reconcile span, the provider's
	// (and the boundary's outcome lines) their operation span, each ID once,
	// the values added in between survive, and the caller is still the line
	// that logged.
	for _, tc := range []struct{ msg, span, file string }{
		{"reconciling", "reconcile Proxy", "decorate_test.go"},
		{"fake instance read", "provider.get", "ops.go"},
		{"fake instances listed", "provider.list", "ops.go"},
		{"fake delete", "provider.delete", "ops.go"},
		// The registry's method boundary writes the outcome lines.
		{"create done", "provider.create", "boundary.go"},
		{"get done", "provider.get", "boundary.go"},
	} {
		line, raw := logs.find(t, tc.msg)
		s := spanNamed(t, spans, tc.span)
		if line["traceID"] != s.SpanContext().TraceID().String() || line["spanID"] != s.SpanContext().SpanID().String() {
			t.Errorf("%q: traceID=%v spanID=%v, want those of %s (%s %s)", tc.msg, line["traceID"], line["spanID"],
				tc.span, s.SpanContext().TraceID(), s.SpanContext().SpanID())
		}
		if strings.Count(raw, `"spanID"`) != 1 || strings.Count(raw, `"traceID"`) != 1 {
			t.Errorf("%q: IDs repeated: %s", tc.msg, raw)
		}
		if line["via"] != "reconciler" {
			t.Errorf("%q: lost the reconciler's values: %s", tc.msg, raw)
		}
		if caller, _ := line["caller"].(map[string]any); caller == nil || caller["file"] != tc.file {
			t.Errorf("%q: caller %v, want %s", tc.msg, line["caller"], tc.file)
		}
	}
}

func TestErrorClassOnSpanAndMetrics(t *testing.T) {
	classes := []struct {
		err   error
		class string
	}{
		{provider.ErrNotFound, "NotFound"},
		{provider.ErrTransient, "Transient"},
		{provider.ErrPermanent, "Permanent"},
		{provider.ErrQuotaExceeded, "QuotaExceeded"},
		{errors.New("connection reset"), "Transient"}, // unclassified
	}
	calls := map[string]func(context.Context, provider.Provider) error{
		provider.OpCreate: func(ctx context.Context, p provider.Provider) error {
			_, err := p.Create(ctx, createRequest(uid))
			return err
		},
		provider.OpGet: func(ctx context.Context, p provider.Provider) error {
			_, err := p.Get(ctx, "fake/proxy-team-a-web-1a2b3c")
			return err
		},
		provider.OpDelete: func(ctx context.Context, p provider.Provider) error {
			return p.Delete(ctx, "fake/proxy-team-a-web-1a2b3c")
		},
		provider.OpList: func(ctx context.Context, p provider.Provider) error {
			_, err := p.ListByTag(ctx)
			return err
		},
	}
	for op, call := range calls {
		for _, c := range classes {
			t.Run(fmt.Sprintf("%s/%s/%v", op, c.class, c.err), func(t *testing.T) {
				rec, tp := newRecorder()
				e, fp, _ := newEntry(t, tp)
				fp.FailNext(op, c.err)
				err := call(context.Background(), e.Provider)
				if provider.ClassName(err) != c.class {
					t.Fatalf("err %v has class %s, want %s", err, provider.ClassName(err), c.class)
				}
				spans := rec.Ended()
				if len(spans) != 1 {
					t.Fatalf("spans %v", spanNames(spans))
				}
				s := spans[0]
				if s.Name() != "provider."+op {
					t.Errorf("span %q", s.Name())
				}
				if s.Status().Code != codes.Error || s.Status().Description != err.Error() {
					t.Errorf("status %+v, want Error %q", s.Status(), err.Error())
				}
				wantAttrs(t, s, map[string]string{"error.class": c.class, "provider.name": e.Name})
				if n := testutil.ToFloat64(telemetry.ProviderCalls.WithLabelValues(e.Name, "fake", op, c.class)); n != 1 {
					t.Errorf("calls{%s,%s} = %v, want 1", op, c.class, n)
				}
				if n := histogramCount(t, e.Name, op, c.class); n != 1 {
					t.Errorf("duration{%s,%s} has %d samples, want 1", op, c.class, n)
				}
			})
		}
	}
}

func TestCheckerIsSpannedAndCounted(t *testing.T) {
	rec, tp := newRecorder()
	e, fp, _ := newEntry(t, tp)
	if e.Checker == nil {
		t.Fatal("the decorated entry lost its Checker")
	}
	e.Checker.Check(context.Background())
	fp.SetCheckResult(provider.CheckResult{Healthy: false, Reason: provider.ReasonUnreachable, Message: "connection refused", Target: "fake"})
	if r := e.Checker.Check(context.Background()); r.Healthy || r.Reason != provider.ReasonUnreachable {
		t.Fatalf("the decorator changed the result: %+v", r)
	}

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("spans %v", spanNames(spans))
	}
	ok, bad := spans[0], spans[1]
	wantAttrs(t, ok, map[string]string{"error.class": "none", "provider.check.healthy": "true", "provider.name": e.Name, "provider.type": "fake"})
	if ok.Status().Code != codes.Unset {
		t.Errorf("healthy check status %v", ok.Status())
	}
	wantAttrs(t, bad, map[string]string{"error.class": "Unhealthy", "provider.check.healthy": "false", "provider.check.reason": "Unreachable"})
	if bad.Status().Code != codes.Error || bad.Status().Description != "Unreachable: connection refused" {
		t.Errorf("unhealthy check status %+v", bad.Status())
	}
	for _, class := range []string{"none", "Unhealthy"} {
		if n := testutil.ToFloat64(telemetry.ProviderCalls.WithLabelValues(e.Name, "fake", "check", class)); n != 1 {
			t.Errorf("calls{check,%s} = %v, want 1", class, n)
		}
	}
}

func TestMetricsCountsAndLabels(t *testing.T) {
	_, tp := newRecorder()
	e, fp, _ := newEntry(t, tp)
	ctx := context.Background()
	inst, err := e.Provider.Create(ctx, createRequest(uid))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := e.Provider.Get(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	fp.FailNext(provider.OpGet, provider.ErrNotFound)
	_, _ = e.Provider.Get(ctx, inst.ID)

	// Exactly these series, with these labels, in controller-runtime's
	// registry (what the manager serves).
	want := fmt.Sprintf(`
# HELP egress_proxy_provider_calls_total Provider calls, by configured provider, type, operation and error class (none on success).
# TYPE egress_proxy_provider_calls_total counter
egress_proxy_provider_calls_total{error_class="none",operation="create",provider=%[1]q,type="fake"} 1
egress_proxy_provider_calls_total{error_class="none",operation="get",provider=%[1]q,type="fake"} 3
egress_proxy_provider_calls_total{error_class="NotFound",operation="get",provider=%[1]q,type="fake"} 1
`, e.Name)
	if err := testutil.GatherAndCompare(ownSeries(e.Name), strings.NewReader(want), "egress_proxy_provider_calls_total"); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		op, class string
		n         uint64
	}{{"create", "none", 1}, {"get", "none", 3}, {"get", "NotFound", 1}, {"delete", "none", 0}} {
		if got := histogramCount(t, e.Name, c.op, c.class); got != c.n {
			t.Errorf("duration{%s,%s}: %d samples, want %d", c.op, c.class, got, c.n)
		}
	}
	if n, err := testutil.GatherAndCount(ownSeries(e.Name), "egress_proxy_provider_call_duration_seconds"); err != nil || n != 3 {
		t.Errorf("%d duration series (%v), want 3", n, err)
	}
}

func TestTracingOffRecordsMetricsOnly(t *testing.T) {
	tp := noop.NewTracerProvider()
	e, _, _ := newEntry(t, tp)
	var logs logLines
	ctx := logr.NewContext(context.Background(), logs.logger())
	if _, err := e.Provider.ListByTag(telemetry.WithProxy(ctx, "team-a", "web", uid)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(telemetry.ProviderCalls.WithLabelValues(e.Name, "fake", "list", "none")); n != 1 {
		t.Errorf("calls = %v, want 1", n)
	}
	if _, raw := logs.find(t, "fake instances listed"); strings.Contains(raw, "spanID") {
		t.Errorf("span IDs with tracing off: %s", raw)
	}
	inner := &countingReconciler{}
	if telemetry.Reconciler(tp, "Proxy", inner) != reconcile.Reconciler(inner) {
		t.Error("with tracing off the reconciler should be returned as is")
	}
}

type countingReconciler struct{ n int }

func (c *countingReconciler) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	c.n++
	return reconcile.Result{}, nil
}

func TestDecoratedEntryStillClosesAndUnwraps(t *testing.T) {
	_, tp := newRecorder()
	e, fp, reg := newEntry(t, tp)
	if e.Provider == provider.Provider(fp) {
		t.Fatal("the entry is not decorated")
	}
	if telemetry.Unwrap(e.Provider) != provider.Provider(fp) {
		t.Error("Unwrap does not return the fake")
	}
	reg.Close()
	if !fp.closed.Load() {
		t.Error("the registry no longer closes a decorated provider")
	}
}

func TestReconcileErrorMarksSpan(t *testing.T) {
	rec, tp := newRecorder()
	r := telemetry.Reconciler(tp, "Proxy", reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, errors.New("status write conflict")
	}))
	if _, err := r.Reconcile(context.Background(), req); err == nil {
		t.Fatal("the error was swallowed")
	}
	s := spanNamed(t, rec.Ended(), "reconcile Proxy")
	if s.Status().Code != codes.Error || s.Status().Description != "status write conflict" {
		t.Errorf("status %+v", s.Status())
	}
}

func TestStartSpanForBackgroundLoops(t *testing.T) {
	rec, tp := newRecorder()
	e, _, _ := newEntry(t, tp)
	var logs logLines
	ctx := logr.NewContext(context.Background(), logs.logger())

	ctx, span := telemetry.StartSpan(ctx, tp, "gc", attribute.String("provider.name", e.Name))
	logr.FromContextOrDiscard(ctx).Info("collecting")
	if _, err := e.Provider.ListByTag(ctx); err != nil {
		t.Fatal(err)
	}
	// With tracing off, StartSpan must hand back a span of its own: ending
	// it must not end the caller's span.
	_, offSpan := telemetry.StartSpan(ctx, nil, "nested")
	offSpan.End()
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("%d spans ended before the gc span, want only provider.list", n)
	}
	span.End()

	spans := rec.Ended()
	gc := spanNamed(t, spans, "gc")
	wantAttrs(t, gc, map[string]string{"provider.name": e.Name})
	if gc.Parent().IsValid() {
		t.Error("gc span has a parent")
	}
	if l := spanNamed(t, spans, "provider.list"); l.Parent().SpanID() != gc.SpanContext().SpanID() {
		t.Error("provider.list is not a child of the gc span")
	}
	if line, _ := logs.find(t, "collecting"); line["spanID"] != gc.SpanContext().SpanID().String() {
		t.Errorf("log line spanID %v, want the gc span's", line["spanID"])
	}
}

// TestSpanIDsKeepCallerFrame: the log wrapper reports the caller's line,
// not its own.
func TestSpanIDsKeepCallerFrame(t *testing.T) {
	_, tp := newRecorder()
	var logs logLines
	ctx := logr.NewContext(context.Background(), logs.logger())
	ctx, span := telemetry.StartSpan(ctx, tp, "caller")
	defer span.End()
	logr.FromContextOrDiscard(ctx).WithValues("k", "v").Info("here")

	line, _ := logs.find(t, "here")
	if caller, _ := line["caller"].(map[string]any); caller == nil || !strings.HasSuffix(fmt.Sprint(caller["file"]), "decorate_test.go") {
		t.Errorf("caller %v, want this test file", line["caller"])
	}
}
