package providertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Slow is an optional extension of Backend: a backend with a step too slow
// for one call (an image download, a clone task, a boot wait) lets the
// suite hold that step, to prove that Create and Get still return within
// provider.CallBound and what happens when the step ends. A backend whose
// every step fits in one call (local, kubernetes) is not Slow, and the
// cases that need one are skipped.
type Slow interface {
	// HoldCreate holds the slow step of the next Create of the instance
	// named name until the hold is released. The case releases it at the
	// latest at its cleanup.
	HoldCreate(t *testing.T, name string) Hold
}

// Hold is one held step of a Create.
type Hold struct {
	// Release ends the hold: nil lets the step succeed, a class sentinel
	// (as in Backend.FailNext) makes it fail in a way the provider must
	// classify as that class. Only the first call counts.
	Release func(err error)
	// Progress, when set, makes the held step report detail as its
	// progress, and the suite expects Get to show exactly that. Nil for a
	// backend whose progress text cannot be scripted (a real download).
	Progress func(detail string)
	// Done, when set, is closed once the held step has ended: by the time
	// the call that stopped it (Delete, Restart) returns, and, for a step
	// released to succeed or fail, once the next Create or Get would report
	// its result. The suite waits for it instead of polling; without it the
	// checks that need it are skipped.
	Done <-chan struct{}
}

// Restarter is an optional extension of Backend: a backend that outlives
// its provider lets the suite restart the provider as an operator restart
// would. A backend that lives in the provider's process (local's
// listeners) is gone with it, so the case is skipped.
type Restarter interface {
	// Restart stops the current provider the way a killed process stops
	// (its memory and its background work end where they are; what it made
	// in the backend stays) and returns a fresh provider, with the same
	// installation, over the same backend. The Backend hooks act on the
	// fresh provider afterwards.
	Restart(t *testing.T) provider.Provider
}

// restart swaps the case's provider for a fresh one over the same backend.
func (e *env) restart(r Restarter) {
	e.t.Helper()
	var p provider.Provider
	guard(e.t, "Restarter.Restart", func() { p = r.Restart(e.t) })
	if p == nil {
		e.t.Fatal("Restarter.Restart returned no provider")
	}
	e.bind(p)
}

// slow returns the backend as a Slow, or skips the case.
func (e *env) slow() Slow {
	e.t.Helper()
	s, ok := e.b.(Slow)
	if !ok {
		e.t.Skip("backend has no step slower than one call (not a providertest.Slow): Create returns within provider.CallBound on its own")
	}
	return s
}

// hold holds name's create step and releases it (success) at cleanup.
func (e *env) hold(s Slow, name string) Hold {
	e.t.Helper()
	var h Hold
	guard(e.t, "Slow.HoldCreate", func() { h = s.HoldCreate(e.t, name) })
	if h.Release == nil {
		e.t.Fatalf("Slow.HoldCreate(%q) returned a Hold without Release", name)
	}
	e.t.Cleanup(func() { h.Release(nil) })
	return h
}

// createWithinBound makes a Create that must return within
// provider.CallBound, as no call may hold a reconcile worker longer. It
// fails the case when the call is still running then (the call is left to
// the case's cleanup, which releases what holds it).
func (e *env) createWithinBound(req provider.CreateRequest, why string) (provider.Instance, error) {
	e.t.Helper()
	type result struct {
		inst provider.Instance
		err  error
	}
	r, ok := within(provider.CallBound, func() result {
		inst, err := e.create(e.ctx, req)
		return result{inst, err}
	})
	if !ok {
		e.t.Fatalf("Create(%q) %s did not return within provider.CallBound (%v): it holds the reconcile worker", req.Name, why, provider.CallBound)
	}
	return r.inst, r.err
}

// getWithinBound is createWithinBound for Get.
func (e *env) getWithinBound(id, why string) (provider.Instance, error) {
	e.t.Helper()
	type result struct {
		inst provider.Instance
		err  error
	}
	r, ok := within(provider.CallBound, func() result {
		inst, err := e.get(e.ctx, id)
		return result{inst, err}
	})
	if !ok {
		e.t.Fatalf("Get(%q) %s did not return within provider.CallBound (%v)", id, why, provider.CallBound)
	}
	return r.inst, r.err
}

// expectProvisioning checks what Create or Get reports while the create
// step is held: Provisioning, no address, and a progress detail.
func (e *env) expectProvisioning(what string, inst provider.Instance, err error) bool {
	e.t.Helper()
	switch {
	case err != nil:
		e.t.Errorf("%s while its create step is held: %v, want Provisioning", what, err)
		return false
	case inst.State != provider.StateProvisioning:
		e.t.Errorf("%s while its create step is held reports state %q, want %q", what, inst.State, provider.StateProvisioning)
		return false
	case inst.Progress == "":
		e.t.Errorf("%s while its create step is held reports no Progress: the Ready message would not say what the backend is doing", what)
		return false
	case inst.IP != "":
		e.t.Errorf("%s while its create step is held reports IP %q; only a Running instance has one", what, inst.IP)
	}
	return true
}

// Rule: no call holds its caller longer than provider.CallBound: a Create
// whose backend step is slow returns within it, Provisioning with a
// progress detail that Get reads too, a second Create of it joins the step
// instead of starting another, and another Proxy's Create completes while
// the first is still held (no global lock). Needs a Slow backend.
func testSlowCreateReturnsWithinBound(t *testing.T, h Harness) {
	e := newEnv(t, h)
	s := e.slow()
	slowReq, fastReq := e.request("slow"), e.request("fast")
	hold := e.hold(s, slowReq.Name)

	inst, err := e.createWithinBound(slowReq, "whose backend step is held")
	if !e.expectProvisioning(fmt.Sprintf("Create(%q)", slowReq.Name), inst, err) {
		return
	}
	if inst.ID == "" {
		t.Fatalf("Create(%q) returned no ID: the reconciler could not record the instance", slowReq.Name)
	}
	got, err := e.getWithinBound(inst.ID, "while its create step is held")
	e.expectProvisioning(fmt.Sprintf("Get(%q)", inst.ID), got, err)
	if hold.Progress != nil {
		const detail = "downloading image debian-12: 212/400 MiB"
		hold.Progress(detail)
		e.eventually(fmt.Sprintf("Get(%q) reporting the step's progress %q", inst.ID, detail), func() (bool, string) {
			got, err := e.getWithinBound(inst.ID, "while its create step is held")
			if err != nil {
				return false, err.Error()
			}
			return got.Progress == detail, fmt.Sprintf("state %q progress %q", got.State, got.Progress)
		})
	}
	fast, err := e.createWithinBound(fastReq, "of another Proxy while the first one's step is held")
	if err != nil {
		t.Fatalf("Create(%q) of another Proxy while %q is held: %v", fastReq.Name, slowReq.Name, err)
	}
	if ran, ok := e.waitRunning(fast.ID); !ok {
		t.Fatalf("instance %q of another Proxy did not run while %q was held (last state %q)", fast.ID, inst.ID, ran.State)
	}
	// The reconciler after a lost status write: the second Create joins
	// the step in flight.
	again, err := e.createWithinBound(slowReq, "again while its create step is held")
	if e.expectProvisioning(fmt.Sprintf("second Create(%q)", slowReq.Name), again, err) && again.ID != inst.ID {
		t.Errorf("second Create(%q) returned ID %q, the first %q", slowReq.Name, again.ID, inst.ID)
	}
	if got, err := e.get(e.ctx, inst.ID); err != nil || got.State != provider.StateProvisioning {
		t.Errorf("Get(%q) with its step still held: state %q, error %v; want Provisioning", inst.ID, got.State, err)
	}

	hold.Release(nil)
	if ran, ok := e.waitRunning(inst.ID); !ok {
		t.Errorf("instance %q did not run once its step was released (last state %q)", inst.ID, ran.State)
	}
	if list := e.mustList(); len(list) != 2 {
		t.Errorf("ListByTag lists %v, want exactly %q and %q", ids(list), inst.ID, fast.ID)
	}
}

// Rule: the end of a background step reaches the caller without a new
// Create: a failure is the next Create's or Get's error, with its class,
// once (after it the reconciler can go on: the next Create resumes), and a
// success makes Get report Running. Needs a Slow backend.
func testBackgroundResultReachesNextCall(t *testing.T, h Harness) {
	newEnv(t, h).slow() // skips every subtest at once
	for _, class := range []error{provider.ErrTransient, provider.ErrPermanent, provider.ErrQuotaExceeded} {
		for _, next := range []string{provider.OpGet, provider.OpCreate} {
			t.Run("fails/"+className(class)+"/next "+next, func(t *testing.T) {
				e := newEnv(t, h)
				s := e.slow()
				req := e.request("step-fails")
				hold := e.hold(s, req.Name)
				inst, err := e.createWithinBound(req, "whose backend step is held")
				if !e.expectProvisioning(fmt.Sprintf("Create(%q)", req.Name), inst, err) {
					return
				}
				hold.Release(class)
				what := fmt.Sprintf("%s of %q after its create step failed with %s", next, req.Name, className(class))
				var failure error
				if next == provider.OpGet {
					// The step ends in the background: Get may still say
					// Provisioning for a moment, but the first answer that
					// is not Provisioning must be the failure.
					var last provider.Instance
					if !e.eventually(what, func() (bool, string) {
						got, err := e.getWithinBound(inst.ID, "after its create step was released")
						last, failure = got, err
						if err == nil && got.State == provider.StateProvisioning {
							return false, fmt.Sprintf("still Provisioning (%q)", got.Progress)
						}
						return true, ""
					}) {
						return
					}
					if failure == nil {
						t.Fatalf("%s: no error, state %q: the failure was swallowed", what, last.State)
					}
				} else {
					if hold.Done == nil {
						t.Skip("the backend cannot say when the held step ended (Hold.Done is nil)")
					}
					awaitDone(t, hold.Done, "the failed create step")
					_, failure = e.createWithinBound(req, "after its create step failed")
				}
				if !expectClass(t, what, failure, class) {
					return
				}
				var pe *provider.Error
				if errors.As(failure, &pe) && pe.Provider != h.Name {
					t.Errorf("%s names provider %q, want %q", what, pe.Provider, h.Name)
				}
				// Handed over once: the reconciler's next pass goes on, and
				// gets the instance running by calling Create again.
				e.driveToRunning(inst.ID, req, "after its create step's failure was reported")
			})
		}
	}
	t.Run("succeeds", func(t *testing.T) {
		e := newEnv(t, h)
		s := e.slow()
		req := e.request("step-succeeds")
		hold := e.hold(s, req.Name)
		inst, err := e.createWithinBound(req, "whose backend step is held")
		if !e.expectProvisioning(fmt.Sprintf("Create(%q)", req.Name), inst, err) {
			return
		}
		hold.Release(nil)
		// No Create from here on: Get alone must see the instance run.
		if got, ok := e.waitRunning(inst.ID); !ok {
			t.Errorf("instance %q did not reach Running after its create step succeeded, without a new Create (last state %q)", inst.ID, got.State)
		}
	})
}

// Rule: after an operator restart nothing is held in memory, and the
// reconciler's next passes (Get, and Create when Get says NotFound or
// Stopped) bring the instance to Running from what the backend shows, with
// exactly one instance: a crash at any point neither duplicates nor leaks.
// A Slow backend is restarted while the create step is held; any other
// after an ordinary Create. Needs a Restarter.
func testResumesAfterRestart(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r, ok := e.b.(Restarter)
	if !ok {
		t.Skip("backend does not outlive its provider (not a providertest.Restarter): a restart leaves nothing to resume")
	}
	req := e.request("restart")
	var hold *Hold
	if s, ok := e.b.(Slow); ok {
		h := e.hold(s, req.Name)
		hold = &h
	}
	inst, err := e.createWithinBound(req, "before the restart")
	if err != nil {
		t.Fatalf("Create(%q) before the restart: %v", req.Name, err)
	}
	e.restart(r)
	if hold != nil {
		// The old process is gone; releasing its hold must not finish
		// anything behind the new provider's back that it cannot see.
		hold.Release(nil)
		if hold.Done != nil {
			awaitDone(t, hold.Done, "the crashed provider's create step")
		}
	}
	e.driveToRunning(inst.ID, req, "after a restart")
	again, err := e.createWithinBound(req, "after the restart, once running")
	if err != nil || again.ID != inst.ID {
		t.Errorf("Create(%q) after the restart: ID %q, error %v; want the instance made before it, %q", req.Name, again.ID, err, inst.ID)
	}
	if list := e.mustList(); len(list) != 1 || list[0].ID != inst.ID {
		t.Errorf("ListByTag after the restart lists %v, want exactly [%s]: the restart duplicated or lost it", ids(list), inst.ID)
	}
}

// Rule: deleting a Proxy whose create is in flight leaves nothing behind:
// Delete cancels the create step and waits for it to stop (within
// provider.CallBound) before it removes anything, so the step can never
// re-create the instance afterwards. Needs a Slow backend.
func testDeleteCancelsInFlightCreate(t *testing.T, h Harness) {
	e := newEnv(t, h)
	s := e.slow()
	req := e.request("del-inflight")
	hold := e.hold(s, req.Name)
	inst, err := e.createWithinBound(req, "whose backend step is held")
	if !e.expectProvisioning(fmt.Sprintf("Create(%q)", req.Name), inst, err) {
		return
	}
	delErr, ok := within(provider.CallBound, func() error { return e.delete(e.ctx, inst.ID) })
	if !ok {
		t.Fatalf("Delete(%q) of an instance whose create is in flight did not return within provider.CallBound (%v)", inst.ID, provider.CallBound)
	}
	if delErr != nil {
		t.Fatalf("Delete(%q) of an instance whose create is in flight: %v", inst.ID, delErr)
	}
	if hold.Done != nil {
		select {
		case <-hold.Done:
		default:
			t.Errorf("Delete(%q) returned while the create step it must cancel was still running", inst.ID)
		}
	}
	// The world finishes what it was doing; a step still alive would now
	// complete the instance.
	hold.Release(nil)
	if hold.Done != nil {
		awaitDone(t, hold.Done, "the create step of the deleted instance")
	}
	if !e.waitGone(inst.ID) {
		return
	}
	if list := e.mustList(); len(list) != 0 {
		t.Errorf("ListByTag after deleting %q mid-create lists %v, want nothing", inst.ID, ids(list))
	}
	if in, ok := e.b.(Inspector); ok {
		if _, exists := in.Inspect(t, req.Name); exists {
			t.Errorf("the backend still holds %q after it was deleted mid-create", req.Name)
		}
	}
}

// driveToRunning does what the reconciler's passes do with a recorded ID
// until the instance runs: Get; NotFound or Stopped mean Create (which must
// return the same ID); Terminated means Delete (and Create once Get says
// NotFound); Provisioning means wait, through the harness's WaitRunning
// when it plays a part of the world. Transient errors are retried; others
// fail the case. An instance that stays Provisioning with nothing in the
// provider or the backend advancing it fails the case when PollTimeout
// runs out.
func (e *env) driveToRunning(id string, req provider.CreateRequest, why string) {
	e.t.Helper()
	create := func() string {
		got, err := e.createWithinBound(req, why)
		switch {
		case errors.Is(err, provider.ErrTransient):
			return "Create: " + err.Error()
		case err != nil:
			e.t.Fatalf("Create(%q) %s: %v", req.Name, why, err)
		case got.ID != id:
			e.t.Fatalf("Create(%q) %s returned ID %q, want the existing %q: it made a second instance", req.Name, why, got.ID, id)
		}
		return fmt.Sprintf("Create called, instance %q", got.State)
	}
	e.eventually(fmt.Sprintf("instance %q reaching Running %s, as the reconciler drives it", id, why), func() (bool, string) {
		got, err := e.getWithinBound(id, why)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			return false, "Get: NotFound; " + create()
		case errors.Is(err, provider.ErrTransient):
			return false, "Get: " + err.Error()
		case err != nil:
			e.t.Fatalf("Get(%q) %s: %v", id, why, err)
		}
		switch got.State {
		case provider.StateRunning:
			if got.IP == "" {
				e.t.Fatalf("Get(%q) %s: Running without an IP", id, why)
			}
			return true, ""
		case provider.StateStopped:
			return false, "Get: Stopped; " + create()
		case provider.StateTerminated:
			if err := e.delete(e.ctx, id); err != nil && !errors.Is(err, provider.ErrTransient) {
				e.t.Fatalf("Delete(%q) of a Terminated instance %s: %v", id, why, err)
			}
			return false, "Get: Terminated; Delete called"
		}
		if e.h.WaitRunning != nil {
			ran, ok := e.waitRunning(id)
			return ok, fmt.Sprintf("WaitRunning ended in state %q", ran.State)
		}
		return false, fmt.Sprintf("Get: %q with progress %q, and no Create is due: something in the provider or the backend must advance it", got.State, got.Progress)
	})
}

// awaitDone waits for a held step to end, bounded by livenessLimit.
func awaitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(livenessLimit):
		t.Fatalf("%s did not end within %v", what, livenessLimit)
	}
}
