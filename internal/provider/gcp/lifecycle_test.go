package gcp

import (
	"errors"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// New reads no credential and calls nothing: a missing Secret or an API
// that is down at start does not stop the operator.
func TestNewDoesNoIO(t *testing.T) {
	p, err := New(testName, Config{Project: testProject, CredentialsFile: "/nonexistent/key.json", Endpoint: "http://127.0.0.1:1"},
		provider.Options{InstallationID: testInstallation})
	if err != nil {
		t.Fatal(err)
	}
	if p.built != nil {
		t.Error("New built the API clients")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(t.Context(), formatID(testZone, "proxy-a")); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("Get after Close: %v, want Transient", err)
	}
}

func TestNewRefusesAnInvalidConfig(t *testing.T) {
	_, err := New(testName, Config{}, provider.Options{})
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "project: Required value") {
		t.Fatalf("%v", err)
	}
}

// The whole lifecycle over the real SDK and the fake, with the real key
// file and token endpoint: Create returns at once, Provisioning; the
// background step makes the rule and the instance; Get reaches Running
// with the external IP; Delete submits one operation, then removes the
// rule once the instance is gone; Get is NotFound.
func TestLifecycleCreateRunningDelete(t *testing.T) {
	env := gcptest.New(t)
	p := bounded(newTestProvider(t, env, nil))
	req := testRequest("web")
	inst, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != provider.StateProvisioning || inst.ID != formatID(testZone, req.Name) || inst.Progress == "" {
		t.Fatalf("Create: %+v", inst)
	}
	got := createRunning(t, p, req)
	if !strings.HasPrefix(got.IP, "203.0.113.") || got.UID != req.UID || got.CreatedAt.IsZero() {
		t.Fatalf("running: %+v", got)
	}
	if env.Fake.Firewall(testProject, req.Name) == nil {
		t.Fatal("no firewall rule")
	}
	if err := p.Delete(t.Context(), inst.ID); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "instance gone", func() error {
		if err := p.Delete(t.Context(), inst.ID); err != nil {
			return err
		}
		_, err := p.Get(t.Context(), inst.ID)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		return errors.New("still there")
	})
	testenv.EventuallyNil(t, "rule gone", func() error {
		if env.Fake.Firewall(testProject, req.Name) != nil {
			_, _ = env.Fake.Instances(testProject), p.Delete(t.Context(), inst.ID)
			return errors.New("rule still there")
		}
		return nil
	})
	if n := count(env, "DELETE", instancePath(req.Name)); n != 1 {
		t.Errorf("%d instance deletes submitted, want 1", n)
	}
}
