package otelcol

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/codes"
)

// byStart orders spans as they started, by span ID among equal starts, so
// that every rendering of the same spans is the same.
func byStart(a, b Span) int {
	return cmp.Or(cmp.Compare(a.Start, b.Start), strings.Compare(a.SpanID, b.SpanID))
}

// ByTrace groups spans by trace ID, each group in the order given.
func ByTrace(spans []Span) map[string][]Span {
	m := map[string][]Span{}
	for _, s := range spans {
		m[s.TraceID] = append(m[s.TraceID], s)
	}
	return m
}

// TraceIDs lists the traces among spans in the order their first span
// started.
func TraceIDs(spans []Span) []string {
	first := map[string]Span{}
	for _, s := range spans {
		if f, seen := first[s.TraceID]; !seen || byStart(s, f) < 0 {
			first[s.TraceID] = s
		}
	}
	ids := make([]string, 0, len(first))
	for id := range first {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return byStart(first[a], first[b]) })
	return ids
}

// Roots are the spans of trace traceID without a parent, by start. A whole
// trace has exactly one.
func Roots(spans []Span, traceID string) []Span {
	var out []Span
	for _, s := range spans {
		if s.TraceID == traceID && s.ParentSpanID == "" {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, byStart)
	return out
}

// Children are the spans whose parent is parent (in its trace), by start.
func Children(spans []Span, parent Span) []Span {
	var out []Span
	for _, s := range spans {
		if s.TraceID == parent.TraceID && s.ParentSpanID == parent.SpanID {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, byStart)
	return out
}

// Ancestors is s's chain of parents within its trace, its parent first. It
// ends at the root, or (the last one's ParentSpanID not empty) where a
// parent was not received, or before a span seen twice (a cycle).
func Ancestors(spans []Span, s Span) []Span {
	byID := map[string]Span{}
	for _, x := range spans {
		if x.TraceID == s.TraceID {
			byID[x.SpanID] = x
		}
	}
	seen := map[string]bool{s.SpanID: true}
	var out []Span
	for s.ParentSpanID != "" && !seen[s.ParentSpanID] {
		p, ok := byID[s.ParentSpanID]
		if !ok {
			break
		}
		seen[p.SpanID] = true
		out = append(out, p)
		s = p
	}
	return out
}

// Tree renders trace traceID as an indented tree, one span a line: its
// name, the attributes named in attrs that it has (key=value) and an
// error status. Spans whose parent was not received follow the roots,
// marked so. For test logs and docs:
//
//	trace 4bf92f3577b34da6a3ce929d0e0e4736
//	  reconcile Proxy proxy.name=web
//	    provider.create
//	      HTTP POST (error: 409 Conflict)
func Tree(spans []Span, traceID string, attrs ...string) string {
	var trace []Span
	ids := map[string]bool{}
	for _, s := range spans {
		if s.TraceID == traceID {
			trace = append(trace, s)
			ids[s.SpanID] = true
		}
	}
	var b strings.Builder
	if len(trace) == 0 {
		fmt.Fprintf(&b, "trace %s: no spans\n", traceID)
		return b.String()
	}
	fmt.Fprintf(&b, "trace %s\n", traceID)
	printed := map[string]bool{}
	var walk func(s Span, depth int, note string)
	walk = func(s Span, depth int, note string) {
		if printed[s.SpanID] {
			return // a cycle, or a span ID sent twice
		}
		printed[s.SpanID] = true
		b.WriteString(strings.Repeat("  ", depth+1))
		b.WriteString(s.Name)
		for _, k := range attrs {
			if v, ok := s.Attrs[k]; ok {
				fmt.Fprintf(&b, " %s=%s", k, v)
			}
		}
		if s.Status == codes.Error {
			fmt.Fprintf(&b, " (error: %s)", s.StatusMessage)
		}
		b.WriteString(note)
		b.WriteString("\n")
		for _, c := range Children(trace, s) {
			walk(c, depth+1, "")
		}
	}
	for _, r := range Roots(trace, traceID) {
		walk(r, 0, "")
	}
	slices.SortFunc(trace, byStart)
	for _, s := range trace {
		if s.ParentSpanID != "" && !ids[s.ParentSpanID] {
			walk(s, 0, fmt.Sprintf(" [parent %s not received]", s.ParentSpanID))
		}
	}
	// Whatever is left hangs off a cycle, which no root reaches.
	for _, s := range trace {
		if !printed[s.SpanID] {
			walk(s, 0, " [in a parent cycle]")
		}
	}
	return b.String()
}

// SpansWith returns the spans holding any of substrings (Holding): to
// prove a secret reached no span, check that SpansWith(spans, secret) is
// empty. An empty substring matches every span, so a secret that came out
// empty fails such a check instead of passing it.
func SpansWith(spans []Span, substrings ...string) []Span {
	var out []Span
	for _, s := range spans {
		if len(s.Holding(substrings...)) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// Holding names, sorted, where s holds any of substrings: "the name",
// "the status message", "attribute K", "event E" (its name) or "event E
// attribute K" (RecordError puts the error's text there). It names the
// place, never the value, so a check can say where a secret leaked
// without printing it.
func (s Span) Holding(substrings ...string) []string {
	holds := func(v string) bool {
		return slices.ContainsFunc(substrings, func(sub string) bool { return strings.Contains(v, sub) })
	}
	var where []string
	if holds(s.Name) {
		where = append(where, "the name")
	}
	if holds(s.StatusMessage) {
		where = append(where, "the status message")
	}
	for k, v := range s.Attrs {
		if holds(v) {
			where = append(where, "attribute "+k)
		}
	}
	for _, e := range s.Events {
		if holds(e.Name) {
			where = append(where, "event "+e.Name)
		}
		for k, v := range e.Attrs {
			if holds(v) {
				where = append(where, "event "+e.Name+" attribute "+k)
			}
		}
	}
	slices.Sort(where)
	return where
}
