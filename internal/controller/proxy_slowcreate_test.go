package controller

import (
	"fmt"
	"strings"
	"testing"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestSlowCreateHoldsNoWorker (issue 8): 20 Proxies on one provider, the
// backend step of one of them held (an image download that takes as long
// as the test wants). Its Create returns within provider.CallBound, so the
// other 19 reach Ready while it is still held, on one single worker (a
// Create that held it would starve them all);
// it shows its progress in the Ready message and reaches Ready once the
// step is released, without anything else touching it.
func TestSlowCreateHoldsNoWorker(t *testing.T) {
	entry, fp := fakeEntry("pool")
	hold := fp.HoldCreateWhere(func(r provider.CreateRequest) bool { return r.ProxyName == "blocked" })
	t.Cleanup(func() { hold.Release(nil) })
	m := startManager(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}}, 1, Changes{})

	m.create(t, newProxy("blocked", "pool"))
	<-hold.Started()
	const progress = "downloading image debian-12: 212/400 MiB"
	hold.Progress(progress)
	for i := range 19 {
		m.create(t, newProxy(fmt.Sprintf("other-%02d", i), "pool"))
	}
	for i := range 19 {
		m.waitFor(t, fmt.Sprintf("other-%02d", i), "Ready", isReady)
	}
	select {
	case <-hold.Done():
		t.Fatal("the held step ended before the test released it")
	default:
	}
	px := m.waitFor(t, "blocked", "progress in the Ready message", func(p *egressv1.Proxy) bool {
		return p != nil && readyReason(p) == "False/Provisioning" && strings.Contains(conditionMessage(p), progress)
	})
	t.Logf("while held: Ready %s %q", readyReason(px), conditionMessage(px))

	hold.Release(nil)
	m.waitFor(t, "blocked", "Ready once released", isReady)
	if n := fp.Calls(provider.OpCreate); n < 20 {
		t.Errorf("Create calls = %d, want at least one per Proxy", n)
	}
	testenv.Eventually(t, "the held step ended", func() bool {
		select {
		case <-hold.Done():
			return true
		default:
			return false
		}
	})
}

// TestCreateResumesAfterRestart (issue 8): the operator dies while a slow
// create step runs. The restarted operator (a fresh provider over the same
// backend, a fresh reconciler) keeps nothing from before; the recorded
// instance reads unfinished, Create resumes it, and the Proxy reaches Ready
// on exactly one instance, shown as resuming, with no stop to warn about.
func TestCreateResumesAfterRestart(t *testing.T) {
	entry, fp := fakeEntry("pool")
	hold := fp.HoldCreateWhere(func(r provider.CreateRequest) bool { return r.ProxyName == "web" })
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	px := d.create(newProxy("web", "pool"))
	d.reconcile("web")
	<-hold.Started()
	hold.Progress("cloning template: 40%")
	if got := d.get("web"); got.Status.ProviderID == "" || readyReason(got) != "False/Provisioning" {
		t.Fatalf("while held: %+v", got.Status)
	}
	fp.Crash()

	restarted, _ := fakeEntry("pool")
	restarted.Provider = fake.New("pool", fp.Backend(), providerOptions())
	d2 := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": restarted}})
	d2.ns = d.ns
	d2.reconcileUntil("web", 10, "Ready after the restart", hasReason("True/Running"))
	var mine []string
	for _, r := range fp.Backend().Records() {
		if r.Marks != nil && r.Marks.UID == string(px.UID) {
			mine = append(mine, r.Name)
		}
	}
	if len(mine) != 1 {
		t.Errorf("the backend holds %d instances of the Proxy after the restart: %v", len(mine), mine)
	}
	if evs := d2.events(); containsAny(evs, egressv1.ReasonInstanceStopped) {
		t.Errorf("resuming an unfinished create warned about a stopped instance: %q", evs)
	}
}
