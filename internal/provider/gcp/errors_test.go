package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// Every answer the fake gives as the API does, decoded by the real SDK,
// classified as the provider classifies it: for a read of the instance
// (where a 404 naming it is NotFound) and for an insert (where a 404 is a
// missing image or network: Permanent).
func TestClassifyAPIErrors(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, nil)
	api, err := p.client()
	if err != nil {
		t.Fatal(err)
	}
	const name = "proxy-classify"
	target := p.instanceTarget(testZone, name)
	for _, tc := range []struct {
		name      string
		fault     *fakecompute.APIError
		read      error // class for GET of the instance
		insert    error // class for an insert
		wantInMsg string
	}{
		{"404 of the instance", fakecompute.NotFound("{resource}"), provider.ErrNotFound, provider.ErrPermanent, "was not found"},
		{"404 of the project", fakecompute.NotFound("projects/other"), provider.ErrPermanent, provider.ErrPermanent, "projects/other"},
		{"403 forbidden", fakecompute.Forbidden("compute.instances.get", "{resource}"), provider.ErrPermanent, provider.ErrPermanent, "Required 'compute.instances.get'"},
		{"403 quotaExceeded", fakecompute.QuotaExceeded("CPUS", 24, "us-central1"), provider.ErrQuotaExceeded, provider.ErrQuotaExceeded, "Quota 'CPUS'"},
		{"403 rateLimitExceeded", fakecompute.RateLimitExceeded(), provider.ErrQuotaExceeded, provider.ErrQuotaExceeded, "Queries per minute"},
		{"429", fakecompute.TooManyRequests(), provider.ErrQuotaExceeded, provider.ErrQuotaExceeded, "Read requests"},
		{"401", fakecompute.Unauthenticated(false), provider.ErrTransient, provider.ErrTransient, "invalid authentication credentials"},
		{"400 invalid", fakecompute.Invalid("resource.machineType", "zones/z/machineTypes/x", "The URL is malformed."), provider.ErrPermanent, provider.ErrPermanent, "machineType"},
		{"400 resourceNotReady", fakecompute.ResourceNotReady("{resource}"), provider.ErrTransient, provider.ErrTransient, "is not ready"},
		{"409", fakecompute.AlreadyExists("{resource}"), provider.ErrTransient, provider.ErrTransient, "already exists"},
		{"412", fakecompute.ConditionNotMet(), provider.ErrTransient, provider.ErrTransient, "fingerprint"},
		{"500", &fakecompute.APIError{Code: 500, Reason: "backendError", Domain: "global", Message: "Internal error."}, provider.ErrTransient, provider.ErrTransient, "Internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failNext(env, "GET", instancePath(name), tc.fault)
			_, err := api.GetInstance(t.Context(), testZone, name)
			got := classify(err, call{what: "reading", target: target})
			if !errors.Is(got, tc.read) || !strings.Contains(got.Error(), tc.wantInMsg) {
				t.Errorf("read: %v; want class %s with %q", got, provider.ClassName(tc.read), tc.wantInMsg)
			}
			if got := classify(err, call{what: "inserting"}); !errors.Is(got, tc.insert) {
				t.Errorf("insert: %v; want class %s", got, provider.ClassName(tc.insert))
			}
		})
	}
}

// Trap 5 of the fake: the SDK retries its GETs on 503 by itself, so a 503
// that lasts is a slow call, ended by its budget (Transient), and a brief
// one is no error at all.
func TestSDKRetriesGETOn503(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, nil)
	api, err := p.client()
	if err != nil {
		t.Fatal(err)
	}
	env.Fake.FailNext(fakecompute.Fault{Method: "GET", Path: instancePath("proxy-x"), Err: fakecompute.BackendError()})
	_, err = api.GetInstance(t.Context(), testZone, "proxy-x")
	if got := classify(err, call{what: "reading", target: p.instanceTarget(testZone, "proxy-x")}); !errors.Is(got, provider.ErrNotFound) {
		t.Fatalf("after one 503 the SDK's retry reached the API: %v; want its NotFound", got)
	}
	if n := env.Fake.Count("GET", instancePath("proxy-x")); n != 2 {
		t.Errorf("%d GETs, want 2 (the SDK retried once)", n)
	}
}

// Trap 7: a wrong endpoint answers the front end's HTML 404 for every path.
// That is never "instance gone" (the reconciler would create again and
// again): Permanent, saying to check the endpoint, without the HTML.
func TestWrongEndpointIsNeverNotFound(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, func(c *Config) { c.Endpoint = env.Endpoint() + "/wrong" })
	b := bounded(p)
	_, err := b.Get(t.Context(), formatID(testZone, "proxy-a"))
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "check the entry's endpoint") || strings.Contains(err.Error(), "<html") {
		t.Fatalf("Get through a wrong endpoint: %v", err)
	}
	res := checked(p).Check(t.Context())
	if res.Healthy || res.Reason != provider.ReasonAPIError || !strings.Contains(res.Message, "endpoint") {
		t.Fatalf("Check through a wrong endpoint: %+v", res)
	}
}

// An operation's error is read from the operation itself, its codes first:
// a quota failure comes with httpErrorStatusCode 403, which alone would read
// as forbidden; without any status the codes alone decide (the SDK's Wait
// returns nil then).
func TestOpErrorClasses(t *testing.T) {
	op := func(status int32, codes ...string) *computepb.Operation {
		o := &computepb.Operation{Name: proto.String("operation-1"), Status: computepb.Operation_DONE.Enum()}
		if status != 0 {
			o.HttpErrorStatusCode = proto.Int32(status)
			o.HttpErrorMessage = proto.String(http.StatusText(int(status)))
		}
		if len(codes) > 0 {
			o.Error = &computepb.Error{}
			for _, c := range codes {
				o.Error.Errors = append(o.Error.Errors, &computepb.Errors{Code: proto.String(c), Message: proto.String("m " + c)})
			}
		}
		return o
	}
	for _, tc := range []struct {
		op    *computepb.Operation
		class error
	}{
		{op(0), nil},
		{op(403, "QUOTA_EXCEEDED"), provider.ErrQuotaExceeded},
		{op(0, "QUOTA_EXCEEDED"), provider.ErrQuotaExceeded},
		{op(503, "ZONE_RESOURCE_POOL_EXHAUSTED"), provider.ErrQuotaExceeded},
		{op(0, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"), provider.ErrQuotaExceeded},
		{op(0, "IP_SPACE_EXHAUSTED"), provider.ErrQuotaExceeded},
		{op(404, "RESOURCE_NOT_FOUND"), provider.ErrPermanent},
		{op(0, "UNSUPPORTED_OPERATION"), provider.ErrPermanent},
		{op(0, "RESOURCE_NOT_READY"), provider.ErrTransient},
		{op(500, "SOMETHING"), provider.ErrTransient},
		{op(429, "SOMETHING"), provider.ErrQuotaExceeded},
		{op(400, "SOMETHING"), provider.ErrPermanent},
		{op(0, "SOMETHING"), provider.ErrTransient},
		{op(503), provider.ErrTransient},
		{op(0, "INTERNAL_ERROR", "QUOTA_EXCEEDED"), provider.ErrQuotaExceeded},
	} {
		err := opError(tc.op, "insert of instance x")
		name := fmt.Sprintf("%d %s", tc.op.GetHttpErrorStatusCode(), opCodes(tc.op))
		switch {
		case tc.class == nil && err != nil:
			t.Errorf("%s: %v, want no error", name, err)
		case tc.class != nil && !errors.Is(err, tc.class):
			t.Errorf("%s: %v, want %s", name, err, provider.ClassName(tc.class))
		case tc.class != nil && !strings.Contains(err.Error(), "operation-1"):
			t.Errorf("%s: %v does not name the operation", name, err)
		}
	}
	running := &computepb.Operation{Status: computepb.Operation_RUNNING.Enum(), Error: &computepb.Error{Errors: []*computepb.Errors{{Code: proto.String("X")}}}}
	if err := opError(running, "x"); err != nil {
		t.Errorf("a running operation has no result yet: %v", err)
	}
}

// A cancelled or timed-out call is Transient, never its cause's class.
func TestClassifyContextErrors(t *testing.T) {
	for _, err := range []error{context.Canceled, context.DeadlineExceeded, fmt.Errorf("Get: %w", context.DeadlineExceeded)} {
		if got := classify(err, call{what: "x", target: "t"}); !errors.Is(got, provider.ErrTransient) {
			t.Errorf("%v: %v", err, got)
		}
	}
}
