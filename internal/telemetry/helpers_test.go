package telemetry_test

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/validation/field"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

const installation = "installation-1"

// closingFake is the fake provider with a Close, to prove the registry
// still closes a decorated provider.
type closingFake struct {
	*fake.Provider
	closed atomic.Bool
}

func (c *closingFake) Close() error {
	c.closed.Store(true)
	return nil
}

// providerName is unique per test, so that the process-wide metrics of one
// test never count another's calls.
func providerName(t testing.TB) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
}

// newEntry builds a decorated fake provider the way main does: through a
// registry that applies telemetry.Decorate.
func newEntry(t testing.TB, tp trace.TracerProvider) (*registry.Entry, *closingFake, *registry.Registry) {
	t.Helper()
	name := providerName(t)
	fp := &closingFake{Provider: fake.New(name, fake.NewBackend(), provider.Options{InstallationID: installation})}
	types := map[string]registry.Type{"fake": {
		Parse: func(json.RawMessage, *field.Path) (any, field.ErrorList) { return nil, nil },
		New:   func(string, any, provider.Options) (provider.Provider, error) { return fp, nil },
	}}
	reg := registry.New(types, provider.Options{InstallationID: installation}, telemetry.Decorate(tp))
	if err := reg.Apply([]config.Entry{{Name: name, Type: "fake", Path: field.NewPath("providers").Index(0)}}); err != nil {
		t.Fatal(err)
	}
	e, err := reg.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return e, fp, reg
}

func newRecorder() (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	return rec, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
}

func createRequest(uid string) provider.CreateRequest {
	return provider.CreateRequest{
		Name: "proxy-team-a-web-1a2b3c", Namespace: "team-a", ProxyName: "web", UID: uid, Port: 3128,
		CloudInit: provider.Sensitive("#cloud-config\n"),
	}
}

// logLines captures a logger's lines as JSON objects, at V(1) so that the
// fake's per-operation lines are written, with the caller's file and line.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.NewJSON(func(obj string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, obj)
	}, funcr.Options{Verbosity: 1, LogCaller: funcr.All})
}

// find returns the first line whose msg is msg, decoded, and the raw line.
func (l *logLines) find(t *testing.T, msg string) (map[string]any, string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, raw := range l.lines {
		m := map[string]any{}
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("log line %s: %v", raw, err)
		}
		if m["msg"] == msg {
			return m, raw
		}
	}
	t.Fatalf("no log line %q in %q", msg, l.lines)
	return nil, ""
}

func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			if found != nil {
				t.Fatalf("two spans named %q", name)
			}
			found = s
		}
	}
	if found == nil {
		t.Fatalf("no span named %q among %v", name, spanNames(spans))
	}
	return found
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// wantAttrs fails for every key of want that s lacks or holds another
// string value of; an empty want value means the key must be absent.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		g, ok := got[k]
		switch {
		case v == "" && ok:
			t.Errorf("%s: attribute %s = %q, want none", s.Name(), k, g.Emit())
		case v != "" && !ok:
			t.Errorf("%s: no attribute %s (want %q)", s.Name(), k, v)
		case v != "" && g.Emit() != v:
			t.Errorf("%s: attribute %s = %q, want %q", s.Name(), k, g.Emit(), v)
		}
	}
}

// ownSeries is controller-runtime's metrics registry narrowed to the
// series of one provider, so that testutil compares exactly what one test
// caused and proves the metrics are in that registry.
func ownSeries(name string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := crmetrics.Registry.Gather()
		var out []*dto.MetricFamily
		for _, mf := range mfs {
			var ms []*dto.Metric
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == telemetry.LabelProvider && lp.GetValue() == name {
						ms = append(ms, m)
					}
				}
			}
			if len(ms) > 0 {
				mf.Metric = ms
				out = append(out, mf)
			}
		}
		return out, err
	})
}

// histogramCount is the sample count of the duration series with labels.
func histogramCount(t *testing.T, name, op, class string) uint64 {
	t.Helper()
	mfs, err := ownSeries(name).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "egress_proxy_provider_call_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["type"] == "fake" && l["operation"] == op && l["error_class"] == class {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// decoratedEntry is the registry's entry named name for p, decorated by
// telemetry with tp: p's optional interfaces as the registry finds them.
func decoratedEntry(t *testing.T, tp trace.TracerProvider, name string, p provider.Provider) *registry.Entry {
	t.Helper()
	types := map[string]registry.Type{"fake": {
		Parse: func(json.RawMessage, *field.Path) (any, field.ErrorList) { return nil, nil },
		New:   func(string, any, provider.Options) (provider.Provider, error) { return p, nil },
	}}
	reg := registry.New(types, provider.Options{InstallationID: installation}, telemetry.Decorate(tp))
	if err := reg.Apply([]config.Entry{{Name: name, Type: "fake", Path: field.NewPath("providers").Index(0)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	e, err := reg.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
