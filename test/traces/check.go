// Package traces reads one Proxy's lifecycle back from a real
// OpenTelemetry Collector, per provider, and checks that it arrived whole:
// each reconcile one trace with one root, every backend span under a
// provider span, and no secret in any span.
package traces

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
)

// What the operator names its spans (internal/telemetry).
const (
	spanReconcileProxy = "reconcile Proxy"
	providerPrefix     = "provider."
)

// Lifecycle is what the collector received of one Proxy: its reconciles'
// traces, found by the Proxy's UID on their roots.
type Lifecycle struct {
	UID    string
	Traces map[string][]otelcol.Span // by trace ID
}

// LifecycleOf collects the traces whose root names the Proxy's UID.
func LifecycleOf(spans []otelcol.Span, uid string) *Lifecycle {
	byTrace := map[string][]otelcol.Span{}
	for _, s := range spans {
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	l := &Lifecycle{UID: uid, Traces: map[string][]otelcol.Span{}}
	for id, trace := range byTrace {
		for _, s := range trace {
			if s.ParentSpanID == "" && s.Name == spanReconcileProxy && s.Attrs["proxy.uid"] == uid {
				l.Traces[id] = trace
			}
		}
	}
	return l
}

// Complete says whether both ends arrived: a reconcile that called
// provider.create and one that called provider.delete (a trace's root
// arrives after its children, in a later batch).
func (l *Lifecycle) Complete() error {
	var missing []string
	for _, op := range []string{"provider.create", "provider.delete"} {
		if !l.has(op) {
			missing = append(missing, op)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Proxy %s: %d traces received, none with %s under its reconcile (nothing exported, or a provider span started without the reconcile's context is a root of its own)", l.UID, len(l.Traces), strings.Join(missing, " or "))
	}
	return nil
}

// BackgroundCreate counts the spans that a provider.create's background
// step (download, volume, define, start; insert and its operation; clone
// and its task) made after the create call returned: they must be under
// that provider.create, in the trace of the reconcile that started them,
// so a slow create is followed from the Proxy that asked for it. An
// error when there are none.
func (l *Lifecycle) BackgroundCreate() (int, error) {
	n := 0
	for _, trace := range l.Traces {
		for _, c := range trace {
			if c.Name != "provider.create" {
				continue
			}
			for _, s := range trace {
				if s.Start > c.End && slices.ContainsFunc(otelcol.Ancestors(trace, s), func(a otelcol.Span) bool { return a.SpanID == c.SpanID }) {
					n++
				}
			}
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("Proxy %s: no span under provider.create started after the call returned: the background create step's spans are not in the reconcile's trace", l.UID)
	}
	return n, nil
}

func (l *Lifecycle) has(name string) bool {
	for _, trace := range l.Traces {
		if slices.ContainsFunc(trace, func(s otelcol.Span) bool { return s.Name == name }) {
			return true
		}
	}
	return false
}

// Check applies the rules to what the collector received:
//   - no provider or backend span is a root: one started without the
//     request's context would be;
//   - each of the Proxy's reconciles (l) is one trace with one root, names
//     no parent the collector never received, and has every backend span
//     (isBackend) under a provider.* span;
//   - no span's name, attribute, event or status holds a sentinel.
//
// The background rounds (health checks, the collector's passes) are held
// to the first and last rules only: the operator's shutdown may cut one
// (a check's provider call outlives its round by design), and a cut
// round's spans name a parent that ended after the last export.
func Check(spans []otelcol.Span, l *Lifecycle, isBackend func(otelcol.Span) bool, sentinels []string) error {
	if len(spans) == 0 {
		return errors.New("the collector received no spans: is the exporter pointed at it?")
	}
	if len(l.Traces) == 0 {
		return fmt.Errorf("no trace of Proxy %s among the %d spans received", l.UID, len(spans))
	}
	var errs []error
	for _, s := range spans {
		if s.ParentSpanID == "" && (strings.HasPrefix(s.Name, providerPrefix) || isBackend(s)) {
			errs = append(errs, fmt.Errorf("trace %s: its root is %q, not a reconcile or a background round: a span started without the request's context", s.TraceID, s.Name))
		}
	}
	for id, spans := range l.Traces {
		trace := map[string]otelcol.Span{}
		for _, s := range spans {
			trace[s.SpanID] = s
		}
		var roots []string
		for _, s := range spans {
			switch {
			case s.ParentSpanID == "":
				roots = append(roots, s.Name)
			case trace[s.ParentSpanID].SpanID == "":
				errs = append(errs, fmt.Errorf("trace %s: %q names parent %s, which the collector never received", id, s.Name, s.ParentSpanID))
			}
		}
		if len(roots) != 1 {
			slices.Sort(roots)
			errs = append(errs, fmt.Errorf("trace %s has %d roots %q, want one", id, len(roots), roots))
		}
		for _, s := range spans {
			if isBackend(s) && !underProvider(trace, s) {
				errs = append(errs, fmt.Errorf("trace %s: backend span %q (%v) has no provider.* ancestor", id, s.Name, s.Attrs))
			}
		}
	}
	for _, s := range spans {
		if where := s.Holding(sentinels...); len(where) > 0 {
			errs = append(errs, fmt.Errorf("span %q (trace %s) carries a secret in %s", s.Name, s.TraceID, strings.Join(where, ", ")))
		}
	}
	return errors.Join(errs...)
}

// underProvider says whether a provider.* span is among s's ancestors.
func underProvider(trace map[string]otelcol.Span, s otelcol.Span) bool {
	for seen := 0; s.ParentSpanID != "" && seen < len(trace); seen++ {
		p, ok := trace[s.ParentSpanID]
		if !ok {
			return false
		}
		if strings.HasPrefix(p.Name, providerPrefix) {
			return true
		}
		s = p
	}
	return false
}
