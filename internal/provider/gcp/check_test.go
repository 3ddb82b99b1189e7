package gcp

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// Seed gap (gcp, section 2: "Checker Details: none"; section 10: "Checker
// Details for gcp (quota headroom)").
//
// A healthy check is one projects.get plus one regions.get per region in
// use, and its details carry the quota headroom an instance draws on.
func TestGapCheckerHasNoDetails(t *testing.T) {
	env := gcptest.New(t)
	env.Fake.SetRegionQuota("europe-west1", "INSTANCES", 1)
	p := newTestProvider(t, env, func(c *Config) {
		c.Zones = []string{"us-central1-a", "us-central1-b", "europe-west1-b"}
		c.DefaultZone = "us-central1-a"
	})
	b := bounded(p)
	createRunning(t, b, testRequest("quota"))
	req := testRequest("quota-eu")
	req.Placement.Zone = "europe-west1-b"
	createRunning(t, b, req)
	env.Fake.ClearRequests()
	res := checked(p).Check(t.Context())
	if !res.Healthy || res.Reason != provider.ReasonHealthy || res.Target != "projects/"+testProject {
		t.Fatalf("Check: %+v", res)
	}
	for k, want := range map[string]string{
		"us-central1.CPUS":             "22 free of 24",
		"us-central1.INSTANCES":        "23 free of 24",
		"us-central1.IN_USE_ADDRESSES": "7 free of 8",
		"europe-west1.INSTANCES":       "0 free of 1",
		"FIREWALLS":                    "198 free of 200",
	} {
		if got := res.Details[k]; got != want {
			t.Errorf("details[%s] = %q, want %q (all: %v)", k, got, want, res.Details)
		}
	}
	if !strings.Contains(res.Message, "quota used up: europe-west1 INSTANCES") {
		t.Errorf("message %q does not say which quota is used up", res.Message)
	}
	if n, want := len(env.Fake.Requests()), 3; n != want {
		t.Errorf("Check made %d requests, want %d (the project and two regions): %v", n, want, env.Fake.Requests())
	}
}

// Internal instances take no external address: that quota is left out.
func TestCheckInternalModeLeavesOutAddresses(t *testing.T) {
	env := gcptest.New(t)
	res := checked(newTestProvider(t, env, func(c *Config) { c.AddressMode = AddressInternal })).Check(t.Context())
	if !res.Healthy || res.Details["us-central1.CPUS"] == "" || res.Details["us-central1.IN_USE_ADDRESSES"] != "" {
		t.Fatalf("Check: %+v", res)
	}
}

// Every reason the Checker gives, from the answer that causes it.
func TestCheckReasons(t *testing.T) {
	project := "projects/" + testProject
	for _, tc := range []struct {
		name   string
		setup  func(env *gcptest.Env, c *Config)
		reason string
		msg    string
	}{
		{"forbidden", func(env *gcptest.Env, _ *Config) {
			failNext(env, "GET", project, fakecompute.Forbidden("compute.projects.get", "{resource}"))
		}, provider.ReasonForbidden, "Required 'compute.projects.get'"},
		{"API not enabled", func(env *gcptest.Env, _ *Config) {
			failNext(env, "GET", project, &fakecompute.APIError{Code: 403, Reason: "accessNotConfigured", Domain: "usageLimits",
				Message: "Compute Engine API has not been used in project 1 before or it is disabled."})
		}, provider.ReasonForbidden, "has not been used"},
		{"unauthorized", func(env *gcptest.Env, _ *Config) { env.Fake.RequireToken("another-token") }, provider.ReasonUnauthorized, "invalid authentication credentials"},
		{"unreachable", func(_ *gcptest.Env, c *Config) { c.Endpoint = "http://127.0.0.1:1" }, provider.ReasonUnreachable, "connection refused"},
		{"API error", func(env *gcptest.Env, _ *Config) {
			failNext(env, "GET", project, &fakecompute.APIError{Code: 500, Reason: "backendError", Domain: "global", Message: "Internal error."})
		}, provider.ReasonAPIError, "Internal error"},
		{"project not found", func(_ *gcptest.Env, c *Config) { c.Project = "proj-missing" }, provider.ReasonAPIError, "was not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := gcptest.New(t)
			cfg := testConfig(env)
			tc.setup(env, &cfg)
			p, err := New(testName, cfg, provider.Options{InstallationID: testInstallation})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			res := checked(p).Check(t.Context())
			if res.Healthy || res.Reason != tc.reason || !strings.Contains(res.Message, tc.msg) {
				t.Errorf("Check: %+v; want %s with %q", res, tc.reason, tc.msg)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		env := gcptest.New(t)
		p := newTestProvider(t, env, nil)
		release := make(chan struct{})
		defer close(release)
		p.wireSeam = func(next http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				select {
				case <-release:
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
				return next.RoundTrip(req)
			})
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if res := checked(p).Check(ctx); res.Healthy || res.Reason != provider.ReasonTimeout {
			t.Errorf("Check: %+v; want Timeout", res)
		}
	})
	t.Run("a region that cannot be read is a detail, not a failure", func(t *testing.T) {
		env := gcptest.New(t)
		c := checked(newTestProvider(t, env, nil))
		failNext(env, "GET", project+"/regions/us-central1", fakecompute.Forbidden("compute.regions.get", "{resource}"))
		res := c.Check(t.Context())
		if !res.Healthy || !strings.HasPrefix(res.Details["us-central1.quota"], "unavailable: Forbidden") {
			t.Errorf("Check: %+v", res)
		}
	})
}
