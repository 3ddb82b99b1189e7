package e2e

import (
	"os"
	"strings"
	"testing"

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
// kvm (its create: download, volumes, define, start; the guest-agent
// reads) and kvm2 (after the entry's switch: its reads and the delete),
// applies test/traces' rules to everything received, and wants provider
// spans of both types.
func checkTraces(t *testing.T, collector *otelcol.Collector, uid string, sentinels []string) {
	t.Helper()
	isBackend := func(s otelcol.Span) bool { return strings.HasPrefix(s.Name, "libvirt.") }
	_, l := traces.Verify(t, collector, uid, isBackend, sentinels,
		"provider.name", "provider.type", "error.class", "libvirt.stage", "libvirt.domain", "libvirt.volume", "libvirt.agent_command", "libvirt.bytes")
	types := map[string]bool{}
	for _, trace := range l.Traces {
		for _, s := range trace {
			if typ := s.Attrs["provider.type"]; typ != "" {
				types[typ] = true
			}
		}
	}
	if !types["kvm"] || !types["kvm2"] {
		t.Fatalf("provider spans of types %v, want kvm and kvm2", types)
	}
}
