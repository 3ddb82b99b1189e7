package libvirt

import (
	"errors"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func TestIDRoundTrip(t *testing.T) {
	id := formatID("beelink", "proxy-default-web-0123456789")
	if id != "hosts/beelink/domains/proxy-default-web-0123456789" {
		t.Fatalf("formatID = %q", id)
	}
	h, n, err := parseID(id)
	if err != nil || h != "beelink" || n != "proxy-default-web-0123456789" {
		t.Fatalf("parseID(%q) = %q, %q, %v", id, h, n, err)
	}
}

func TestParseIDRejectsMalformed(t *testing.T) {
	for _, id := range []string{
		"", "hosts", "hosts/beelink", "hosts/beelink/domains", "hosts/beelink/domains/",
		"hosts//domains/x", "nodes/beelink/domains/x", "hosts/beelink/vms/x",
		"hosts/beelink/domains/x/y", "hosts/Bee_Link/domains/x", "hosts/beelink/domains/../x",
		"instances/x", "default/web",
	} {
		if _, _, err := parseID(id); !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("parseID(%q): %v, want Permanent", id, err)
		}
	}
}
