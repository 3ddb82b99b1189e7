package fakecompute_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
)

// The recipe's trap: an operation that fails with only "error" set makes
// the SDK's Wait return nil; only op.Proto().GetError() tells. With
// httpErrorStatusCode set Wait returns an *apierror.APIError with it.
func TestAsyncFailureTrap(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	insertPath := "projects/*/zones/*/instances"

	e.fake.FailNext(fakecompute.Fault{Method: "POST", Path: insertPath, Async: fakecompute.ZoneResourcePoolExhausted().WithoutHTTPStatus()})
	op := e.insert(body("egress-a"))
	if err := op.Wait(e.ctx); err != nil {
		t.Fatalf("Wait without httpErrorStatusCode returned %v; the trap is that it returns nil", err)
	}
	oerr := op.Proto().GetError()
	if !op.Done() || len(oerr.GetErrors()) != 1 || oerr.GetErrors()[0].GetCode() != "ZONE_RESOURCE_POOL_EXHAUSTED" {
		t.Fatalf("operation after Wait: %v", op.Proto())
	}
	if op.Proto().HttpErrorStatusCode != nil {
		t.Fatalf("httpErrorStatusCode set: %d", op.Proto().GetHttpErrorStatusCode())
	}
	_, err := e.get("egress-a")
	wantAPIError(t, err, 404, "notFound", "was not found")

	e.fake.FailNext(fakecompute.Fault{Method: "POST", Path: insertPath, Async: fakecompute.ZoneResourcePoolExhausted()})
	op = e.insert(body("egress-b"))
	err = op.Wait(e.ctx)
	var aerr *apierror.APIError
	if !errors.As(err, &aerr) || aerr.HTTPCode() != http.StatusServiceUnavailable {
		t.Fatalf("Wait with httpErrorStatusCode 503: %T %v", err, err)
	}
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 503 || !strings.Contains(gerr.Message, "SERVICE UNAVAILABLE") ||
		!strings.Contains(gerr.Message, "ZONE_RESOURCE_POOL_EXHAUSTED") {
		t.Fatalf("googleapi.Error from Wait: %+v", gerr)
	}
	if op.Proto().GetError().GetErrors()[0].GetCode() != "ZONE_RESOURCE_POOL_EXHAUSTED" {
		t.Fatalf("operation error: %v", op.Proto().GetError())
	}
}

// Each asynchronous error as GCE writes it.
func TestAsyncErrorShapes(t *testing.T) {
	cases := []struct {
		name       string
		err        *fakecompute.AsyncError
		code, msg  string
		httpStatus int32
		httpMsg    string
		check      func(*testing.T, *computepb.Errors)
	}{
		{"pool exhausted", fakecompute.ZoneResourcePoolExhausted(), "ZONE_RESOURCE_POOL_EXHAUSTED",
			"The zone 'projects/proj-1/zones/us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.",
			503, "SERVICE UNAVAILABLE", func(t *testing.T, e *computepb.Errors) {
				if e.GetErrorDetails()[0].GetHelp().GetLinks()[0].GetUrl() != "https://cloud.google.com/compute/docs/resource-error" ||
					!strings.Contains(e.GetErrorDetails()[1].GetLocalizedMessage().GetMessage(), "A e2-small VM instance is currently unavailable in the us-central1-a zone.") {
					t.Errorf("details %v", e.GetErrorDetails())
				}
			}},
		{"pool exhausted with details", fakecompute.ZoneResourcePoolExhaustedWithDetails(), "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
			"The zone 'projects/proj-1/zones/us-central1-a' does not have enough resources available to fulfill the request.  '(resource type:compute)'.",
			503, "SERVICE UNAVAILABLE", func(t *testing.T, e *computepb.Errors) {
				info := e.GetErrorDetails()[2].GetErrorInfo()
				if info.GetReason() != "resource_availability" || info.GetMetadatas()["vmType"] != "e2-small" || info.GetMetadatas()["zone"] != zone {
					t.Errorf("errorInfo %v", info)
				}
			}},
		{"quota", fakecompute.QuotaExceededAsync("CPUS"), "QUOTA_EXCEEDED",
			"Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.", 403, "FORBIDDEN",
			func(t *testing.T, e *computepb.Errors) {
				q := e.GetErrorDetails()[0].GetQuotaInfo()
				if q.GetMetricName() != "compute.googleapis.com/cpus" || q.GetLimitName() != "CPUS-per-project-region" ||
					q.GetLimit() != 24 || q.GetDimensions()["region"] != region {
					t.Errorf("quotaInfo %v", q)
				}
			}},
		{"image", fakecompute.ImageNotFound(), "RESOURCE_NOT_FOUND",
			"The resource 'projects/debian-cloud/global/images/family/debian-12' was not found", 404, "NOT FOUND", nil},
		{"machine type", fakecompute.InvalidMachineType(), "UNSUPPORTED_OPERATION",
			"Machine type with name 'e2-small' does not exist in zone 'us-central1-a'.", 400, "BAD REQUEST", nil},
		{"custom", fakecompute.CustomAsyncError("IP_SPACE_EXHAUSTED", "IP space of 'x' is exhausted.", 0, ""),
			"IP_SPACE_EXHAUSTED", "IP space of 'x' is exhausted.", 0, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.fake.SetAdvanceOnGet(false)
			e.fake.FailNext(fakecompute.Fault{Method: "POST", Path: "projects/*/zones/*/instances", Async: c.err})
			op := e.insert(body("egress-a"))
			if op.Proto().GetStatus() != computepb.Operation_RUNNING || op.Proto().GetError() != nil {
				t.Fatalf("accepted operation: %v", op.Proto())
			}
			e.pollZoneOp(op.Name())
			got := e.pollZoneOp(op.Name())
			if got.GetStatus() != computepb.Operation_DONE || len(got.GetError().GetErrors()) != 1 {
				t.Fatalf("operation: %v", got)
			}
			item := got.GetError().GetErrors()[0]
			if item.GetCode() != c.code || item.GetMessage() != c.msg {
				t.Errorf("error %q %q, want %q %q", item.GetCode(), item.GetMessage(), c.code, c.msg)
			}
			if got.GetHttpErrorStatusCode() != c.httpStatus || got.GetHttpErrorMessage() != c.httpMsg {
				t.Errorf("http %d %q, want %d %q", got.GetHttpErrorStatusCode(), got.GetHttpErrorMessage(), c.httpStatus, c.httpMsg)
			}
			if c.check != nil {
				c.check(t, item)
			}
		})
	}
}

// A failed insert leaves no instance; its name stays taken until the
// operation is DONE, then a new insert is accepted. GETs of the name move
// the failing operation on, like the passing of time.
func TestFailedInsertReservesTheNameUntilDone(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(3)
	e.fake.FailNext(fakecompute.Fault{Method: "POST", Path: "projects/*/zones/*/instances", Async: fakecompute.ZoneResourcePoolExhausted()})
	op := e.insert(body("egress-a"))
	_, err := e.get("egress-a")
	wantAPIError(t, err, 404, "notFound", "was not found")
	_, err = e.insertErr(body("egress-a"), "")
	wantAPIError(t, err, 409, "alreadyExists", "already exists")
	_, _ = e.get("egress-a")
	_, _ = e.get("egress-a")
	if got := e.fake.Operation(project, op.Name()); got.GetStatus() != computepb.Operation_DONE || got.GetError() == nil {
		t.Fatalf("failing insert after three GETs: %v", got)
	}
	if _, err := e.insertErr(body("egress-a"), ""); err != nil {
		t.Fatalf("insert after the failure is DONE: %v", err)
	}
}

// An insert over the region's CPUS quota fails asynchronously with
// QUOTA_EXCEEDED and the limit, or synchronously with 403 quotaExceeded.
func TestRegionalQuota(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	e.fake.SetRegionQuota(region, "CPUS", 3)
	if err := e.insert(body("egress-a")).Wait(e.ctx); err != nil {
		t.Fatalf("first insert within quota: %v", err)
	}
	op := e.insert(body("egress-b"))
	err := op.Wait(e.ctx)
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 403 {
		t.Fatalf("Wait over quota: %v", err)
	}
	item := op.Proto().GetError().GetErrors()[0]
	if item.GetCode() != "QUOTA_EXCEEDED" || item.GetMessage() != "Quota 'CPUS' exceeded.  Limit: 3.0 in region us-central1." {
		t.Fatalf("quota error %v", item)
	}
	e.fake.SetQuotaSynchronous(true)
	_, err = e.insertErr(body("egress-c"), "")
	wantAPIError(t, err, 403, "quotaExceeded", "Quota 'CPUS' exceeded.  Limit: 3.0 in region us-central1.")

	e.fake.SetRegionQuota(region, "CPUS", 100)
	e.fake.SetRegionQuota(region, "IN_USE_ADDRESSES", 1)
	_, err = e.insertErr(body("egress-d"), "")
	wantAPIError(t, err, 403, "quotaExceeded", "Quota 'IN_USE_ADDRESSES' exceeded.  Limit: 1.0 in region us-central1.")
	internalOnly := body("egress-e")
	internalOnly.NetworkInterfaces[0].AccessConfigs = nil
	if _, err := e.insertErr(internalOnly, ""); err != nil {
		t.Fatalf("an internal-only instance needs no external address quota: %v", err)
	}
}

// Every synchronous error the fake can inject decodes in the SDK as the
// API's would: status, reason, message, and the apierror wrapper.
func TestSyncErrorsDecodeLikeTheAPI(t *testing.T) {
	cases := []struct {
		name   string
		err    *fakecompute.APIError
		code   int
		reason string
		msg    string
	}{
		{"not found", fakecompute.NotFound("projects/proj-1/zones/us-central1-a/instances/x"), 404, "notFound",
			"The resource 'projects/proj-1/zones/us-central1-a/instances/x' was not found"},
		{"already exists", fakecompute.AlreadyExists("{resource}"), 409, "alreadyExists",
			"The resource 'projects/proj-1/zones/us-central1-a/instances/egress-a' already exists"},
		{"forbidden", fakecompute.Forbidden("compute.instances.create", "{resource}"), 403, "forbidden",
			"Required 'compute.instances.create' permission for 'projects/proj-1/zones/us-central1-a/instances/egress-a'"},
		{"quota", fakecompute.QuotaExceeded("INSTANCES", 24, region), 403, "quotaExceeded",
			"Quota 'INSTANCES' exceeded.  Limit: 24.0 in region us-central1."},
		{"rate limit 403", fakecompute.RateLimitExceeded(), 403, "rateLimitExceeded",
			"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com' for consumer 'project_number:"},
		{"rate limit 429", fakecompute.TooManyRequests(), 429, "rateLimitExceeded", "Read requests per minute"},
		{"invalid", fakecompute.Invalid("resource.name", "X", "Must be a match of regex"), 400, "invalid",
			"Invalid value for field 'resource.name': 'X'. Must be a match of regex"},
		{"condition not met", fakecompute.ConditionNotMet(), 412, "conditionNotMet", "Labels fingerprint"},
		{"not ready", fakecompute.ResourceNotReady("{resource}"), 400, "resourceNotReady", "is not ready"},
		{"backend", fakecompute.BackendError(), 503, "backendError", "Internal error. Please try again or contact Google Support."},
		{"unauthenticated", fakecompute.Unauthenticated(false), 401, "authError", "Request had invalid authentication credentials."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.fake.FailNext(fakecompute.Fault{Method: "POST", Path: "projects/*/zones/*/instances", Times: fakecompute.Always, Err: c.err})
			_, err := e.insertErr(body("egress-a"), "")
			gerr := wantAPIError(t, err, c.code, c.reason, c.msg)
			var aerr *apierror.APIError
			if !errors.As(err, &aerr) || aerr.HTTPCode() != c.code {
				t.Errorf("not wrapped in an *apierror.APIError with HTTP %d: %T", c.code, err)
			}
			var b struct {
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
					Errors  []struct {
						Message, Domain, Reason string
					} `json:"errors"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(gerr.Body), &b); err != nil {
				t.Fatalf("body %q: %v", gerr.Body, err)
			}
			if b.Error.Code != c.code || len(b.Error.Errors) != 1 || b.Error.Errors[0].Message != b.Error.Message ||
				(b.Error.Errors[0].Domain != "global" && b.Error.Errors[0].Domain != "usageLimits") {
				t.Errorf("body %s", gerr.Body)
			}
			if n := len(e.fake.Instances(project)); n != 0 {
				t.Errorf("a refused insert created %d instances", n)
			}
		})
	}
}

// Faults count their calls, match by method and path pattern, and the
// SDK's own retry of a GET on 503 shows in the request log.
func TestFaultsTimesPatternsAndSDKRetry(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	e.insert(body("egress-a"))
	e.fake.FailNext(fakecompute.Fault{Method: "GET", Path: "projects/*/zones/*/instances/*", Times: 2, Err: fakecompute.Forbidden("compute.instances.get", "{resource}")})
	for i := 0; i < 2; i++ {
		_, err := e.get("egress-a")
		wantAPIError(t, err, 403, "forbidden", "Required 'compute.instances.get' permission for 'projects/proj-1/zones/us-central1-a/instances/egress-a'")
	}
	if _, err := e.get("egress-a"); err != nil {
		t.Fatalf("third get after a two-call fault: %v", err)
	}
	// Another method or path is not hit.
	e.fake.FailNext(fakecompute.Fault{Method: "DELETE", Path: "projects/*/zones/*/instances/**", Err: fakecompute.BackendError()})
	if _, err := e.get("egress-a"); err != nil {
		t.Fatalf("a DELETE fault hit a GET: %v", err)
	}
	e.fake.ClearFaults()

	e.fake.ClearRequests()
	e.fake.FailNext(fakecompute.Fault{Method: "GET", Path: "projects/*/zones/*/instances/egress-a", Err: fakecompute.BackendError()})
	if _, err := e.get("egress-a"); err != nil {
		t.Fatalf("the SDK retries a GET on 503 by itself; got %v", err)
	}
	if n := e.fake.Count("GET", "projects/*/zones/*/instances/egress-a"); n != 2 {
		t.Fatalf("%d GETs logged, want 2 (the 503 and the SDK's retry)", n)
	}
	reqs := e.fake.Requests()
	if reqs[0].Status != 503 || reqs[1].Status != 200 {
		t.Fatalf("statuses %d %d", reqs[0].Status, reqs[1].Status)
	}
	// A mutation is not retried.
	e.fake.FailNext(fakecompute.Fault{Method: "POST", Path: "projects/*/zones/*/instances", Err: fakecompute.BackendError()})
	_, err := e.insertErr(body("egress-b"), "")
	wantAPIError(t, err, 503, "backendError", "Internal error")
	if n := e.fake.Count("POST", "projects/*/zones/*/instances"); n != 1 {
		t.Fatalf("%d inserts logged, want 1", n)
	}
}

// An async fault on delete leaves the instance; on a firewall insert it
// leaves no rule.
func TestAsyncFaultsOnOtherOperations(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	e.insert(body("egress-a")).Wait(e.ctx)
	e.fake.FailNext(fakecompute.Fault{Method: "DELETE", Path: "projects/*/zones/*/instances/*",
		Async: fakecompute.CustomAsyncError("RESOURCE_IN_USE_BY_ANOTHER_RESOURCE", "in use", 400, "BAD REQUEST")})
	del, err := e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := del.Wait(e.ctx); err == nil {
		t.Fatal("Wait of a failing delete returned nil though httpErrorStatusCode is set")
	}
	if st := e.mustGet("egress-a").GetStatus(); st != "RUNNING" {
		t.Fatalf("after a failed delete: %s", st)
	}
	e.fake.FailNext(fakecompute.Fault{Method: "POST", Path: "projects/*/global/firewalls", Async: fakecompute.CustomAsyncError("QUOTA_EXCEEDED", "Quota 'FIREWALLS' exceeded.", 403, "FORBIDDEN")})
	op, err := e.fw.Insert(e.ctx, &computepb.InsertFirewallRequest{Project: project, FirewallResource: rule("egress-a-3128")})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(e.ctx); err == nil {
		t.Fatal("Wait of a failing firewall insert returned nil")
	}
	if e.fake.Firewall(project, "egress-a-3128") != nil {
		t.Fatal("a failed firewall insert left a rule")
	}
}

// RequireToken answers 401 without the bearer token, as the front end does.
func TestRequireToken(t *testing.T) {
	e := newEnv(t)
	e.fake.RequireToken("t0ken")
	_, err := e.pc.Get(e.ctx, &computepb.GetProjectRequest{Project: project})
	wantAPIError(t, err, 401, "required", "Request is missing required authentication credential.")
	resp, b := e.raw("GET", "/compute/v1/projects/proj-1")
	if resp.StatusCode != 401 || !strings.Contains(string(b), `"status":"UNAUTHENTICATED"`) {
		t.Fatalf("raw 401: %d %s", resp.StatusCode, b)
	}
	req, _ := http.NewRequestWithContext(e.ctx, "GET", e.srv.URL+"/compute/v1/projects/proj-1", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	r2, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	req.Header.Set("Authorization", "Bearer t0ken")
	r3, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r3.Body.Close()
	if r2.StatusCode != 401 || r3.StatusCode != 200 {
		t.Fatalf("wrong token %d, right token %d", r2.StatusCode, r3.StatusCode)
	}
}

// A path no API serves is the front end's HTML 404, which the SDK decodes
// without a message.
func TestUnknownPathIsTheFrontEnd404(t *testing.T) {
	e := newEnv(t)
	resp, b := e.raw("GET", "/compute/v1/projects/proj-1/zones/us-central1-a/instances/x/bogus")
	if resp.StatusCode != 404 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(b), "<title>Error 404 (Not Found)!!1</title>") ||
		!strings.Contains(string(b), "The requested URL <code>/compute/v1/projects/proj-1/zones/us-central1-a/instances/x/bogus</code> was not found on this server.") {
		t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	resp, _ = e.raw("PUT", "/compute/v1/projects/proj-1/zones/us-central1-a/instances/x")
	if resp.StatusCode != 404 {
		t.Fatalf("unserved method: %d", resp.StatusCode)
	}
	// The SDK's view: Code 404, no Message, no Errors.
	_, err := e.ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: zone, Instance: "x/bogus"})
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 404 || gerr.Message != "" || len(gerr.Errors) != 0 {
		t.Fatalf("SDK decoding of the HTML 404: %#v", err)
	}
}

// The request log has what tests assert on, and never a metadata value.
func TestRequestLog(t *testing.T) {
	e := newEnv(t)
	e.insert(body("egress-a"))
	reqs := e.fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/compute/v1/projects/proj-1/zones/us-central1-a/instances" || r.Status != 200 ||
		r.RequestParams != "project=proj-1&zone=us-central1-a" || r.Authorized {
		t.Fatalf("logged %+v", r)
	}
	if strings.Contains(r.Body, "s3cret") || !strings.Contains(r.Body, `"value":"<31 bytes>"`) {
		t.Fatalf("body summary %s", r.Body)
	}
	if !strings.Contains(r.Body, `"name":"egress-a"`) {
		t.Fatalf("body summary without the name: %s", r.Body)
	}
	if s := r.String(); s != "POST /compute/v1/projects/proj-1/zones/us-central1-a/instances -> 200" {
		t.Fatalf("String %q", s)
	}
}

func rule(name string) *computepb.Firewall {
	return &computepb.Firewall{
		Name: proto.String(name), Network: proto.String("global/networks/default"), Direction: proto.String("INGRESS"),
		SourceRanges: []string{"10.0.0.0/8"}, TargetTags: []string{"egress-proxy-6f1c2a"},
		Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"3128"}}},
	}
}

// A label error carries an ErrorInfo detail (INVALID_FIELD_VALUE) as newer
// answers do. The SDK keeps it in googleapi.Error.Details, but
// apierror.APIError.Reason() stays empty: the body's errors[] keeps apierror
// from parsing details, so a provider reads googleapi.Error.Errors[0].Reason.
func TestLabelErrorDetailsAndApierrorReason(t *testing.T) {
	e := newEnv(t)
	b := body("egress-a")
	b.Labels["uid"] = "A"
	_, err := e.insertErr(b, "")
	gerr := wantAPIError(t, err, 400, "invalid", "Label value 'A' violates format constraints.")
	if len(gerr.Details) != 1 || !strings.Contains(fmt.Sprint(gerr.Details[0]), "INVALID_FIELD_VALUE") {
		t.Fatalf("details %v", gerr.Details)
	}
	var aerr *apierror.APIError
	if !errors.As(err, &aerr) || aerr.Reason() != "" {
		t.Fatalf("apierror reason %q", aerr.Reason())
	}
}
