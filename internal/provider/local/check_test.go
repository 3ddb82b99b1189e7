package local

import (
	"context"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func TestCheckHealthy(t *testing.T) {
	p := newTestProvider(t, testInstallation, 28) // 15 usable
	res := p.Check(context.Background())
	if !res.Healthy || res.Reason != provider.ReasonHealthy {
		t.Fatalf("Check with no instances = %+v, want Healthy (the range binds)", res)
	}
	mustCreate(t, p, request("c1"))
	mustCreate(t, p, request("c2"))
	res = p.Check(context.Background())
	if !res.Healthy || res.Reason != provider.ReasonHealthy {
		t.Errorf("Check = %+v, want Healthy", res)
	}
	if res.Target != "listeners" || res.Address != p.cidr.String() {
		t.Errorf("Target %q Address %q, want listeners and %s", res.Target, res.Address, p.cidr)
	}
	want := map[string]string{"instances": "2", "bindCIDR": p.cidr.String(), "freeAddresses": "13"}
	for k, v := range want {
		if res.Details[k] != v {
			t.Errorf("Details[%q] = %q, want %q (all: %v)", k, res.Details[k], v, res.Details)
		}
	}
}

// A listener that no longer accepts makes the check Degraded, naming it
// and only it.
func TestCheckDegradedNamesDeadListeners(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	alive := request("alive")
	mustCreate(t, p, alive)
	dead := request("dead")
	mustCreate(t, p, dead)
	p.mu.Lock()
	_ = p.instances[dead.Name].srv.ln.Close() // behind the provider's back
	p.mu.Unlock()
	stopped := request("stopped")
	plant(t, p, stopped.Name, &provider.Marks{Managed: true, UID: stopped.UID, Installation: testInstallation}, 0)

	res := p.Check(context.Background())
	if res.Healthy || res.Reason != provider.ReasonDegraded {
		t.Fatalf("Check = %+v, want Degraded", res)
	}
	for _, name := range []string{dead.Name, stopped.Name} {
		if !strings.Contains(res.Message, name) {
			t.Errorf("message %q does not name %s", res.Message, name)
		}
	}
	if strings.Contains(res.Message, alive.Name) {
		t.Errorf("message %q names the live %s", res.Message, alive.Name)
	}
	if !strings.Contains(res.Message, "2 of 3") || res.Details["instances"] != "3" {
		t.Errorf("message %q / details %v do not count 2 dead of 3", res.Message, res.Details)
	}
}

func TestCheckAfterClose(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	_ = p.Close()
	if res := p.Check(context.Background()); res.Healthy || res.Reason != provider.ReasonUnreachable {
		t.Errorf("Check after Close = %+v, want Unreachable", res)
	}
}
