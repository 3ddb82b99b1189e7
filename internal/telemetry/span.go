package telemetry

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ScopeName is the instrumentation scope of every span this package starts.
const ScopeName = "github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"

// Attributes of reconcile spans besides <kind>.namespace and <kind>.name.
const (
	AttrReconcileID     = attribute.Key("reconcile.id")
	AttrRequeueAfterS   = attribute.Key("reconcile.requeue_after_seconds")
	spanReconcilePrefix = "reconcile "
)

// tracerOf returns tp's tracer, or nil when tp is nil or the no-op provider
// Setup returns with tracing off: callers then skip all span work.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return nil
	}
	return tp.Tracer(ScopeName)
}

// Reconciler wraps r so that each pass is one span, "reconcile <kind>",
// with the request's namespace and name as <kind>.namespace and
// <kind>.name (proxy.namespace, proxy.name for kind Proxy, the same keys
// as the provider spans) and controller-runtime's reconcileID. The span is
// in the ctx r receives, so provider calls made with it are its children,
// and ctx's logger carries its traceID and spanID. With tracing off r is
// returned as is.
func Reconciler(tp trace.TracerProvider, kind string, r reconcile.Reconciler) reconcile.Reconciler {
	tr := tracerOf(tp)
	if tr == nil {
		return r
	}
	k := strings.ToLower(kind)
	return &tracedReconciler{
		inner:  r,
		tracer: tr,
		name:   spanReconcilePrefix + kind,
		nsKey:  attribute.Key(k + ".namespace"),
		objKey: attribute.Key(k + ".name"),
	}
}

type tracedReconciler struct {
	inner         reconcile.Reconciler
	tracer        trace.Tracer
	name          string
	nsKey, objKey attribute.Key
}

func (r *tracedReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	attrs := []attribute.KeyValue{r.nsKey.String(req.Namespace), r.objKey.String(req.Name)}
	if id := controller.ReconcileIDFromContext(ctx); id != "" {
		attrs = append(attrs, AttrReconcileID.String(string(id)))
	}
	ctx, span := r.tracer.Start(ctx, r.name, trace.WithAttributes(attrs...))
	defer span.End()
	ctx = withLogIDs(ctx, span.SpanContext())

	res, err := r.inner.Reconcile(ctx, req)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	if res.RequeueAfter > 0 {
		span.SetAttributes(AttrRequeueAfterS.Float64(res.RequeueAfter.Seconds()))
	}
	return res, err
}

// StartSpan starts a span for work outside a reconcile pass (a garbage
// collection round, a health check round): its ctx's logger carries the
// span's traceID and spanID and provider calls made with it are its
// children. The caller ends the span. A nil tp is tracing off.
func StartSpan(ctx context.Context, tp trace.TracerProvider, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	tr := tracerOf(tp)
	if tr == nil {
		// Not the span in ctx: the caller ends what it gets, and must not
		// end a parent's span.
		return ctx, noop.Span{}
	}
	ctx, span := tr.Start(ctx, name, trace.WithAttributes(attrs...))
	return withLogIDs(ctx, span.SpanContext()), span
}
