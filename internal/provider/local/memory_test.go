package local

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// BenchmarkInstanceMemory reports what one idle instance holds in the
// operator's process: Go heap and goroutine stack per listener, measured
// over b.N instances after a GC (docs/performance.md, "Memory"). Run with
// a fixed count, e.g. -benchtime=5000x.
func BenchmarkInstanceMemory(b *testing.B) {
	cfg := Config{BindCIDR: "127.200.0.0/16"} // outside the tests' 127.64.0.0/10
	p, err := New(testProviderName, cfg, provider.Options{InstallationID: testInstallation})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g := runtime.NumGoroutine()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		mustCreate(b, p, request(fmt.Sprintf("mem-%d", i)))
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := float64(b.N)
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/n, "heap-B/instance")
	b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stack-B/instance")
	b.ReportMetric(float64(runtime.NumGoroutine()-g)/n, "goroutines/instance")
}
