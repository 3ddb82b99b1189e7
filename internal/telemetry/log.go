package telemetry

import (
	"context"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
)

// Log keys of the current span's IDs, as the OpenTelemetry log data model
// and most log backends name them.
const (
	LogKeyTraceID = "traceID"
	LogKeySpanID  = "spanID"
)

// withLogIDs returns ctx whose logger stamps every line with sc's trace and
// span IDs. ctx is returned as is when the span has no IDs (tracing off)
// or ctx holds no logger, so that tracing off costs nothing here.
func withLogIDs(ctx context.Context, sc trace.SpanContext) context.Context {
	if !sc.IsValid() {
		return ctx
	}
	l, err := logr.FromContext(ctx)
	if err != nil || l.GetSink() == nil {
		return ctx
	}
	return logr.NewContext(ctx, withSpanIDs(l, sc))
}

// withSpanIDs makes l stamp sc's IDs on every line. The IDs are kept in a
// sink wrapper rather than added with WithValues: a provider span opened
// under a reconcile span must replace the reconcile span's spanID, not add
// a second "spanID" key to the line, and the values added in between (the
// reconciler's provider=<name>) must survive.
func withSpanIDs(l logr.Logger, sc trace.SpanContext) logr.Logger {
	s := &spanSink{sc: sc}
	switch inner := l.GetSink().(type) {
	case *spanSink:
		s.inner = inner.inner // already one frame deeper
	case logr.CallDepthLogSink:
		// The wrapper is one more frame between the caller and the real
		// sink; without this zap would report this file as the caller.
		s.inner = inner.WithCallDepth(1)
	default:
		s.inner = inner
	}
	return l.WithSink(s)
}

// spanSink adds the span's IDs to every line of the sink it wraps. The IDs
// are formatted per line written, not per span: most provider calls write
// no line at the production verbosity.
type spanSink struct {
	inner logr.LogSink
	sc    trace.SpanContext
}

var (
	_ logr.CallDepthLogSink       = (*spanSink)(nil)
	_ logr.CallStackHelperLogSink = (*spanSink)(nil)
)

// Init does nothing: the wrapped sink was initialized with its own logger.
func (s *spanSink) Init(logr.RuntimeInfo) {}

func (s *spanSink) Enabled(level int) bool { return s.inner.Enabled(level) }

func (s *spanSink) Info(level int, msg string, kv ...any) {
	s.inner.Info(level, msg, s.ids(kv)...)
}

func (s *spanSink) Error(err error, msg string, kv ...any) {
	s.inner.Error(err, msg, s.ids(kv)...)
}

func (s *spanSink) ids(kv []any) []any {
	out := make([]any, 0, len(kv)+4)
	out = append(out, kv...)
	return append(out, LogKeyTraceID, s.sc.TraceID().String(), LogKeySpanID, s.sc.SpanID().String())
}

func (s *spanSink) WithValues(kv ...any) logr.LogSink {
	return &spanSink{inner: s.inner.WithValues(kv...), sc: s.sc}
}

func (s *spanSink) WithName(name string) logr.LogSink {
	return &spanSink{inner: s.inner.WithName(name), sc: s.sc}
}

func (s *spanSink) WithCallDepth(depth int) logr.LogSink {
	cd, ok := s.inner.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &spanSink{inner: cd.WithCallDepth(depth), sc: s.sc}
}

func (s *spanSink) GetCallStackHelper() func() {
	if h, ok := s.inner.(logr.CallStackHelperLogSink); ok {
		return h.GetCallStackHelper()
	}
	return func() {}
}
