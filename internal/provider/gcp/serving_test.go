package gcp

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// testClock is the provider's clock in these tests: it moves only when
// told.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// servingProvider is a provider over env with a clock of its own, and the
// same provider behind the method boundary.
func servingProvider(t *testing.T, env *gcptest.Env) (*Provider, provider.Provider, *testClock) {
	t.Helper()
	clk := &testClock{t: time.Now().Truncate(time.Second)}
	p := newTestProvider(t, env, nil)
	p.now = clk.Now
	return p, bounded(p), clk
}

// guestReports writes r as the instance's guest reporter does.
func guestReports(t *testing.T, env *gcptest.Env, name string, r servingreport.Report) {
	t.Helper()
	if err := env.Fake.SetGuestAttribute(testProject, testZone, name, servingreport.GuestAttributeNamespace, servingreport.GuestAttributeKey,
		servingreport.Format(r)+"\n"); err != nil {
		t.Fatal(err)
	}
}

// reads counts the instance's getGuestAttributes calls.
func reads(env *gcptest.Env, name string) int {
	return count(env, "GET", instancePath(name)+"/getGuestAttributes")
}

// A running instance is not Ready (NotAnswering) until its guest reports
// serving: 404 first (not reported yet), then the report, read once per
// interval; "stopped answering" once the guest says serving=no after an
// earlier answer; cloud-init's error line reaches SetupError; a withdrawn
// report is "not reported yet" again.
func TestGetReadsTheGuestsServingReport(t *testing.T) {
	env := gcptest.New(t)
	_, p, clk := servingProvider(t, env)
	req := testRequest("serving")
	inst := createRunning(t, p, req)
	if inst.Serving != provider.ServingNotAnswering || inst.ServingDetail != notReportedYet {
		t.Fatalf("running before any report: serving %q detail %q, want NotAnswering %q", inst.Serving, inst.ServingDetail, notReportedYet)
	}

	step := func(name string, r *servingreport.Report, want provider.Serving, detail, setupErr string) provider.Instance {
		t.Helper()
		if r != nil {
			r.Checked = clk.Now()
			guestReports(t, env, req.Name, *r)
		} else if err := env.Fake.DeleteGuestAttribute(testProject, testZone, req.Name, servingreport.GuestAttributeNamespace, servingreport.GuestAttributeKey); err != nil {
			t.Fatal(err)
		}
		clk.Add(servingreport.Interval)
		got, err := p.Get(t.Context(), inst.ID)
		if err != nil {
			t.Fatalf("%s: Get: %v", name, err)
		}
		if got.State != provider.StateRunning || got.Serving != want || !strings.Contains(got.ServingDetail, detail) || got.SetupError != setupErr {
			t.Errorf("%s: %s serving %q detail %q setup error %q; want Running %q, detail with %q, setup error %q",
				name, got.State, got.Serving, got.ServingDetail, got.SetupError, want, detail, setupErr)
		}
		return got
	}
	answered := clk.Now()
	step("cloud-init running", &servingreport.Report{CloudInit: servingreport.CloudInitRunning},
		provider.ServingNotAnswering, "not answering yet (cloud-init: running)", "")
	got := step("serving", &servingreport.Report{Serving: true, Answered: answered, Version: "5.7", CloudInit: servingreport.CloudInitDone},
		provider.ServingAnswering, "", "")
	if !got.LastAnswered.Equal(answered) {
		t.Errorf("LastAnswered %v, want %v", got.LastAnswered, answered)
	}
	step("stopped answering", &servingreport.Report{Answered: answered, CloudInit: servingreport.CloudInitDone},
		provider.ServingNotAnswering, "it last answered at "+answered.UTC().Format(time.RFC3339), "")
	step("cloud-init failed", &servingreport.Report{CloudInit: servingreport.CloudInitError, CloudInitError: "('scripts_user', RuntimeError('runparts: 1 failed'))"},
		provider.ServingNotAnswering, "cloud-init: error", "('scripts_user', RuntimeError('runparts: 1 failed'))")
	step("withdrawn", nil, provider.ServingNotAnswering, notReportedYet, "")

	if err := env.Fake.SetGuestAttribute(testProject, testZone, req.Name, servingreport.GuestAttributeNamespace, servingreport.GuestAttributeKey, "serving=maybe\n"); err != nil {
		t.Fatal(err)
	}
	clk.Add(servingreport.Interval)
	if got, err := p.Get(t.Context(), inst.ID); err != nil || got.Serving != provider.ServingNotAnswering ||
		!strings.HasPrefix(got.ServingDetail, `the guest's report does not parse: serving="maybe"`) {
		t.Errorf("a report that does not parse: %+v, %v", got, err)
	}
}

// Calls per poll: one getGuestAttributes per Get of a running instance at
// most once per servingreport.Interval; none while the signal is
// remembered, none before the instance runs, none for an instance made
// without the reporter (which has no signal, as before).
func TestServingReadsOncePerInterval(t *testing.T) {
	env := gcptest.New(t)
	_, p, clk := servingProvider(t, env)
	req := testRequest("polls")
	inst, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Get(t.Context(), inst.ID); err != nil || got.State == provider.StateRunning {
		t.Fatalf("first Get: %+v %v", got, err)
	}
	if n := reads(env, req.Name); n != 0 {
		t.Fatalf("%d reads before the instance runs, want 0", n)
	}
	createRunning(t, p, req)
	if n := reads(env, req.Name); n != 1 {
		t.Fatalf("%d reads after the instance first read Running, want 1", n)
	}
	guestReports(t, env, req.Name, servingreport.Report{Serving: true, Checked: clk.Now(), Answered: clk.Now()})
	for i := range 3 {
		clk.Add(servingreport.Interval / 4)
		got, err := p.Get(t.Context(), inst.ID)
		if err != nil || got.Serving != provider.ServingNotAnswering {
			t.Fatalf("Get %d within the interval: %+v %v (want the remembered NotAnswering)", i, got, err)
		}
	}
	if n := reads(env, req.Name); n != 1 {
		t.Fatalf("%d reads after three Gets within the interval, want 1", n)
	}
	clk.Add(servingreport.Interval / 4)
	got, err := p.Get(t.Context(), inst.ID)
	if err != nil || got.Serving != provider.ServingAnswering {
		t.Fatalf("Get after the interval: %+v %v", got, err)
	}
	if n := reads(env, req.Name); n != 2 {
		t.Fatalf("%d reads after the interval, want 2", n)
	}

	// An instance made before the reporter: no call, no signal.
	old := testRequest("before-reporter")
	labels := map[string]string{provider.MarkManaged: "true", provider.MarkUID: old.UID, provider.MarkInstallation: testInstallation}
	body := plantedInstance(old.Name, labels)
	body.Metadata = &computepb.Metadata{Items: []*computepb.Items{{Key: proto.String("user-data"), Value: proto.String("#cloud-config\n")}}}
	if err := env.Fake.PutInstance(testProject, testZone, body, "RUNNING"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		clk.Add(servingreport.Interval)
		got, err := p.Get(t.Context(), formatID(testZone, old.Name))
		if err != nil || got.State != provider.StateRunning || got.Serving != provider.ServingUnknown {
			t.Fatalf("an instance without the reporter: %+v %v, want Running with no signal", got, err)
		}
	}
	if n := reads(env, old.Name); n != 0 {
		t.Errorf("%d reads of an instance without the reporter, want 0", n)
	}
}

// The remembered signal is the instance's, not the name's: an instance
// made again under the name is read anew, and so is one after the
// interval or with the clock set back.
func TestCachedServingIsPerInstance(t *testing.T) {
	p := pureProvider(t, nil)
	now := time.Unix(1764700000, 0)
	in := &computepb.Instance{Name: proto.String("n"), Id: proto.Uint64(7), CreationTimestamp: proto.String("2026-12-02T12:00:00.000-08:00")}
	id := formatID(testZone, "n")
	p.rememberServing(id, in, now, servingreport.Signal{Serving: provider.ServingAnswering})
	again := proto.Clone(in).(*computepb.Instance)
	again.Id = proto.Uint64(8)
	for _, tc := range []struct {
		name string
		in   *computepb.Instance
		at   time.Time
		hit  bool
	}{
		{"the same instance within the interval", in, now.Add(servingreport.Interval - time.Second), true},
		{"at the interval", in, now.Add(servingreport.Interval), false},
		{"the clock set back", in, now.Add(-time.Second), false},
		{"another instance under the name", again, now.Add(time.Second), false},
	} {
		if _, hit := p.cachedServing(id, tc.in, tc.at); hit != tc.hit {
			t.Errorf("%s: hit %v, want %v", tc.name, hit, tc.hit)
		}
	}
}

// What a getGuestAttributes answer means.
func TestServingSignalOfAnAnswer(t *testing.T) {
	now := time.Unix(1764700000, 0).UTC()
	entry := func(ns, key, value string) *computepb.GuestAttributes {
		return &computepb.GuestAttributes{QueryValue: &computepb.GuestAttributesValue{Items: []*computepb.GuestAttributesEntry{
			{Namespace: proto.String(ns), Key: proto.String(key), Value: proto.String(value)}}}}
	}
	report := servingreport.Format(servingreport.Report{Serving: true, Checked: now, Answered: now}) + "\n"
	for _, tc := range []struct {
		name    string
		ga      *computepb.GuestAttributes
		serving provider.Serving
		detail  string
	}{
		{"the report", entry("egress-proxy", "report", report), provider.ServingAnswering, ""},
		{"another key only", entry("egress-proxy", "other", report), provider.ServingNotAnswering, notReportedYet},
		{"no items", &computepb.GuestAttributes{}, provider.ServingNotAnswering, notReportedYet},
		{"a report that does not parse", entry("egress-proxy", "report", "v=2\nserving=yes\n"), provider.ServingNotAnswering,
			`the guest's report does not parse: report version "2", want 1`},
	} {
		if s := signalOf(tc.ga, now); s.Serving != tc.serving || s.Detail != tc.detail {
			t.Errorf("%s: %+v, want %q %q", tc.name, s, tc.serving, tc.detail)
		}
	}
}

// A failed read is classified as every call is, but a throttled one is
// Transient (a serving Proxy stays Ready), and only an API's 404 is "no
// value yet".
func TestGuestAttributesErrors(t *testing.T) {
	apiErr := func(code int, reason, msg string) error {
		return &googleapi.Error{Code: code, Message: msg, Errors: []googleapi.ErrorItem{{Reason: reason, Message: msg}}}
	}
	for _, tc := range []struct {
		name    string
		err     error
		noValue bool
		class   error
	}{
		{"no value at the path", apiErr(404, "notFound", "The resource 'projects/p/zones/z/instances/n/guestAttributes/egress-proxy/report' was not found"), true, nil},
		{"the front end's bare 404", &googleapi.Error{Code: 404, Body: "<!DOCTYPE html>"}, false, provider.ErrPermanent},
		{"permission", apiErr(403, "forbidden", "Required 'compute.instances.getGuestAttributes' permission for 'projects/p/zones/z/instances/n'"), false, provider.ErrPermanent},
		{"rate limit", apiErr(403, "rateLimitExceeded", "Quota exceeded for quota metric 'Queries'"), false, provider.ErrTransient},
		{"429", apiErr(429, "rateLimitExceeded", "Quota exceeded for quota metric 'Read requests'"), false, provider.ErrTransient},
		{"backend", apiErr(500, "backendError", "Internal error."), false, provider.ErrTransient},
		{"no answer", errors.New("connection refused"), false, provider.ErrTransient},
	} {
		if got := isNoValue(tc.err); got != tc.noValue {
			t.Errorf("%s: isNoValue %v, want %v", tc.name, got, tc.noValue)
		}
		if tc.class == nil {
			continue
		}
		err := guestAttributesError(tc.err, "zones/z/instances/n")
		if provider.ClassOf(err) != tc.class || !strings.Contains(err.Error(), "guest attribute egress-proxy/report") {
			t.Errorf("%s: %v (%s), want %s", tc.name, err, provider.ClassName(err), provider.ClassName(tc.class))
		}
	}
}

// Through the SDK and the fake: a failed read is Get's error with its
// class, and is not remembered (the next Get reads again).
func TestGetWithAFailedServingRead(t *testing.T) {
	env := gcptest.New(t)
	_, p, clk := servingProvider(t, env)
	req := testRequest("read-fails")
	inst := createRunning(t, p, req)
	for _, tc := range []struct {
		fault *fakecompute.APIError
		class error
	}{
		{fakecompute.TooManyRequests(), provider.ErrTransient},
		{&fakecompute.APIError{Code: http.StatusInternalServerError, Reason: "backendError", Domain: "global", Message: "Internal error."}, provider.ErrTransient},
		{fakecompute.Forbidden("compute.instances.getGuestAttributes", "{resource}"), provider.ErrPermanent},
	} {
		clk.Add(servingreport.Interval)
		failNext(env, "GET", instancePath(req.Name)+"/getGuestAttributes", tc.fault)
		if _, err := p.Get(t.Context(), inst.ID); provider.ClassOf(err) != tc.class {
			t.Errorf("Get with getGuestAttributes answering %d %s: %v, want %s", tc.fault.Code, tc.fault.Reason, err, provider.ClassName(tc.class))
		}
		before := reads(env, req.Name)
		if got, err := p.Get(t.Context(), inst.ID); err != nil || got.Serving != provider.ServingNotAnswering || reads(env, req.Name) != before+1 {
			t.Errorf("the Get after a failed read: %+v %v, %d reads (want one more)", got, err, reads(env, req.Name)-before)
		}
	}
}

// Create adopting a running instance reads its signal as Get does: the
// reconciler would otherwise take it as serving.
func TestAdoptedRunningInstanceCarriesItsSignal(t *testing.T) {
	env := gcptest.New(t)
	pp, p, clk := servingProvider(t, env)
	req := testRequest("adopted")
	pl, err := pp.resolve(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Fake.PutInstance(testProject, testZone, pp.buildInstance(pl, req), "RUNNING"); err != nil {
		t.Fatal(err)
	}
	inst, err := p.Create(t.Context(), req)
	if err != nil || inst.State != provider.StateRunning || inst.Serving != provider.ServingNotAnswering || inst.ServingDetail != notReportedYet {
		t.Fatalf("Create adopting a running instance before its report: %+v %v", inst, err)
	}
	guestReports(t, env, req.Name, servingreport.Report{Serving: true, Checked: clk.Now(), Answered: clk.Now()})
	clk.Add(servingreport.Interval)
	if inst, err = p.Create(t.Context(), req); err != nil || inst.Serving != provider.ServingAnswering {
		t.Fatalf("Create adopting it after its report: %+v %v", inst, err)
	}
}

// The instance's metadata: the user-data as it was, guest attributes on,
// and a startup script that installs the reporter for the Proxy's port
// and is valid sh; each key once; the V(2) description shows sizes only.
func TestBuildInstanceInstallsTheServingReporter(t *testing.T) {
	p := pureProvider(t, nil)
	req := testRequest("reporter")
	req.Port = 8081
	pl, err := p.resolve(req)
	if err != nil {
		t.Fatal(err)
	}
	in := p.buildInstance(pl, req)
	meta := map[string]string{}
	for _, it := range in.GetMetadata().GetItems() {
		if _, dup := meta[it.GetKey()]; dup {
			t.Errorf("metadata key %s twice", it.GetKey())
		}
		meta[it.GetKey()] = it.GetValue()
	}
	if meta["user-data"] != pl.userData.Reveal() || meta["enable-guest-attributes"] != "TRUE" || len(meta) != 3 {
		t.Errorf("metadata keys %v", keysOf(meta))
	}
	script := meta["startup-script"]
	if script != "#!/bin/sh\n"+servingreport.Installer(servingreport.Config{Port: 8081, Publish: servingreport.PublishGuestAttribute}) ||
		!strings.Contains(script, "ExecStart="+servingreport.ReporterPath+" 8081 guest-attribute") {
		t.Errorf("startup-script is not the reporter's installer for port 8081:\n%s", script)
	}
	if !reportsServing(in) {
		t.Error("the instance built does not read as one with the reporter")
	}
	// GCE's limit for all of an instance's metadata is 512 KB; the
	// user-data alone may take 256 KB.
	if len(script)+len("enable-guest-attributes")+len("TRUE") > 256<<10 {
		t.Errorf("the startup script is %d bytes", len(script))
	}
	path := filepath.Join(t.TempDir(), "startup-script")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
		t.Errorf("sh -n startup-script: %v\n%s", err, out)
	}
	described := strings.Join(describeInsert(in)["metadata"].([]string), " ")
	if strings.Contains(described, "systemctl") || !strings.Contains(described, "startup-script (") {
		t.Errorf("the V(2) description of the metadata: %s", described)
	}
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
