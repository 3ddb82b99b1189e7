package telemetry_test

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// BenchmarkDecoratedGet is the decorator's cost on the fake's Get (itself
// an in-memory map read): bare, tracing off (metrics only) and tracing on
// (a sampled span through a batch processor to a discarding exporter). ctx
// holds a logger, enabled at V(0) as in production, and a Proxy.
func BenchmarkDecoratedGet(b *testing.B) {
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider // nil: undecorated
	}{
		{"undecorated", nil},
		{"tracing-off", noop.NewTracerProvider()},
		{"tracing-on", sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fp := fake.New(providerName(b), fake.NewBackend(), provider.Options{InstallationID: installation})
			e := &registry.Entry{Name: fp.Name(), Type: "fake", Provider: fp, Checker: fp}
			if bc.tp != nil {
				telemetry.Decorate(bc.tp)(e)
			}
			log := funcr.New(func(string, string) {}, funcr.Options{})
			ctx := telemetry.WithProxy(logr.NewContext(context.Background(), log), "team-a", "web", uid)
			inst, err := e.Provider.Create(ctx, createRequest(uid))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Provider.Get(ctx, inst.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
