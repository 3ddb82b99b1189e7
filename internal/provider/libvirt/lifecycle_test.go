package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// New reads no credential and dials no host: a missing Secret or a host
// that is down at start does not stop the operator.
func TestNewDoesNoIO(t *testing.T) {
	cfg := Config{SSHKeyFile: "/nonexistent/key", KnownHostsFile: "/nonexistent/known_hosts",
		Hosts: []Host{{Name: "h1", Address: "192.0.2.1", User: "virt", Bridge: "br0"}}}
	p, err := New("vms", cfg, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRefusesAnInvalidConfig(t *testing.T) {
	_, err := New("vms", Config{}, provider.Options{})
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "hosts: Required value") {
		t.Fatalf("%v", err)
	}
}

// A malformed ID is Permanent and an ended ctx Transient, before any dial.
func TestLifecycleRefusesBeforeDialling(t *testing.T) {
	p := newFakeProvider(t, newFakeHost("h1"))
	b := provider.WithBoundary("vms", TypeKVM2, p).Provider
	ctx := context.Background()
	for _, bad := range []string{"x", "hosts/h1/domains/"} {
		if _, err := b.Get(ctx, bad); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "malformed instance ID") {
			t.Errorf("Get(%q): %v", bad, err)
		}
		if err := b.Delete(ctx, bad); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "malformed instance ID") {
			t.Errorf("Delete(%q): %v", bad, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Get(cctx, formatID("h1", "proxy-a")); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("Get with an ended ctx: %v", err)
	}
	if _, err := b.Create(ctx, provider.CreateRequest{Name: "proxy-a", UID: "u", Placement: provider.Placement{Zone: "nope"}}); !errors.Is(err, provider.ErrPermanent) ||
		!strings.Contains(err.Error(), `placement.zone "nope" names no host`) {
		t.Errorf("Create on an unknown zone: %v", err)
	}
	if len(p.table.entries) != 0 {
		t.Error("a call refused before any I/O dialled a host")
	}
}
