package traces

import (
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
)

// Verify waits until the collector wrote both ends of Proxy uid's
// lifecycle (call it once the operator stopped: that flushes its spans),
// logs each of the Proxy's traces as a tree with attrs, applies Check, and
// fails t unless the background create step is in the reconcile's trace.
// It returns what the collector received and the Proxy's traces, for a
// suite's own checks.
func Verify(t testing.TB, collector *otelcol.Collector, uid string, isBackend func(otelcol.Span) bool, sentinels []string, attrs ...string) ([]otelcol.Span, *Lifecycle) {
	t.Helper()
	var spans []otelcol.Span
	var l *Lifecycle
	testenv.EventuallyNil(t, "the collector wrote Proxy "+uid+"'s create and delete", func() error {
		var err error
		if spans, err = collector.Spans(); err != nil {
			return err
		}
		l = LifecycleOf(spans, uid)
		return l.Complete()
	})
	for _, id := range otelcol.TraceIDs(spans) {
		if _, ok := l.Traces[id]; ok {
			t.Logf("%s", otelcol.Tree(spans, id, attrs...))
		}
	}
	if err := Check(spans, l, isBackend, sentinels); err != nil {
		t.Fatal(err)
	}
	n, err := l.BackgroundCreate()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Proxy %s: %d reconciles, each one trace with its UID on the root; %d backend spans of the background create step under provider.create; every backend span under a provider span; no secret (%d sentinels) in any of the %d spans received",
		uid, len(l.Traces), n, len(sentinels), len(spans))
	return spans, l
}
