package providertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
)

// The slow-create mutants: the fake with one rule of the bounded-call
// contract broken, the way the earlier VM providers broke it.
func init() {
	mutants = append(mutants, []struct{ mode, catchIn string }{
		{"create-blocks-past-bound", "SlowCreateReturnsWithinBound"}, // kvm, kvm2, proxmox: Create waits for the VM
		{"one-create-at-a-time", "SlowCreateReturnsWithinBound"},     // a provider-wide lock held by the step
		{"no-progress", "SlowCreateReturnsWithinBound"},
		{"swallows-step-error", "BackgroundResultReachesNextCall/fails"}, // gcp: the insert's operation is discarded
		{"step-error-is-transient", "BackgroundResultReachesNextCall/fails/Permanent/next_get"},
		{"repeats-step-error", "BackgroundResultReachesNextCall/fails/Transient/next_get"},
		{"success-needs-create", "BackgroundResultReachesNextCall/succeeds"},
		{"restart-duplicates", "ResumesAfterRestart"},
		{"restart-never-resumes", "ResumesAfterRestart"},
		{"delete-leaves-create-running", "DeleteCancelsInFlightCreate"},
	}...)
}

// mutantWorld is one case's backend, shared by the providers a restart
// makes over it.
type mutantWorld struct {
	mode, installation string
	backend            *fake.Backend
}

// newMutantWorld builds TestMutant's provider for mode and the hook that
// drives it: the fake (under the mutant of suite_test.go and the slow-create
// mutant) over a fresh backend.
func newMutantWorld(mode, installation string) (provider.Provider, providertest.Backend) {
	w := &mutantWorld{mode: mode, installation: installation, backend: fake.NewBackend()}
	h := &slowHook{world: w}
	return w.build(h), h
}

// build makes a fresh provider over w's backend and points h at it.
func (w *mutantWorld) build(h *slowHook) provider.Provider {
	p := fake.New("mutant", w.backend, provider.Options{InstallationID: w.installation})
	h.hook = hook{p}
	m := &slowMutant{
		mutant: &mutant{Provider: p, mode: w.mode, installation: w.installation},
		known:  map[string]bool{}, awaiting: map[string]bool{}, failed: map[string]error{},
	}
	if w.mode == "claims-to-move" {
		return claimsToMove{m}
	}
	return m
}

// claimsToMove says it moves egress addresses and keeps none: its
// instances egress from whatever they have (the fake reports nothing), and
// a move succeeds without changing that.
type claimsToMove struct{ *slowMutant }

func (claimsToMove) MoveEgressAddress(context.Context, provider.EgressAddress, string, string) error {
	return nil
}

// slowHook is the fake's hook with the slow-create capabilities: holds and
// restarts.
type slowHook struct {
	hook
	world *mutantWorld
}

var (
	_ providertest.Slow      = (*slowHook)(nil)
	_ providertest.Restarter = (*slowHook)(nil)
)

func (h *slowHook) HoldCreate(_ *testing.T, name string) providertest.Hold {
	hold := h.p.HoldCreate(name)
	return providertest.Hold{Release: hold.Release, Progress: hold.Progress, Done: hold.Done()}
}

func (h *slowHook) Restart(*testing.T) provider.Provider {
	h.p.Crash()
	return h.world.build(h)
}

// slowMutant breaks the slow-create rules its mode names; every other call
// goes to the mutant of suite_test.go.
type slowMutant struct {
	*mutant

	mu       sync.Mutex
	global   sync.Mutex       // one-create-at-a-time
	known    map[string]bool  // names this process created: restart-duplicates
	awaiting map[string]bool  // held creates not yet created again: success-needs-create
	failed   map[string]error // step failures, repeated: repeats-step-error
}

func (m *slowMutant) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	switch m.mode {
	case "restart-duplicates":
		r, exists := m.Backend().Lookup(req.Name)
		m.mu.Lock()
		ours := m.known[req.Name]
		m.known[req.Name] = true
		m.mu.Unlock()
		if exists && !ours && r.State != provider.StateRunning {
			// What the backend shows is not in this process's memory:
			// start over under a name of its own.
			req.Name = fmt.Sprintf("%.50s-again", req.Name)
		}
	case "one-create-at-a-time":
		m.global.Lock()
		inst, err := m.mutant.Create(ctx, req)
		if err != nil || inst.State != provider.StateProvisioning {
			m.global.Unlock()
			return inst, err
		}
		go func() {
			// The step holds the provider-wide lock until it is done.
			defer m.global.Unlock()
			for {
				r, ok := m.Backend().Lookup(req.Name)
				if !ok || r.State == provider.StateRunning {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		return inst, err
	case "success-needs-create":
		m.mu.Lock()
		delete(m.awaiting, req.Name)
		m.mu.Unlock()
	}
	inst, err := m.mutant.Create(ctx, req)
	switch m.mode {
	case "create-blocks-past-bound":
		// Waits for the instance to run, as the earlier VM providers did.
		for err == nil && inst.State == provider.StateProvisioning && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
			inst, err = m.mutant.Get(ctx, inst.ID)
		}
	case "success-needs-create":
		if err == nil && inst.State == provider.StateProvisioning {
			m.mu.Lock()
			m.awaiting[req.Name] = true
			m.mu.Unlock()
		}
	}
	return m.slowPost(inst, err)
}

func (m *slowMutant) Get(ctx context.Context, id string) (provider.Instance, error) {
	name := strings.TrimPrefix(id, "fake/")
	if m.mode == "repeats-step-error" {
		m.mu.Lock()
		err := m.failed[name]
		m.mu.Unlock()
		if err != nil {
			return provider.Instance{}, err
		}
	}
	inst, err := m.mutant.Get(ctx, id)
	switch m.mode {
	case "repeats-step-error":
		if isStepFailure(err) {
			m.mu.Lock()
			m.failed[name] = err
			m.mu.Unlock()
		}
	case "success-needs-create":
		m.mu.Lock()
		waiting := m.awaiting[name]
		m.mu.Unlock()
		if waiting && err == nil {
			inst.State, inst.IP, inst.Progress = provider.StateProvisioning, "", "finishing"
		}
	case "restart-never-resumes":
		if err == nil && inst.State == provider.StateStopped {
			inst.State, inst.Progress = provider.StateProvisioning, "resuming"
		}
	}
	return m.slowPost(inst, err)
}

// slowPost breaks what Create and Get report the way the mode says.
func (m *slowMutant) slowPost(inst provider.Instance, err error) (provider.Instance, error) {
	switch m.mode {
	case "no-progress":
		inst.Progress = ""
	case "swallows-step-error":
		if isStepFailure(err) {
			return provider.Instance{ID: inst.ID, State: provider.StateProvisioning, Progress: "working"}, nil
		}
	case "step-error-is-transient":
		var pe *provider.Error
		if isStepFailure(err) && errors.As(err, &pe) {
			cp := *pe
			cp.Class = provider.ErrTransient
			cp.Err = errors.New("step failed")
			return inst, &cp
		}
	}
	return inst, err
}

// isStepFailure says whether err is a held step's failure.
func isStepFailure(err error) bool {
	return err != nil && strings.Contains(err.Error(), "held create step failed")
}

func (m *slowMutant) Delete(ctx context.Context, id string) error {
	if m.mode == "delete-leaves-create-running" {
		// Removes the instance, and leaves its create step running.
		m.Remove(strings.TrimPrefix(id, "fake/"))
		return nil
	}
	return m.mutant.Delete(ctx, id)
}
