package gcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// Seed gap (gcp): "Delete: submits a delete operation and returns ...
// Every deletion poll submits a new operation."
//
// Delete submits one delete operation and follows it; Deletes while it
// runs submit nothing (the earlier providers submitted one per poll, and the API
// answers a second delete with 403 rateLimitExceeded, which would read as a
// quota), and Get never reads the instance Running meanwhile.
func TestGapEveryDeletionPollSubmitsANewOperation(t *testing.T) {
	env, _, b := newBoundedTestProvider(t)
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
	env, p, b := newBoundedTestProvider(t)
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

// A Proxy deleted just after it was created: Delete cancels the create
// step after the API accepted its insert, while the insert's operation
// still runs, and nobody follows it any more. That is the race
// conformance's DeleteLeavesNothing met (2 in 15 runs), the step's insert
// answer lost to the cancellation; here also with the answer read and the
// step's wait for the operation cut. The API refuses to delete an instance
// its insert is still making (400 resourceNotReady); Delete meets the
// insert instead (the same insert again, under its request ID, is answered
// with its operation), waits for it and deletes the instance at once, as a
// Delete right after Create does on every provider.
func TestDeleteRightAfterCreateMeetsTheInsert(t *testing.T) {
	for _, answerLost := range []bool{true, false} {
		t.Run(map[bool]string{true: "insert answer lost", false: "operation wait cut"}[answerLost], func(t *testing.T) {
			env := gcptest.New(t)
			req := testRequest("del-inserting")
			b, inst := createCut(t, env, req, answerLost)
			if err := b.Delete(t.Context(), inst.ID); err != nil {
				t.Fatalf("Delete right after Create, its insert accepted and still running: %v", err)
			}
			deleteAndWait(t, b, inst.ID)
			inserts := 0
			for _, o := range env.Fake.Operations(testProject) {
				if o.GetOperationType() == "insert" && strings.HasSuffix(o.GetTargetLink(), "/instances/"+req.Name) {
					inserts++
				}
			}
			if inserts != 1 {
				t.Errorf("%d insert operations, want 1: the insert Delete met was another", inserts)
			}
			if env.Fake.Firewall(testProject, req.Name) != nil {
				t.Error("the rule outlived its instance")
			}
		})
	}
}

// An insert Delete could not meet (here the API refused the insert sent
// again) leaves that Delete to go on as before, Transient on the busy
// instance; the next Delete meets it. Only waits move the insert on here,
// so nothing but meeting it ends it.
func TestDeleteMeetsTheInsertAgainAfterAMiss(t *testing.T) {
	env := gcptest.New(t)
	env.Fake.SetAdvanceOnGet(false)
	b, inst := createCut(t, env, testRequest("del-missed"), true)
	failNext(env, "POST", insertPath, &fakecompute.APIError{Code: http.StatusInternalServerError, Reason: "backendError",
		Domain: "global", Message: "Internal error. Please try again or contact Google Support."})
	if err := b.Delete(t.Context(), inst.ID); !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("Delete whose insert was not met: %v; want Transient, busy", err)
	}
	if err := b.Delete(t.Context(), inst.ID); err != nil {
		t.Fatalf("the next Delete: %v; want the insert met, and the delete submitted", err)
	}
	deleteAndWait(t, b, inst.ID)
}

// createCut creates req over env under cutInsert and returns once the
// create step hangs with its insert accepted.
func createCut(t *testing.T, env *gcptest.Env, req provider.CreateRequest, answerLost bool) (provider.Provider, provider.Instance) {
	t.Helper()
	p := newTestProvider(t, env, nil)
	accepted := make(chan int, 1)
	p.wireSeam = cutInsert(answerLost, accepted)
	b := bounded(p)
	inst, err := b.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-accepted:
		if code != http.StatusOK {
			t.Fatalf("the create step's insert answered %d", code)
		}
	case <-time.After(provider.CallBound):
		t.Fatal("the create step sent no insert")
	}
	return b, inst
}

// cutInsert is a wire seam that leaves the create step's instance insert
// running at the API while the step hangs until its ctx ends, as a
// cancellation that lands then leaves it: with answerLost the insert's
// answer is lost, otherwise the step reads it and its wait for the
// operation hangs. accepted receives the insert's status once the step
// hangs.
func cutInsert(answerLost bool, accepted chan<- int) func(http.RoundTripper) http.RoundTripper {
	var once sync.Once
	code := 0
	hang := func(req *http.Request) (*http.Response, error) {
		once.Do(func() { accepted <- code })
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if httpobserve.OpOf(req.Context()) != httpobserve.OpCreateStep || req.Method != http.MethodPost {
				return next.RoundTrip(req)
			}
			switch path := req.URL.Path; {
			case strings.HasSuffix(path, "/instances"):
				resp, err := next.RoundTrip(req)
				if err != nil {
					return nil, err
				}
				code = resp.StatusCode
				if !answerLost {
					return resp, nil
				}
				resp.Body.Close()
				return hang(req)
			case strings.Contains(path, "/zones/") && strings.HasSuffix(path, "/wait"):
				return hang(req)
			}
			return next.RoundTrip(req)
		})
	}
}

// The insert of a cancelled create step may reach the API after Delete has
// read the instance (its request left before the cancellation, the API
// handles it later): Delete meets that insert before it reads, so the
// instance it then makes is the one it deletes, and the late request,
// under the same request ID, makes nothing more. The seam holds the create
// step's insert until Delete has returned; a Delete that read first would
// find nothing, and the late insert would leave an instance running.
func TestDeleteMeetsAnInsertTheAPIHandlesLate(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, nil)
	held := make(chan struct{})
	release := make(chan struct{})
	late := make(chan error, 1)
	p.wireSeam = func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if httpobserve.OpOf(req.Context()) != httpobserve.OpCreateStep || req.Method != http.MethodPost ||
				!strings.HasSuffix(req.URL.Path, "/instances") {
				return next.RoundTrip(req)
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			// On its way: the API gets it after Delete returned.
			lateReq := req.Clone(context.WithoutCancel(req.Context()))
			lateReq.Body = io.NopCloser(bytes.NewReader(body))
			go func() {
				<-release
				resp, err := next.RoundTrip(lateReq)
				if err == nil {
					resp.Body.Close()
				}
				late <- err
			}()
			close(held)
			<-req.Context().Done()
			return nil, req.Context().Err()
		})
	}
	b := bounded(p)
	req := testRequest("del-late-insert")
	inst, err := b.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	if err := b.Delete(t.Context(), inst.ID); err != nil {
		t.Fatalf("Delete with the create step's insert on its way: %v", err)
	}
	close(release)
	if err := <-late; err != nil {
		t.Fatalf("the late insert: %v", err)
	}
	// One Delete, as the reconciler makes when Delete succeeded: then
	// only Get, until the instance is gone.
	testenv.EventuallyNil(t, "instance "+inst.ID+" gone after one Delete", func() error {
		_, err := b.Get(t.Context(), inst.ID)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if in := env.Fake.Instance(testProject, testZone, req.Name); in != nil {
			return fmt.Errorf("instance %s is %s: the late insert made it", req.Name, in.GetStatus())
		}
		return err
	})
}
