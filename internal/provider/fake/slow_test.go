package fake_test

import (
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
)

// slowHook adds the slow-create capabilities to hook, so that the fake's
// conformance run covers the bounded-call cases in both profiles.
type slowHook struct {
	hook
	installation string
	configure    func(p *fake.Provider)
}

var (
	_ providertest.Slow      = (*slowHook)(nil)
	_ providertest.Restarter = (*slowHook)(nil)
)

func withSlow(h hook, installation string, configure func(p *fake.Provider)) *slowHook {
	return &slowHook{hook: h, installation: installation, configure: configure}
}

func (h *slowHook) HoldCreate(_ *testing.T, name string) providertest.Hold {
	hold := h.p.HoldCreate(name)
	return providertest.Hold{Release: hold.Release, Progress: hold.Progress, Done: hold.Done()}
}

// Restart crashes the provider and builds a fresh one, configured alike,
// over the same backend.
func (h *slowHook) Restart(*testing.T) provider.Provider {
	h.p.Crash()
	p := fake.New(providerName, h.p.Backend(), provider.Options{InstallationID: h.installation})
	h.configure(p)
	h.hook = hook{p}
	return p
}

// awaitClosed waits for ch, failing the test after a generous bound.
func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-t.Context().Done():
		t.Fatalf("%s: test ended first", what)
	}
}

func TestHoldCreateWhereMatchesTheProxy(t *testing.T) {
	p := newFake(t)
	hold := p.HoldCreateWhere(func(req provider.CreateRequest) bool { return req.ProxyName == "blocked" })
	other := mustCreate(t, p, request("web", "uid-web"))
	if other.State != provider.StateRunning {
		t.Errorf("Create of a Proxy the hold does not match: state %q, want Running", other.State)
	}
	inst := mustCreate(t, p, request("blocked", "uid-blocked"))
	awaitClosed(t, hold.Started(), "the held step starting")
	if inst.State != provider.StateProvisioning || inst.Progress == "" {
		t.Fatalf("held Create = %+v, want Provisioning with progress", inst)
	}
	hold.Progress("clone task running")
	got, err := p.Get(t.Context(), inst.ID)
	if err != nil || got.Progress != "clone task running" || got.State != provider.StateProvisioning {
		t.Errorf("Get while held = %+v, %v; want Provisioning with the hold's progress", got, err)
	}
	hold.Release(nil)
	awaitClosed(t, hold.Done(), "the held step ending")
	if got, err := p.Get(t.Context(), inst.ID); err != nil || got.State != provider.StateRunning || got.IP == "" {
		t.Errorf("Get after the release = %+v, %v; want Running with an IP", got, err)
	}
}

func TestHoldStaysArmedWhileNoStepIsNeeded(t *testing.T) {
	p := newFake(t)
	req := request("web", "uid-web")
	first := mustCreate(t, p, req)
	hold := p.HoldCreate(req.Name)
	if again := mustCreate(t, p, req); again.State != provider.StateRunning {
		t.Fatalf("Create of a finished instance with a hold armed: state %q, want Running (nothing to hold)", again.State)
	}
	// The instance is lost; the Create that makes it again takes the hold.
	p.Remove(req.Name)
	if inst := mustCreate(t, p, req); inst.State != provider.StateProvisioning || inst.ID != first.ID {
		t.Errorf("Create after the loss = %+v, want the held, Provisioning %q", inst, first.ID)
	}
	awaitClosed(t, hold.Started(), "the held step starting")
	p.Reset() // releases it
	awaitClosed(t, hold.Done(), "the held step ending at Reset")
	if got, err := p.Get(t.Context(), first.ID); err != nil || got.State != provider.StateRunning {
		t.Errorf("Get after Reset = %+v, %v; want Running: Reset releases every hold", got, err)
	}
}

func TestHeldCreateThenProvisioningGets(t *testing.T) {
	p := newFake(t)
	p.SetProvisioningGets(2)
	req := request("web", "uid-web")
	hold := p.HoldCreate(req.Name)
	inst := mustCreate(t, p, req)
	hold.Release(nil)
	awaitClosed(t, hold.Done(), "the held step ending")
	var states []provider.State
	for range 3 {
		got, err := p.Get(t.Context(), inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, got.State)
	}
	want := []provider.State{provider.StateProvisioning, provider.StateProvisioning, provider.StateRunning}
	if len(states) != 3 || states[0] != want[0] || states[1] != want[1] || states[2] != want[2] {
		t.Errorf("Gets after the held step = %v, want %v (the step ends like a submitting Create)", states, want)
	}
}

func TestCrashLeavesTheUnfinishedInstance(t *testing.T) {
	p := newFake(t)
	req := request("web", "uid-web")
	hold := p.HoldCreate(req.Name)
	inst := mustCreate(t, p, req)
	awaitClosed(t, hold.Started(), "the held step starting")
	p.Crash()
	awaitClosed(t, hold.Done(), "the held step ending at the crash")
	for _, op := range []string{provider.OpCreate, provider.OpGet, provider.OpDelete, provider.OpList} {
		var err error
		switch op {
		case provider.OpCreate:
			_, err = p.Create(t.Context(), req)
		case provider.OpGet:
			_, err = p.Get(t.Context(), inst.ID)
		case provider.OpDelete:
			err = p.Delete(t.Context(), inst.ID)
		case provider.OpList:
			_, err = p.ListByTag(t.Context())
		}
		wantClass(t, op+" of a crashed provider", err, provider.ErrTransient)
	}
	hold.Release(nil) // the dead process's step must not finish anything
	restarted := fake.New(providerName, p.Backend(), provider.Options{InstallationID: "inst-a"})
	got, err := restarted.Get(t.Context(), inst.ID)
	if err != nil || got.State != provider.StateStopped || got.Progress == "" {
		t.Fatalf("Get after the restart = %+v, %v; want Stopped with a progress detail: the create was interrupted", got, err)
	}
	if list, err := restarted.ListByTag(t.Context()); err != nil || len(list) != 1 {
		t.Errorf("ListByTag after the restart = %v, %v; want the unfinished instance", list, err)
	}
	if again := mustCreate(t, restarted, req); again.ID != inst.ID || again.State != provider.StateRunning {
		t.Errorf("Create after the restart = %+v, want %q resumed and Running", again, inst.ID)
	}
}

func TestSetStateFinishesAnUnfinishedInstance(t *testing.T) {
	p := newFake(t)
	req := request("web", "uid-web")
	hold := p.HoldCreate(req.Name)
	inst := mustCreate(t, p, req)
	awaitClosed(t, hold.Started(), "the held step starting")
	p.Crash()
	restarted := fake.New(providerName, p.Backend(), provider.Options{InstallationID: "inst-a"})
	restarted.SetState(req.Name, provider.StateRunning)
	if got, err := restarted.Get(t.Context(), inst.ID); err != nil || got.State != provider.StateRunning {
		t.Errorf("Get after SetState(Running) = %+v, %v; the world's state wins", got, err)
	}
}
