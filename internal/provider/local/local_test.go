package local

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func TestIDRoundTrip(t *testing.T) {
	for _, name := range []string{"a", "proxy-ns-web-0123456789", strings.Repeat("a", 63)} {
		got, err := parseID(instanceID(name))
		if err != nil || got != name {
			t.Errorf("parseID(instanceID(%q)) = %q, %v", name, got, err)
		}
	}
}

func TestParseIDRejectsMalformed(t *testing.T) {
	for _, id := range []string{
		"", "instances/", "instances", "web", "instance/web", "/instances/web",
		"instances/web/x", "instances/../web", "instances/Web", "instances/web\x00",
		"instances/" + strings.Repeat("a", 64), "instances/-web", "INSTANCES/web",
	} {
		_, err := parseID(id)
		if !strings.Contains(err.Error(), "malformed instance ID") {
			t.Errorf("parseID(%q) = %v, want a malformed-ID error", id, err)
		}
		wantClass(t, "parseID("+id+")", err, provider.ErrPermanent)
	}
}

// Get and Delete report a malformed ID as Permanent, naming the ID, under
// the configured provider name.
func TestMalformedIDThroughTheAPI(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	ctx := context.Background()
	const bad = "vm-42"
	_, err := bounded(p).Get(ctx, bad)
	wantClass(t, "Get", err, provider.ErrPermanent)
	wantProviderError(t, err, provider.OpGet)
	if !strings.Contains(err.Error(), `"vm-42"`) {
		t.Errorf("Get error %q does not name the ID", err)
	}
	err = bounded(p).Delete(ctx, bad)
	wantClass(t, "Delete", err, provider.ErrPermanent)
	wantProviderError(t, err, provider.OpDelete)
}

// Instances live in memory: a new Provider (an operator restart) knows none
// of them, and the reconciler creates them again.
func TestRestartForgetsInstances(t *testing.T) {
	cidr := nextRange(24)
	before, err := New(testProviderName, Config{BindCIDR: cidr}, optsFor(testInstallation))
	if err != nil {
		t.Fatal(err)
	}
	inst := mustCreate(t, before, request("restart"))
	if err := before.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	after, err := New(testProviderName, Config{BindCIDR: cidr}, optsFor(testInstallation))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = after.Close() })
	_, err = after.Get(context.Background(), inst.ID)
	wantClass(t, "Get after restart", err, provider.ErrNotFound)
	if list, err := after.ListByTag(context.Background()); err != nil || len(list) != 0 {
		t.Errorf("ListByTag after restart = %v, %v; want nothing", list, err)
	}
	again := mustCreate(t, after, request("restart"))
	if again.ID != inst.ID || again.IP != inst.IP {
		t.Errorf("recreated as %s at %s, want %s at %s (same name, lowest free address)", again.ID, again.IP, inst.ID, inst.IP)
	}
}

// Close ends every listener; later calls are Transient, not a latch.
func TestCloseStopsEverything(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	inst := mustCreate(t, p, request("close"))
	addr := net.JoinHostPort(inst.IP, itoa(testPort()))
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if conn, err := net.Dial("tcp4", addr); err == nil {
		conn.Close()
		t.Errorf("listener %s still accepts after Close", addr)
	}
	ctx := context.Background()
	_, err := p.Get(ctx, inst.ID)
	wantClass(t, "Get after Close", err, provider.ErrTransient)
	_, err = p.Create(ctx, request("after-close"))
	wantClass(t, "Create after Close", err, provider.ErrTransient)
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Every method returns a Transient error at once for a cancelled ctx.
func TestCancelledContext(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	inst := mustCreate(t, p, request("ctx"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Create(ctx, request("ctx-new"))
	wantClass(t, "Create", err, provider.ErrTransient)
	_, err = p.Get(ctx, inst.ID)
	wantClass(t, "Get", err, provider.ErrTransient)
	wantClass(t, "Delete", p.Delete(ctx, inst.ID), provider.ErrTransient)
	_, err = p.ListByTag(ctx)
	wantClass(t, "ListByTag", err, provider.ErrTransient)
	if res := p.Check(ctx); res.Healthy || res.Reason != provider.ReasonTimeout {
		t.Errorf("Check = %+v, want not Healthy with reason Timeout", res)
	}
	// Nothing was touched: the instance still runs.
	if got, err := p.Get(context.Background(), inst.ID); err != nil || got.State != provider.StateRunning {
		t.Errorf("Get after the cancelled calls = %+v, %v", got, err)
	}
}
