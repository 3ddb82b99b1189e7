package gcp

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// While an insert's operation runs, GET of the instance may answer 404
// (GCE shows a failing insert's instance nowhere, and a new one only
// after a moment: nodejs-compute#377), and the name is taken (409). Get
// reads that as Provisioning, never NotFound (which would make the
// reconciler create again and meet the 409); the operation's failure
// comes with the next call once it is done.
func TestGetDuringTheInsertIsProvisioningNotNotFound(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	req := testRequest("404-while-inserting")
	env.Fake.FailNext(fakecompute.Fault{Method: "POST", Path: insertPath, Async: fakecompute.ZoneResourcePoolExhausted()})
	release := make(chan struct{})
	waiting := make(chan struct{}, 16)
	p.wireSeam = func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.URL.Path, "/zones/") && strings.HasSuffix(r.URL.Path, "/wait") {
				waiting <- struct{}{}
				select {
				case <-release:
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			}
			return next.RoundTrip(r)
		})
	}
	inst, err := b.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	// The step waits on the insert's operation (after it said so), not
	// merely after the POST reached the fake.
	select {
	case <-waiting:
	case <-t.Context().Done():
		t.Fatal("the step never waited on the insert's operation")
	}
	if n := env.Fake.Count("POST", insertPath); n != 1 {
		t.Fatalf("%d inserts, want 1", n)
	}
	env.Fake.SetAdvanceOnGet(false) // the GETs below must not end the operation
	for i := 0; i < 3; i++ {
		got, err := b.Get(t.Context(), inst.ID)
		if err != nil || got.State != provider.StateProvisioning || got.Progress != progressRunning {
			t.Fatalf("Get while the insert runs: %+v, %v; want Provisioning (%q)", got, err, progressRunning)
		}
	}
	if n := env.Fake.Count("GET", instancePath(req.Name)); n < 3 {
		t.Fatalf("%d GETs of the instance: Get must read the API while the step runs", n)
	}
	for _, r := range env.Fake.Requests() {
		if r.Method == "GET" && strings.HasSuffix(r.Path, "/instances/"+req.Name) && r.Status != http.StatusNotFound {
			t.Fatalf("the fake answered %d while the failing insert runs, want 404: %v", r.Status, r)
		}
	}
	close(release)
	waitStep(t, p, req.Name)
	if _, err := b.Get(t.Context(), inst.ID); !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Fatalf("Get once the insert failed: %v", err)
	}
}

// A suspended instance of ours is resumed when Create adopts it; one that
// is stopping is left to stop first (no call: start would be refused).
func TestAdoptingSuspendedOrStoppingInstances(t *testing.T) {
	env := gcptest.New(t)
	b := bounded(newTestProvider(t, env, nil))
	req := testRequest("suspended")
	inst := createRunning(t, b, req)
	if err := env.Fake.SetInstanceStatus(testProject, testZone, req.Name, "SUSPENDED"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(t.Context(), inst.ID); err != nil || got.State != provider.StateStopped {
		t.Fatalf("Get of a suspended instance: %+v, %v; want Stopped", got, err)
	}
	got, err := b.Create(t.Context(), req)
	if err != nil || got.State != provider.StateProvisioning || got.Progress != progressResume {
		t.Fatalf("Create over the suspended instance: %+v, %v", got, err)
	}
	if n := env.Fake.Count("POST", instancePath(req.Name)+"/resume"); n != 1 {
		t.Errorf("%d resumes, want 1", n)
	}
	createRunning(t, b, req)

	if err := env.Fake.SetInstanceStatus(testProject, testZone, req.Name, "STOPPING"); err != nil {
		t.Fatal(err)
	}
	before := len(env.Fake.Requests())
	got, err = b.Create(t.Context(), req)
	if err != nil || got.State != provider.StateProvisioning || got.Progress != progressStopping {
		t.Fatalf("Create over a stopping instance: %+v, %v", got, err)
	}
	for _, r := range env.Fake.Requests()[before:] {
		if r.Method == "POST" {
			t.Errorf("Create over a stopping instance made %v", r)
		}
	}
}

// With the SDK's debug logging switched on by its environment variable,
// nothing of the SDK reaches stderr (its default logger would write every
// request body there, user-data included): the provider hands it a logger
// that discards.
func TestSDKDebugLoggingNeverWritesUserData(t *testing.T) {
	t.Setenv("GOOGLE_SDK_GO_LOGGING_LEVEL", "debug")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	captured := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		captured <- string(b)
	}()
	func() {
		defer func() { os.Stderr = stderr }()
		env := gcptest.New(t)
		p := newTestProvider(t, env, nil)
		req := testRequest("sdk-log")
		req.CloudInit = "#cloud-config\n# SENTINEL-sdk-debug-log\n"
		if _, err := bounded(p).Create(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		waitStep(t, p, req.Name)
		_ = p.Close()
	}()
	_ = w.Close()
	out := <-captured
	if strings.Contains(out, "SENTINEL-sdk-debug-log") || strings.Contains(out, "api request") {
		t.Errorf("the SDK's debug log reached stderr:\n%s", out)
	}
}

// waitFor waits for cond, bounded like every other wait here.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, cond)
}
