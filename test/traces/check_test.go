package traces

import (
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
)

// A reconcile's trace as the operator exports it: the root with the
// Proxy's UID, a provider span, the backend's requests under it.
func goodTrace(traceID string) []otelcol.Span {
	return []otelcol.Span{
		{TraceID: traceID, SpanID: "r", Name: spanReconcileProxy, Attrs: map[string]string{"proxy.uid": "uid-1"}},
		{TraceID: traceID, SpanID: "c", ParentSpanID: "r", Name: "provider.create"},
		{TraceID: traceID, SpanID: "h1", ParentSpanID: "c", Name: "HTTP POST", Attrs: map[string]string{"url.full": "https://fake/instances"}},
		{TraceID: traceID, SpanID: "h2", ParentSpanID: "h1", Name: "HTTP GET"}, // a redirect's, under the request
	}
}

func TestCheck(t *testing.T) {
	backend := func(s otelcol.Span) bool { return strings.HasPrefix(s.Name, "HTTP ") }
	const secret = "SENTINEL-token"
	for _, tc := range []struct {
		name  string
		spans func() []otelcol.Span
		want  string // "" for no error
	}{
		{"a whole trace", func() []otelcol.Span { return goodTrace("t1") }, ""},
		{"a background round", func() []otelcol.Span {
			return append(goodTrace("t1"), otelcol.Span{TraceID: "t2", SpanID: "g", Name: "gc.collect"},
				otelcol.Span{TraceID: "t2", SpanID: "l", ParentSpanID: "g", Name: "provider.list_secondary"},
				otelcol.Span{TraceID: "t2", SpanID: "h", ParentSpanID: "l", Name: "HTTP GET"})
		}, ""},
		{"nothing received", func() []otelcol.Span { return nil }, "received no spans"},
		{"nothing of the Proxy received", func() []otelcol.Span {
			s := goodTrace("t1")
			s[0].Attrs["proxy.uid"] = "uid-2"
			return s
		}, "no trace of Proxy uid-1"},
		{"a background round cut by the shutdown", func() []otelcol.Span {
			// The check's provider span ended after the last export; its
			// request's span had been exported.
			return append(goodTrace("t1"), otelcol.Span{TraceID: "t2", SpanID: "h", ParentSpanID: "pc", Name: "HTTP GET"})
		}, ""},
		{"a provider span started without the request's context", func() []otelcol.Span {
			return append(goodTrace("t1"), otelcol.Span{TraceID: "t2", SpanID: "c", Name: "provider.get"},
				otelcol.Span{TraceID: "t2", SpanID: "h", ParentSpanID: "c", Name: "HTTP GET"})
		}, `its root is "provider.get"`},
		{"a parent never received", func() []otelcol.Span {
			s := goodTrace("t1")
			return append(s[:1], s[2:]...) // provider.create lost
		}, "which the collector never received"},
		{"two roots in a trace", func() []otelcol.Span {
			return append(goodTrace("t1"), otelcol.Span{TraceID: "t1", SpanID: "x", Name: spanReconcileProxy})
		}, "has 2 roots"},
		{"a backend span outside any provider span", func() []otelcol.Span {
			return append(goodTrace("t1"), otelcol.Span{TraceID: "t1", SpanID: "h3", ParentSpanID: "r", Name: "HTTP DELETE"})
		}, `backend span "HTTP DELETE"`},
		{"a secret in an attribute", func() []otelcol.Span {
			s := goodTrace("t1")
			s[2].Attrs["http.request.header.authorization"] = "Bearer " + secret
			return s
		}, "carries a secret in attribute http.request.header.authorization"},
		{"a secret in an error event", func() []otelcol.Span {
			s := goodTrace("t1")
			s[1].Events = []otelcol.Event{{Name: "exception", Attrs: map[string]string{"exception.message": "token " + secret + " refused"}}}
			return s
		}, "event exception attribute exception.message"},
		{"a secret in the status", func() []otelcol.Span {
			s := goodTrace("t1")
			s[1].StatusMessage = "401: " + secret
			return s
		}, "the status message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans := tc.spans()
			err := Check(spans, LifecycleOf(spans, "uid-1"), backend, []string{secret})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), secret):
				t.Fatalf("the error prints the secret: %v", err)
			}
		})
	}
}

// Only both ends make a lifecycle complete, and only the traces whose
// root names the Proxy's UID are its.
func TestLifecycleComplete(t *testing.T) {
	create := goodTrace("t1")
	del := goodTrace("t2")
	del[1].Name = "provider.delete"
	other := goodTrace("t3")
	other[0].Attrs = map[string]string{"proxy.uid": "uid-2"}
	other[1].Name = "provider.delete"
	if err := LifecycleOf(append(create, other...), "uid-1").Complete(); err == nil || !strings.Contains(err.Error(), "provider.delete") {
		t.Fatalf("another Proxy's delete completed it: %v", err)
	}
	l := LifecycleOf(append(append(create, del...), other...), "uid-1")
	if err := l.Complete(); err != nil || len(l.Traces) != 2 {
		t.Fatalf("%d traces, %v", len(l.Traces), err)
	}
}

// The background step's spans count only when they began after the
// create call ended and under it.
func TestBackgroundCreate(t *testing.T) {
	trace := func(stepStart int64, stepParent string) []otelcol.Span {
		s := goodTrace("t1")
		s[1].Start, s[1].End = 10, 20 // provider.create
		s[2].Start, s[2].End = 12, 15 // its foreground request
		s[3].Start, s[3].End = stepStart, stepStart+5
		s[3].ParentSpanID = stepParent
		return s
	}
	if n, err := LifecycleOf(trace(30, "c"), "uid-1").BackgroundCreate(); err != nil || n != 1 {
		t.Errorf("a step's request under provider.create: %d, %v", n, err)
	}
	if _, err := LifecycleOf(trace(16, "h1"), "uid-1").BackgroundCreate(); err == nil {
		t.Error("a request within the call counted as the background step's")
	}
	if _, err := LifecycleOf(trace(30, "r"), "uid-1").BackgroundCreate(); err == nil {
		t.Error("a request beside provider.create counted as its step's")
	}
}
