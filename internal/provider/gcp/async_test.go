package gcp

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// insertRequestIDs are the requestIds of the inserts the fake saw, in
// order.
func insertRequestIDs(env *gcptest.Env) []string {
	var ids []string
	for _, r := range env.Fake.Requests() {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/instances") {
			ids = append(ids, r.Query.Get("requestId"))
		}
	}
	return ids
}

// Seed gap (gcp): "Asynchronous insert failures are never read: an insert
// the API accepts but that fails later (quota, bad image) is seen only as
// NotFound on the next Get, and the reconciler creates again."
//
// An insert the API accepts and then fails reaches the next call (Get or
// Create) with its class and its code, once; afterwards Get reads the
// instance Stopped (so the reconciler's next Create tries again, without
// an "instance lost"), and that Create inserts under a new request ID (the
// old one would only replay the failed operation) and gets the instance
// running. Every shape the API fails an insert in, with and without
// httpErrorStatusCode (the SDK's Wait returns nil without it).
func TestGapAsynchronousInsertFailuresAreNeverRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault *fakecompute.AsyncError
		class error
		code  string
	}{
		{"pool exhausted", fakecompute.ZoneResourcePoolExhausted(), provider.ErrQuotaExceeded, "ZONE_RESOURCE_POOL_EXHAUSTED"},
		{"pool exhausted with details", fakecompute.ZoneResourcePoolExhaustedWithDetails(), provider.ErrQuotaExceeded, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"},
		{"quota", fakecompute.QuotaExceededAsync("CPUS"), provider.ErrQuotaExceeded, "QUOTA_EXCEEDED"},
		{"image not found", fakecompute.ImageNotFound(), provider.ErrPermanent, "RESOURCE_NOT_FOUND"},
		{"machine type", fakecompute.InvalidMachineType(), provider.ErrPermanent, "UNSUPPORTED_OPERATION"},
		{"internal error", fakecompute.CustomAsyncError("INTERNAL_ERROR", "Internal error.", 500, "INTERNAL SERVER ERROR"), provider.ErrTransient, "INTERNAL_ERROR"},
		{"unknown code, 503", fakecompute.CustomAsyncError("SOMETHING_NEW", "New failure.", 503, "SERVICE UNAVAILABLE"), provider.ErrTransient, "SOMETHING_NEW"},
		{"unknown code, 400", fakecompute.CustomAsyncError("SOMETHING_NEW", "New failure.", 400, "BAD REQUEST"), provider.ErrPermanent, "SOMETHING_NEW"},
	} {
		for _, noHTTP := range []bool{false, true} {
			for _, next := range []string{provider.OpGet, provider.OpCreate} {
				fault := tc.fault
				label := tc.name
				if noHTTP {
					fault, label = fault.WithoutHTTPStatus(), label+" without httpErrorStatusCode"
				}
				if noHTTP && tc.class != provider.ErrQuotaExceeded && strings.HasPrefix(tc.code, "SOMETHING") {
					// Only the status told these apart; without it the
					// contract's default, Transient, applies.
					continue
				}
				t.Run(label+"/next "+next, func(t *testing.T) {
					env, p, b := newBoundedTestProvider(t)
					req := testRequest("async")
					env.Fake.FailNext(fakecompute.Fault{Method: "POST", Path: insertPath, Async: fault})
					inst, err := b.Create(t.Context(), req)
					if err != nil || inst.State != provider.StateProvisioning {
						t.Fatalf("Create: %+v, %v; want Provisioning", inst, err)
					}
					waitStep(t, p, req.Name)
					if env.Fake.Instance(testProject, testZone, req.Name) != nil {
						t.Fatal("a failed insert left an instance")
					}
					if next == provider.OpGet {
						_, err = b.Get(t.Context(), inst.ID)
					} else {
						_, err = b.Create(t.Context(), req)
					}
					if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.code) {
						t.Fatalf("%s after the insert failed: %v; want class %s naming %s", next, err, provider.ClassName(tc.class), tc.code)
					}
					// The error is the create's, whichever call receives it
					// (inflight.New(provider.OpCreate)).
					var pe *provider.Error
					if !errors.As(err, &pe) || pe.Provider != testName || pe.Op != provider.OpCreate {
						t.Errorf("error %v does not name provider %q and op %q", err, testName, provider.OpCreate)
					}
					// Handed over once: Get now reads it Stopped, with why.
					got, err := b.Get(t.Context(), inst.ID)
					if err != nil || got.State != provider.StateStopped || !strings.Contains(got.Progress, tc.code) {
						t.Fatalf("Get after the failure was reported: %+v, %v; want Stopped naming %s", got, err, tc.code)
					}
					ran := createRunning(t, b, req)
					if ran.ID != inst.ID {
						t.Errorf("running as %s, created as %s", ran.ID, inst.ID)
					}
					ids := insertRequestIDs(env)
					if len(ids) != 2 || ids[0] == ids[1] || ids[0] == "" {
						t.Errorf("insert request IDs %v: want two, different (a failed operation is not replayed)", ids)
					}
				})
			}
		}
	}
}

// The fake's own regional quota, as GCE enforces it: over CPUS the insert
// fails asynchronously with QUOTA_EXCEEDED, or synchronously with 403
// quotaExceeded; both are QuotaExceeded with the metric named.
func TestInsertOverRegionalQuotaIsQuotaExceeded(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("synchronous=%t", sync), func(t *testing.T) {
			env := gcptest.New(t)
			env.Fake.SetRegionQuota("us-central1", "CPUS", 2)
			env.Fake.SetQuotaSynchronous(sync)
			p := newTestProvider(t, env, nil)
			b := bounded(p)
			createRunning(t, b, testRequest("first"))
			req := testRequest("second")
			if _, err := b.Create(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			waitStep(t, p, req.Name)
			_, err := b.Get(t.Context(), formatID(testZone, req.Name))
			if !errors.Is(err, provider.ErrQuotaExceeded) || !strings.Contains(err.Error(), "CPUS") {
				t.Fatalf("Get: %v; want QuotaExceeded naming CPUS", err)
			}
		})
	}
}

// Rate limits on the insert itself (429, 403 rateLimitExceeded) are
// QuotaExceeded too: the reconciler backs off for minutes, not seconds.
func TestRateLimitedInsertIsQuotaExceeded(t *testing.T) {
	for _, fault := range []*fakecompute.APIError{fakecompute.TooManyRequests(), fakecompute.RateLimitExceeded(), fakecompute.QuotaExceeded("INSTANCES", 24, "us-central1")} {
		t.Run(fmt.Sprintf("%d %s", fault.Code, fault.Reason), func(t *testing.T) {
			env, p, b := newBoundedTestProvider(t)
			req := testRequest("limited")
			failNext(env, "POST", insertPath, fault)
			if _, err := b.Create(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			waitStep(t, p, req.Name)
			if _, err := b.Get(t.Context(), formatID(testZone, req.Name)); !errors.Is(err, provider.ErrQuotaExceeded) {
				t.Fatalf("Get: %v; want QuotaExceeded", err)
			}
		})
	}
}
