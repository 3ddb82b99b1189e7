package gcp

import (
	"errors"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// Seed gap (gcp): "Delete: submits a delete operation and returns ...
// Every deletion poll submits a new operation."
//
// Delete submits one delete operation and follows it; Deletes while it
// runs submit nothing (the earlier providers submitted one per poll, and the API
// answers a second delete with 403 rateLimitExceeded, which would read as a
// quota), and Get never reads the instance Running meanwhile.
func TestGapEveryDeletionPollSubmitsANewOperation(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, nil)
	b := bounded(p)
	req := testRequest("del-once")
	inst := createRunning(t, b, req)
	// Hold the delete's operation: the wait answers before it is DONE.
	env.Fake.SetOperationPolls(1000)
	env.Fake.SetWaitPolls(1)
	for i := 0; i < 5; i++ {
		if err := b.Delete(t.Context(), inst.ID); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
		got, err := b.Get(t.Context(), inst.ID)
		if err != nil {
			t.Fatalf("Get while the delete runs: %v", err)
		}
		if got.State == provider.StateRunning || got.IP != "" {
			t.Fatalf("Get while the delete runs: %+v; an instance being deleted never reads Running", got)
		}
	}
	if n := env.Fake.Count("DELETE", instancePath(req.Name)); n != 1 {
		t.Fatalf("%d deletes submitted, want 1", n)
	}
	env.Fake.SetOperationPolls(2)
	env.Fake.SetWaitPolls(0)
	env.Fake.Settle()
	deleteAndWait(t, b, inst.ID)
	if n := env.Fake.Count("DELETE", instancePath(req.Name)); n != 1 {
		t.Errorf("%d deletes submitted in all, want 1", n)
	}
	if env.Fake.Firewall(testProject, req.Name) != nil {
		t.Error("the rule outlived its instance")
	}
}

// After a restart nothing in memory says a delete runs: the next Delete
// submits under the same request ID (derived from the instance), which the
// API answers with the operation already running, not a second delete.
func TestDeleteAfterRestartMeetsTheRunningOperation(t *testing.T) {
	env := gcptest.New(t)
	first := newTestProvider(t, env, nil)
	req := testRequest("del-restart")
	inst := createRunning(t, bounded(first), req)
	env.Fake.SetOperationPolls(1000)
	env.Fake.SetWaitPolls(1)
	if err := bounded(first).Delete(t.Context(), inst.ID); err != nil {
		t.Fatal(err)
	}
	_ = first.Close()
	second := bounded(newTestProvider(t, env, nil))
	if err := second.Delete(t.Context(), inst.ID); err != nil {
		t.Fatalf("Delete after the restart: %v", err)
	}
	if ops := deleteOps(env, req.Name); ops != 1 {
		t.Errorf("%d delete operations, want 1: the second Delete started another", ops)
	}
	if n := env.Fake.Count("DELETE", instancePath(req.Name)); n != 2 {
		t.Errorf("%d delete requests, want 2 (the second answered with the first's operation)", n)
	}
}

// A delete that fails is the next Delete's error, with its class, and the
// one after submits again (a new request ID).
func TestFailedDeleteIsReportedAndRetried(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, nil)
	b := bounded(p)
	req := testRequest("del-fails")
	inst := createRunning(t, b, req)
	env.Fake.FailNext(fakecompute.Fault{Method: "DELETE", Path: instancePath(req.Name),
		Async: fakecompute.CustomAsyncError("RESOURCE_IN_USE_BY_ANOTHER_RESOURCE", "The instance is in use.", 400, "BAD REQUEST")})
	if err := b.Delete(t.Context(), inst.ID); err != nil {
		t.Fatal(err)
	}
	waitDeleteStep(t, p, req.Name)
	err := b.Delete(t.Context(), inst.ID)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE") {
		t.Fatalf("Delete after the failed delete: %v", err)
	}
	deleteAndWait(t, b, inst.ID)
	// The retry first replays the failed request ID (the API answers with
	// the failed operation: no new one), then submits under the next.
	if ops := deleteOps(env, req.Name); ops != 2 {
		t.Errorf("%d delete operations, want 2 (the failed one and the retry)", ops)
	}
}

func deleteOps(env *gcptest.Env, name string) int {
	n := 0
	for _, o := range env.Fake.Operations(testProject) {
		if o.GetOperationType() == "delete" && strings.HasSuffix(o.GetTargetLink(), "/instances/"+name) {
			n++
		}
	}
	return n
}

// An instance busy with another operation (an insert still running, a
// second delete from another process) is Transient for Delete, never the
// quota class the API's 403 rateLimitExceeded would give.
func TestDeleteOfABusyInstanceIsTransient(t *testing.T) {
	for _, mode := range []fakecompute.RepeatDelete{fakecompute.RepeatDeleteRateLimited, fakecompute.RepeatDeleteNotReady} {
		env := gcptest.New(t)
		env.Fake.SetRepeatDelete(mode)
		b := bounded(newTestProvider(t, env, nil))
		req := testRequest("busy")
		inst := createRunning(t, b, req)
		env.Fake.SetOperationPolls(1000)
		// Someone else's delete runs.
		if code := human(t, env, "DELETE", instancePath(req.Name), nil, nil); code != 200 {
			t.Fatal(code)
		}
		err := b.Delete(t.Context(), inst.ID)
		if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "busy") {
			t.Errorf("mode %d: Delete of an instance being deleted by someone else: %v; want Transient", mode, err)
		}
	}
}
