package local

import (
	"context"
	"fmt"
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

// An instance deleted while the check runs (after the check listed the
// instances, before it dialed this one) is not a listener that refuses:
// the check dials thousands one after the other while the reconciler goes
// on creating and deleting.
func TestCheckSkipsInstancesDeletedDuringTheCheck(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	first := mustCreate(t, p, request("first"))
	second := mustCreate(t, p, request("second"))
	var deleteErr error
	deleted := false
	p.beforeCheckDial = func(string) {
		if !deleted { // before the first dial, whichever instance it is
			deleted = true
			deleteErr = p.Delete(context.Background(), second.ID)
		}
	}
	res := p.Check(context.Background())
	if deleteErr != nil {
		t.Fatalf("Delete during the check: %v", deleteErr)
	}
	if !res.Healthy || res.Reason != provider.ReasonHealthy {
		t.Fatalf("Check = %+v, want Healthy: %s serves and the other instance was deleted, not refusing", res, first.IP)
	}
	if !strings.Contains(res.Message, "all 1 listeners") {
		t.Errorf("message %q, want it to count the 1 listener still there", res.Message)
	}
}

// A listener is recorded only once it listens: a Check running while
// instances are created never finds one that refuses.
func TestCheckDuringCreatesFindsNoRefusingListener(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	const n = 100
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := p.Create(context.Background(), request(fmt.Sprintf("c%03d", i))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for checks := 0; ; checks++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if res := p.Check(context.Background()); !res.Healthy {
				t.Fatalf("Check after %d creates = %+v, want Healthy", n, res)
			}
			t.Logf("%d checks ran during %d creates", checks, n)
			return
		default:
		}
		if res := p.Check(context.Background()); !res.Healthy {
			t.Fatalf("Check during the creates = %+v, want Healthy", res)
		}
	}
}

func TestCheckAfterClose(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	_ = p.Close()
	if res := p.Check(context.Background()); res.Healthy || res.Reason != provider.ReasonUnreachable {
		t.Errorf("Check after Close = %+v, want Unreachable", res)
	}
}
