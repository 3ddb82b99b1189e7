package gcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

const (
	testName         = "cloud"
	testInstallation = "inst-test"
	testZone         = "us-central1-a"
	testProject      = "proj-1"
)

// testConfig is an entry over env: the fake's project, its endpoint, the
// env's key file.
func testConfig(env *gcptest.Env) Config {
	return Config{Project: env.Project, Endpoint: env.Endpoint(), CredentialsFile: env.KeyFile, DefaultZone: testZone}
}

// newTestProvider builds a provider over env, with mutate applied to the
// config, closed with the test.
func newTestProvider(t *testing.T, env *gcptest.Env, mutate func(*Config)) *Provider {
	t.Helper()
	cfg := testConfig(env)
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New(testName, cfg, provider.Options{InstallationID: testInstallation})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// testRequest is a request for the Proxy named proxy, with its instance
// name derived as the reconciler derives it.
func testRequest(proxy string) provider.CreateRequest {
	uid := "uid-" + strings.ReplaceAll(proxy, ".", "-")
	return provider.CreateRequest{
		Name:      provider.InstanceName("team-a", proxy, uid, ""),
		Namespace: "team-a", ProxyName: proxy, UID: uid, Port: 3128,
		AllowedSourceRanges: []string{"198.51.100.0/24"},
		Placement:           provider.Placement{Zone: testZone, MachineType: "e2-small"},
	}
}

// logCtx is a ctx whose logger writes every tier to the returned lines
// (providers log from their own goroutines).
func logCtx(t *testing.T) (context.Context, *testenv.LogLines) { return logCtxAt(t, 10) }

// logCtxAt is logCtx up to verbosity v.
func logCtxAt(t *testing.T, v int) (context.Context, *testenv.LogLines) {
	logs := &testenv.LogLines{}
	return logr.NewContext(t.Context(), logs.Logger(v)), logs
}

// bounded is the provider behind the method boundary, as the registry
// builds it; checked and secondaries are its Checker and SecondaryLister
// behind the same boundary.
func bounded(p *Provider) provider.Provider { return provider.WithBoundary(testName, Type, p).Provider }

// newBoundedTestProvider is a fresh fake, a provider on it, and that
// provider behind its boundary (what the reconciler calls), the start of
// most tests.
func newBoundedTestProvider(t *testing.T) (*gcptest.Env, *Provider, provider.Provider) {
	t.Helper()
	env := gcptest.New(t)
	p := newTestProvider(t, env, nil)
	return env, p, bounded(p)
}

func checked(p *Provider) provider.Checker { return provider.WithBoundary(testName, Type, p).Checker }

func secondaries(p *Provider) provider.SecondaryLister {
	return provider.WithBoundary(testName, Type, p).Secondary
}

// waitStep waits until name's create step has ended and its result is
// what Create or Get report.
func waitStep(t *testing.T, p *Provider, name string) {
	t.Helper()
	testenv.EventuallyNil(t, "the create step of "+name+" ending", func() error {
		if p.steps.Running(name) {
			return errors.New("still running")
		}
		return nil
	})
}

// createRunning creates req and drives it to Running as the reconciler
// would (Create, then Get until Running).
func createRunning(t *testing.T, p provider.Provider, req provider.CreateRequest) provider.Instance {
	t.Helper()
	inst, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create(%s): %v", req.Name, err)
	}
	var got provider.Instance
	testenv.EventuallyNil(t, "instance "+inst.ID+" running", func() error {
		got, err = p.Get(t.Context(), inst.ID)
		switch {
		case err != nil && !errors.Is(err, provider.ErrTransient):
			t.Fatalf("Get(%s): %v", inst.ID, err)
		case err != nil:
			return err
		case got.State != provider.StateRunning:
			return fmt.Errorf("state %s (%s)", got.State, got.Progress)
		}
		return nil
	})
	return got
}

// count is how many calls of method on paths matching pattern the fake saw.
func count(env *gcptest.Env, method, pattern string) int { return env.Fake.Count(method, pattern) }

// Fake path patterns (fakecompute.Fault: without /compute/v1/, "*" one
// segment, a final "**" any rest).

// instancePath is one instance in the test zone.
func instancePath(name string) string {
	return "projects/" + testProject + "/zones/" + testZone + "/instances/" + name
}

// insertPath is every insert (and list) of instances.
const insertPath = "projects/" + testProject + "/zones/*/instances"

func rulePath(name string) string { return "projects/" + testProject + "/global/firewalls/" + name }

// failNext queues a synchronous fault on the fake.
func failNext(env *gcptest.Env, method, path string, e *fakecompute.APIError) {
	env.Fake.FailNext(fakecompute.Fault{Method: method, Path: path, Err: e})
}

// human makes one API request with the env's token, outside the provider
// (a human with gcloud); body, when set, is sent as JSON, and out, when
// set, receives a 200 answer.
func human(t *testing.T, env *gcptest.Env, method, path string, body, out any) int {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, env.Endpoint()+"/compute/v1/"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+env.Tokens.Token(env.Email))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// holdInserts is a wire seam that holds every instance insert until
// release is closed or its ctx ends.
func holdInserts(release <-chan struct{}) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/instances") {
				select {
				case <-release:
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
			}
			return next.RoundTrip(req)
		})
	}
}
