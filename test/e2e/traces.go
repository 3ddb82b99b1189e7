package e2e

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
)

// What the operator names its spans (internal/telemetry, the kubernetes
// provider's httpobserve transport), as the collector received them.
const (
	spanReconcileProxy = "reconcile Proxy"
	spanProviderCreate = "provider.create"
	spanProviderDelete = "provider.delete"
	spanHTTPPost       = "HTTP POST"
	spanHTTPDelete     = "HTTP DELETE"
)

// Roots of the operator's traces that are no reconcile: the health check
// and garbage collection rounds (telemetry.StartSpan).
var backgroundRoots = []string{"health.check", "gc.collect"}

// lifecycle is what the collector holds of one Proxy's reconciles: every
// trace rooted at a "reconcile Proxy" span for it, by trace ID.
type lifecycle struct {
	namespace, name string
	traces          map[string][]otelcol.Span // the whole trace, every span in it
	roots           map[string]otelcol.Span   // its reconcile span
	byID            map[string]otelcol.Span   // every span received, by trace and span ID
	all             []otelcol.Span
}

func spanKey(traceID, spanID string) string { return traceID + "/" + spanID }

// isFor says whether s carries the Proxy's attributes.
func isFor(s otelcol.Span, namespace, name string) bool {
	return s.Attrs["proxy.namespace"] == namespace && s.Attrs["proxy.name"] == name
}

func newLifecycle(spans []otelcol.Span, namespace, name string) *lifecycle {
	l := &lifecycle{namespace: namespace, name: name, traces: map[string][]otelcol.Span{}, roots: map[string]otelcol.Span{},
		byID: map[string]otelcol.Span{}, all: spans}
	for _, s := range spans {
		l.byID[spanKey(s.TraceID, s.SpanID)] = s
		if s.Name == spanReconcileProxy && isFor(s, namespace, name) {
			// A parentless one is the root; check counts the others.
			if r, seen := l.roots[s.TraceID]; !seen || r.ParentSpanID != "" {
				l.roots[s.TraceID] = s
			}
		}
	}
	for _, s := range spans {
		if _, ok := l.roots[s.TraceID]; ok {
			l.traces[s.TraceID] = append(l.traces[s.TraceID], s)
		}
	}
	return l
}

// children are the spans in s's trace whose parent is s, named name.
func (l *lifecycle) children(s otelcol.Span, name string) []otelcol.Span {
	var out []otelcol.Span
	for _, c := range otelcol.Children(l.traces[s.TraceID], s) {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// operation is one provider call seen in a reconcile's trace, with the
// HTTP requests made under it (the kinds of object their paths name).
type operation struct {
	traceID string
	kinds   []string
}

// calls finds the reconcile traces whose root has a child named op with
// children named httpSpan, and returns each with the object kinds (the
// last path segment of url.full, or of http.url in older semantic
// conventions) of those requests.
func (l *lifecycle) calls(op, httpSpan string) []operation {
	var out []operation
	for id, root := range l.roots {
		for _, call := range l.children(root, op) {
			o := operation{traceID: id}
			for _, h := range l.children(call, httpSpan) {
				o.kinds = append(o.kinds, requestKind(h))
			}
			if len(o.kinds) > 0 {
				sort.Strings(o.kinds)
				out = append(out, o)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].traceID < out[j].traceID })
	return out
}

// requestKind is the resource a Kubernetes API request's path names: the
// collection for a POST (.../pods), the collection before the name for a
// DELETE (.../pods/NAME).
func requestKind(h otelcol.Span) string {
	raw := h.Attrs["url.full"]
	if raw == "" {
		raw = h.Attrs["http.url"]
	}
	u, err := url.Parse(raw)
	if err != nil || u.Path == "" {
		return "?"
	}
	dir, last := path.Split(strings.TrimSuffix(u.Path, "/"))
	if h.Name == spanHTTPPost {
		return last
	}
	return path.Base(strings.TrimSuffix(dir, "/"))
}

// The objects the kubernetes provider makes for one Proxy, as API
// collections.
var instanceKinds = []string{"configmaps", "networkpolicies", "pods", "services"}

// complete says whether the collector has received the whole lifecycle:
// a reconcile whose provider.create POSTed all four objects, one whose
// provider.delete DELETEd some, and every ancestor of the Proxy's spans.
// Until then the test waits (spans arrive in batches, the root after its
// children).
func (l *lifecycle) complete() error {
	creates, deletes := l.calls(spanProviderCreate, spanHTTPPost), l.calls(spanProviderDelete, spanHTTPDelete)
	if !slices.ContainsFunc(creates, func(o operation) bool { return containsAll(o.kinds, instanceKinds) }) {
		return fmt.Errorf("%d spans received, %d reconcile traces for Proxy %s/%s; no %q > %q > %q for each of %v yet (creates with POSTs: %v)",
			len(l.all), len(l.roots), l.namespace, l.name, spanReconcileProxy, spanProviderCreate, spanHTTPPost, instanceKinds, creates)
	}
	if len(deletes) == 0 {
		return fmt.Errorf("%d spans received, %d reconcile traces for Proxy %s/%s; no %q > %q > %q yet",
			len(l.all), len(l.roots), l.namespace, l.name, spanReconcileProxy, spanProviderDelete, spanHTTPDelete)
	}
	// A reconcile still running (or just ended) when the log was read may
	// have had its provider calls exported and not yet its root: wait for
	// every ancestor of the Proxy's spans. A span whose parent never comes
	// (dropped by the exporter) fails the test here, by time-out.
	for _, s := range l.all {
		_, inReconcile := l.traces[s.TraceID]
		if !inReconcile && !isFor(s, l.namespace, l.name) {
			continue
		}
		if r := l.rootOf(s); strings.HasPrefix(r, "missing:") {
			return fmt.Errorf("span %q (%s) of trace %s: its ancestor %s not received yet", s.Name, s.SpanID, s.TraceID, strings.TrimPrefix(r, "missing:"))
		}
	}
	return nil
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// check is the tree's shape over every span received for the Proxy:
//   - one trace per reconcile: each reconcile trace holds exactly one
//     "reconcile Proxy" span, its root, and reconcile IDs are not repeated
//     across traces;
//   - no reconcile split over traces: every span in a reconcile trace
//     descends from its root through parents in the same trace, and every
//     span carrying the Proxy's attributes is in a reconcile trace (or a
//     health check or garbage collection round's);
//   - the kubernetes provider's HTTP spans are children of a provider span,
//     never of the reconcile itself;
//   - every span came from the operator (service.name).
func (l *lifecycle) check(service string) error {
	var errs []string
	fail := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	reconcileIDs := map[string]string{}
	for id, root := range l.roots {
		if root.ParentSpanID != "" {
			fail("trace %s: %q has parent %s: a reconcile is a trace's root", id, root.Name, root.ParentSpanID)
		}
		if rid := root.Attrs["reconcile.id"]; rid == "" {
			fail("trace %s: %q has no reconcile.id", id, root.Name)
		} else if other, dup := reconcileIDs[rid]; dup {
			fail("reconcile.id %s is the root of two traces, %s and %s: one reconcile split over traces", rid, other, id)
		} else {
			reconcileIDs[rid] = id
		}
		n := 0
		for _, s := range l.traces[id] {
			if s.Service != service {
				fail("trace %s: span %q is from service %q, want %q", id, s.Name, s.Service, service)
			}
			if s.Name == spanReconcileProxy {
				n++
				continue
			}
			if got := l.rootOf(s); got != root.SpanID {
				fail("trace %s: span %q (%s) does not descend from the reconcile's root %s (reaches %q): part of a reconcile outside its tree", id, s.Name, s.SpanID, root.SpanID, got)
			}
			if strings.HasPrefix(s.Name, "HTTP ") {
				parent := l.byID[spanKey(s.TraceID, s.ParentSpanID)]
				if !strings.HasPrefix(parent.Name, "provider.") {
					fail("trace %s: %q's parent is %q, want a provider call (provider.*)", id, s.Name, parent.Name)
				}
			}
		}
		if n != 1 {
			fail("trace %s holds %d %q spans: two reconciles in one trace", id, n, spanReconcileProxy)
		}
	}
	for _, s := range l.all {
		if !isFor(s, l.namespace, l.name) || s.Name == spanReconcileProxy {
			continue
		}
		if _, ok := l.roots[s.TraceID]; ok {
			continue
		}
		root := l.byID[spanKey(s.TraceID, l.rootOf(s))]
		if slices.Contains(backgroundRoots, root.Name) {
			continue
		}
		fail("span %q for Proxy %s/%s is in trace %s, which no reconcile of it roots (its root: %q): a reconcile's spans split over traces",
			s.Name, l.namespace, l.name, s.TraceID, root.Name)
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("%d problems in the traces of Proxy %s/%s:\n  %s", len(errs), l.namespace, l.name, strings.Join(errs, "\n  "))
	}
	return nil
}

// rootOf follows s's parents within its trace and returns the span ID of
// the last one found: the root when the chain is whole, else the span
// whose parent is missing, as "missing:<ID>".
func (l *lifecycle) rootOf(s otelcol.Span) string {
	for range len(l.all) + 1 {
		if s.ParentSpanID == "" {
			return s.SpanID
		}
		p, ok := l.byID[spanKey(s.TraceID, s.ParentSpanID)]
		if !ok {
			return "missing:" + s.ParentSpanID
		}
		s = p
	}
	return "cycle"
}

// summary is one line per reconcile trace, in the order the reconciles
// started: its root's reconcile.id and its spans' names with counts, for
// the test's log.
func (l *lifecycle) summary() []string {
	ids := make([]string, 0, len(l.roots))
	for id := range l.roots {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return l.roots[ids[i]].Start < l.roots[ids[j]].Start })
	var out []string
	for _, id := range ids {
		root := l.roots[id]
		counts := map[string]int{}
		for _, s := range l.traces[id] {
			if s.SpanID != root.SpanID {
				counts[s.Name]++
			}
		}
		var parts []string
		for name, n := range counts {
			parts = append(parts, fmt.Sprintf("%s x%d", name, n))
		}
		sort.Strings(parts)
		out = append(out, fmt.Sprintf("trace %s reconcile.id %s: %s", id, root.Attrs["reconcile.id"], strings.Join(parts, ", ")))
	}
	return out
}
