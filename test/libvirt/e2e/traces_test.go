package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
	"github.com/egress-proxies-operator/egress-proxies-operator/test/traces"
)

// libvirtSentinels are the secrets the operator holds for the libvirt
// host: a line of the SSH key's body.
func libvirtSentinels(t *testing.T, h *libvirthost.Host) []string {
	key, err := os.ReadFile(h.SSHKey)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(key)), "\n")
	return []string{lines[len(lines)/2]}
}

// checkTraces reads the Proxy's lifecycle back from the collector, on
// kvm (its create: download, volume, define, start; the guest-agent
// reads) and kvm2 (after the entry's switch: its reads and the delete),
// and applies test/traces' rules to everything received.
func checkTraces(t *testing.T, collector *otelcol.Collector, uid string, sentinels []string) {
	t.Helper()
	var spans []otelcol.Span
	var l *traces.Lifecycle
	testenv.EventuallyNil(t, "the collector wrote the Proxy's create and delete", func() error {
		var err error
		if spans, err = collector.Spans(); err != nil {
			return err
		}
		l = traces.LifecycleOf(spans, uid)
		return l.Complete()
	})
	types := map[string]bool{}
	for _, id := range otelcol.TraceIDs(spans) {
		trace, ok := l.Traces[id]
		if !ok {
			continue
		}
		for _, s := range trace {
			if typ := s.Attrs["provider.type"]; typ != "" {
				types[typ] = true
			}
		}
		t.Logf("%s", otelcol.Tree(spans, id, "provider.name", "provider.type", "error.class", "libvirt.stage", "libvirt.domain", "libvirt.volume", "libvirt.agent_command", "libvirt.bytes"))
	}
	isBackend := func(s otelcol.Span) bool { return strings.HasPrefix(s.Name, "libvirt.") }
	if err := traces.Check(spans, l, isBackend, sentinels); err != nil {
		t.Fatal(err)
	}
	n, err := l.BackgroundCreate()
	if err != nil {
		t.Fatal(err)
	}
	if !types["kvm"] || !types["kvm2"] {
		t.Fatalf("provider spans of types %v, want kvm and kvm2", types)
	}
	t.Logf("Proxy %s: %d reconciles on kvm and kvm2, each one trace with its UID on the root; %d libvirt spans of the background create step under provider.create; every libvirt span under a provider span; no secret in any of the %d spans received",
		uid, len(l.Traces), n, len(spans))
}
