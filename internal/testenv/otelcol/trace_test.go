package otelcol

import (
	"reflect"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/codes"
)

// Two traces: A is a root with two children, one with a child of its own,
// plus a span whose parent was never received; B is a root linked to A's.
// The slice is not in start order, as a collector's output is not.
var (
	rootA  = Span{TraceID: "A", SpanID: "a1", Name: "reconcile", Start: 10, Attrs: map[string]string{"proxy.name": "web"}}
	child2 = Span{TraceID: "A", SpanID: "a3", ParentSpanID: "a1", Name: "provider.get", Start: 30}
	child1 = Span{TraceID: "A", SpanID: "a2", ParentSpanID: "a1", Name: "provider.create", Start: 20,
		Events: []Event{{Name: "exception", Attrs: map[string]string{"exception.message": "token hunter2 refused"}}}}
	grand = Span{TraceID: "A", SpanID: "a4", ParentSpanID: "a2", Name: "HTTP POST", Start: 21,
		Attrs:  map[string]string{"url.full": "https://api/pods", "http.response.status_code": "409"},
		Status: codes.Error, StatusMessage: "409 Conflict"}
	orphan = Span{TraceID: "A", SpanID: "a5", ParentSpanID: "ff", Name: "late", Start: 40}
	rootB  = Span{TraceID: "B", SpanID: "b1", Name: "gc.collect", Start: 5, Links: []Link{{TraceID: "A", SpanID: "a1"}}}
	// A span of B naming A's root as its parent: parents are looked up
	// within the span's own trace, so this one's is missing.
	crossB = Span{TraceID: "B", SpanID: "b2", ParentSpanID: "a1", Name: "cross", Start: 6}

	fixture = []Span{grand, orphan, rootB, child2, rootA, child1, crossB}
)

func names(spans []Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func TestByTraceAndTraceIDs(t *testing.T) {
	got := ByTrace(fixture)
	want := map[string][]Span{"A": {grand, orphan, child2, rootA, child1}, "B": {rootB, crossB}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ByTrace = %v, want %v", got, want)
	}
	if ids := TraceIDs(fixture); !slices.Equal(ids, []string{"B", "A"}) {
		t.Errorf("TraceIDs = %v, want [B A] (B started first)", ids)
	}
	if len(ByTrace(nil)) != 0 || len(TraceIDs(nil)) != 0 {
		t.Error("no spans, yet traces")
	}
}

func TestRootsAndChildren(t *testing.T) {
	twoRoots := append(slices.Clone(fixture), Span{TraceID: "A", SpanID: "a0", Name: "second root", Start: 1})
	for _, tc := range []struct {
		name string
		got  []Span
		want []string
	}{
		{"roots of A", Roots(fixture, "A"), []string{"reconcile"}},
		{"roots of B", Roots(fixture, "B"), []string{"gc.collect"}},
		{"a trace with two roots, by start", Roots(twoRoots, "A"), []string{"second root", "reconcile"}},
		{"roots of an unknown trace", Roots(fixture, "C"), nil},
		{"children by start", Children(fixture, rootA), []string{"provider.create", "provider.get"}},
		{"grandchild", Children(fixture, child1), []string{"HTTP POST"}},
		{"a leaf", Children(fixture, grand), nil},
		// crossB names a1 as parent, but in trace B.
		{"no children across traces", Children(fixture, Span{TraceID: "B", SpanID: "a1"}), []string{"cross"}},
		{"A's root has no child in B", Children([]Span{crossB}, rootA), nil},
	} {
		if got := names(tc.got); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAncestors(t *testing.T) {
	cycleX := Span{TraceID: "C", SpanID: "x", ParentSpanID: "y", Name: "x"}
	cycleY := Span{TraceID: "C", SpanID: "y", ParentSpanID: "x", Name: "y"}
	self := Span{TraceID: "C", SpanID: "s", ParentSpanID: "s", Name: "self"}
	for _, tc := range []struct {
		name      string
		spans     []Span
		of        Span
		want      []string
		wantWhole bool // the chain reaches a root
	}{
		{"grandchild: parent first, up to the root", fixture, grand, []string{"provider.create", "reconcile"}, true},
		{"child", fixture, child2, []string{"reconcile"}, true},
		{"the root itself", fixture, rootA, nil, true},
		{"parent never received", fixture, orphan, nil, false},
		{"parent in another trace only", fixture, crossB, nil, false},
		{"the chain broken higher up", []Span{grand, child1}, grand, []string{"provider.create"}, false},
		{"a cycle ends", []Span{cycleX, cycleY}, cycleX, []string{"y"}, false},
		{"its own parent", []Span{self}, self, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Ancestors(tc.spans, tc.of)
			if !slices.Equal(names(got), tc.want) {
				t.Errorf("Ancestors = %v, want %v", names(got), tc.want)
			}
			top := tc.of
			if len(got) > 0 {
				top = got[len(got)-1]
			}
			if whole := top.ParentSpanID == ""; whole != tc.wantWhole {
				t.Errorf("the last ancestor's parent is %q: whole chain %v, want %v", top.ParentSpanID, whole, tc.wantWhole)
			}
		})
	}
}

func TestTree(t *testing.T) {
	cycle := []Span{
		{TraceID: "C", SpanID: "r", Name: "root"},
		{TraceID: "C", SpanID: "x", ParentSpanID: "y", Name: "x", Start: 1},
		{TraceID: "C", SpanID: "y", ParentSpanID: "x", Name: "y", Start: 2},
	}
	for _, tc := range []struct {
		name    string
		spans   []Span
		traceID string
		attrs   []string
		want    string
	}{
		{
			name: "names only, children by start, the orphan after the root", spans: fixture, traceID: "A",
			want: `trace A
  reconcile
    provider.create
      HTTP POST (error: 409 Conflict)
    provider.get
  late [parent ff not received]
`,
		},
		{
			name: "chosen attributes where present, in the order asked", spans: fixture, traceID: "A",
			attrs: []string{"http.response.status_code", "proxy.name", "absent"},
			want: `trace A
  reconcile proxy.name=web
    provider.create
      HTTP POST http.response.status_code=409 (error: 409 Conflict)
    provider.get
  late [parent ff not received]
`,
		},
		{
			name: "the other trace", spans: fixture, traceID: "B",
			want: `trace B
  gc.collect
  cross [parent a1 not received]
`,
		},
		{
			name: "a cycle is printed once", spans: cycle, traceID: "C",
			want: `trace C
  root
  x [in a parent cycle]
    y
`,
		},
		{name: "no such trace", spans: fixture, traceID: "Z", want: "trace Z: no spans\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Tree(tc.spans, tc.traceID, tc.attrs...); got != tc.want {
				t.Errorf("Tree:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestSpansWith(t *testing.T) {
	for _, tc := range []struct {
		name       string
		substrings []string
		want       []string
	}{
		{"in an attribute value", []string{"api/pods"}, []string{"HTTP POST"}},
		{"in a name", []string{"gc."}, []string{"gc.collect"}},
		{"in an event's attribute (RecordError)", []string{"hunter2"}, []string{"provider.create"}},
		{"in an event's name", []string{"exception"}, []string{"provider.create"}},
		{"in the status message", []string{"Conflict"}, []string{"HTTP POST"}},
		{"any of several, in the spans' order", []string{"web", "late"}, []string{"late", "reconcile"}},
		{"nowhere", []string{"s3cr3t"}, nil},
		// Attribute keys are names the code chose, not data.
		{"not in attribute keys", []string{"proxy.name"}, nil},
		{"no substrings", nil, nil},
		// A secret that came out empty must not pass a "no span holds it"
		// check.
		{"an empty substring matches all", []string{""}, names(fixture)},
	} {
		if got := names(SpansWith(fixture, tc.substrings...)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: SpansWith(%q) = %v, want %v", tc.name, tc.substrings, got, tc.want)
		}
	}
}

// Holding names the places, sorted, and never the value.
func TestHolding(t *testing.T) {
	s := Span{Name: "provider.create token-a", StatusMessage: "401 token-a",
		Attrs:  map[string]string{"b": "x token-a", "a": "token-b", "c": "clean"},
		Events: []Event{{Name: "exception", Attrs: map[string]string{"exception.message": "token-b refused"}}, {Name: "token-a"}}}
	want := []string{"attribute a", "attribute b", "event exception attribute exception.message", "event token-a", "the name", "the status message"}
	if got := s.Holding("token-a", "token-b"); !slices.Equal(got, want) {
		t.Errorf("Holding = %q, want %q", got, want)
	}
	if got := s.Holding("absent"); got != nil {
		t.Errorf("Holding(absent) = %q", got)
	}
}
