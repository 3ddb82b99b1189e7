package gcp

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// The known gaps of the earlier gcp provider (its own, and the
// cross-provider ones that named gcp) each have a test named TestGap<the gap>;
// some live next to the code they are about (async_test.go, check_test.go,
// delete_test.go, list_test.go, observe_test.go, samples_test.go).
// `go test -run TestGap -v` lists them all; docs/gcp-provider.md maps each
// gap to its test.

// Seed gap (gcp): "External IP only: a VM without an external NAT IP stays
// Provisioning forever." In internal mode the instance gets no access
// config and runs with its internal address; in external mode it waits
// for its NAT IP, and runs once it has one.
func TestGapExternalIPOnly(t *testing.T) {
	t.Run("internal", func(t *testing.T) {
		env := gcptest.New(t)
		b := bounded(newTestProvider(t, env, func(c *Config) { c.AddressMode = AddressInternal }))
		req := testRequest("internal")
		got := createRunning(t, b, req)
		if ip := net.ParseIP(got.IP); ip == nil || !strings.HasPrefix(got.IP, "10.128.") {
			t.Fatalf("running with IP %q, want the internal address", got.IP)
		}
		if acs := env.Fake.Instance(testProject, testZone, req.Name).GetNetworkInterfaces()[0].GetAccessConfigs(); len(acs) != 0 {
			t.Errorf("an internal instance has access configs %v", acs)
		}
	})
	t.Run("external, address late", func(t *testing.T) {
		env := gcptest.New(t)
		env.Fake.SetAddressDelay(3)
		p := newTestProvider(t, env, nil)
		b := bounded(p)
		req := testRequest("late-ip")
		inst, err := b.Create(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		waitStep(t, p, req.Name)
		first, err := b.Get(t.Context(), inst.ID)
		if err != nil || first.State != provider.StateProvisioning || first.IP != "" {
			t.Fatalf("RUNNING without its NAT IP: %+v, %v; want Provisioning", first, err)
		}
		if got := createRunning(t, b, req); !strings.HasPrefix(got.IP, "203.0.113.") {
			t.Fatalf("running with %q, want the external address", got.IP)
		}
	})
}

// Seed gap (gcp): "No firewall management: the rule for the proxy port is
// a manual prerequisite, and req.Port is unused." The rule admits the
// Proxy's ranges to its own port (TestFirewallRuleLifecycle follows its
// whole life).
func TestGapNoFirewallManagement(t *testing.T) {
	env := gcptest.New(t)
	b := bounded(newTestProvider(t, env, nil))
	req := testRequest("port")
	req.Port = 8080
	createRunning(t, b, req)
	fw := env.Fake.Firewall(testProject, req.Name)
	if fw == nil || len(fw.GetAllowed()) != 1 || fw.GetAllowed()[0].GetPorts()[0] != "8080" || !sameSet(fw.GetSourceRanges(), req.AllowedSourceRanges) {
		t.Fatalf("rule %v: want tcp:8080 from %v", fw, req.AllowedSourceRanges)
	}
}

// Seed gap (gcp): "The SDK client is never closed." Close closes the
// clients and the idle connections, later calls fail Transient, and the
// registry calls Close (the provider is an io.Closer) on reload, removal
// and shutdown.
func TestGapSDKClientIsNeverClosed(t *testing.T) {
	env := gcptest.New(t)
	var open atomic.Int64
	srv := httptest.NewUnstartedServer(env.Fake)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p := newTestProvider(t, env, func(c *Config) { c.Endpoint = srv.URL })
	b := bounded(p)
	if _, err := b.ListByTag(t.Context()); err != nil {
		t.Fatal(err)
	}
	if open.Load() == 0 {
		t.Fatal("no connection to the API was open")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "the provider's connections closed", func() error {
		if n := open.Load(); n != 0 {
			return errors.New("connections still open")
		}
		return nil
	})
	if _, err := b.ListByTag(t.Context()); !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("ListByTag after Close: %v", err)
	}
}

// Seed gap (gcp): "Placement.Region is unused." A region picks the zone
// when the Proxy names none, and refuses a zone outside it
// (TestResolveRefusesBeforeAnyCall has the refusals).
func TestGapPlacementRegionIsUnused(t *testing.T) {
	env := gcptest.New(t)
	b := bounded(newTestProvider(t, env, func(c *Config) {
		c.Zones = []string{"us-central1-a", "europe-west1-c"}
		c.DefaultZone = "us-central1-a"
	}))
	req := testRequest("region")
	req.Placement.Zone, req.Placement.Region = "", "europe-west1"
	inst, err := b.Create(t.Context(), req)
	if err != nil || inst.ID != formatID("europe-west1-c", req.Name) {
		t.Fatalf("Create in region europe-west1: %+v, %v", inst, err)
	}
	req.Placement.Zone = "us-central1-a"
	if _, err := b.Create(t.Context(), req); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "is not in placement.region") {
		t.Errorf("Create of a zone outside the region: %v", err)
	}
}

// Section 9 gap: "Adoption is not verified in three of the five (gcp
// among them)". An instance under the name with another Proxy's UID, or
// another installation's, or no mark, is refused (Permanent) and left as
// it is; one with an empty UID is adopted and its mark filled in.
func TestGapAdoptionIsNotVerified(t *testing.T) {
	env := gcptest.New(t)
	b := bounded(newTestProvider(t, env, nil))
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"another Proxy", map[string]string{provider.MarkManaged: "true", provider.MarkUID: "uid-other", provider.MarkInstallation: testInstallation}, "UID mismatch"},
		{"another installation", map[string]string{provider.MarkManaged: "true", provider.MarkUID: "uid-x", provider.MarkInstallation: "other"}, "another operator installation"},
		{"unmarked", nil, "not managed by this operator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := testRequest("adopt-" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"))
			if err := env.Fake.PutInstance(testProject, testZone, plantedInstance(req.Name, tc.labels), "RUNNING"); err != nil {
				t.Fatal(err)
			}
			before := env.Fake.Instance(testProject, testZone, req.Name).GetLabelFingerprint()
			if _, err := b.Create(t.Context(), req); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create over %s's instance: %v", tc.name, err)
			}
			if after := env.Fake.Instance(testProject, testZone, req.Name).GetLabelFingerprint(); after != before {
				t.Error("the refused instance's labels changed")
			}
			if env.Fake.Firewall(testProject, req.Name) != nil {
				t.Error("a rule was made for a refused instance")
			}
		})
	}
	t.Run("empty UID", func(t *testing.T) {
		req := testRequest("adopt-empty")
		labels := map[string]string{provider.MarkManaged: "true", provider.MarkInstallation: testInstallation}
		if err := env.Fake.PutInstance(testProject, testZone, plantedInstance(req.Name, labels), "RUNNING"); err != nil {
			t.Fatal(err)
		}
		inst, err := b.Create(t.Context(), req)
		if err != nil || inst.UID != req.UID {
			t.Fatalf("Create over our own instance with an empty UID: %+v, %v", inst, err)
		}
		if got := env.Fake.Instance(testProject, testZone, req.Name).GetLabels()[provider.MarkUID]; got != req.UID {
			t.Errorf("UID label %q after adoption, want %q", got, req.UID)
		}
	})
}

// Section 9 gap: "GC does not know about installations. Two clusters
// sharing one project ... delete each other's instances." ListByTag and
// ListSecondary list this installation's only; another's are invisible to
// the collector.
func TestGapGCDoesNotKnowAboutInstallations(t *testing.T) {
	env := gcptest.New(t)
	oursP := newTestProvider(t, env, nil)
	ours := bounded(oursP)
	theirsP, err := New(testName, testConfig(env), provider.Options{InstallationID: "other-cluster"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theirsP.Close() })
	theirs := bounded(theirsP)
	mine := createRunning(t, ours, testRequest("mine"))
	other := testRequest("theirs")
	other.UID = "uid-their-proxy"
	createRunning(t, theirs, other)
	list, err := ours.ListByTag(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != mine.ID {
		t.Fatalf("our ListByTag: %+v, %v; want only %s", list, err, mine.ID)
	}
	secs, err := secondaries(oursP).ListSecondary(t.Context())
	if err != nil || len(secs) != 1 || secs[0].Instance != testRequest("mine").Name {
		t.Fatalf("our ListSecondary: %+v, %v; want only our rule", secs, err)
	}
	// Deleting "their" ID through our provider leaves it alone.
	if err := ours.Delete(t.Context(), formatID(testZone, other.Name)); err != nil {
		t.Fatal(err)
	}
	if env.Fake.Instance(testProject, testZone, other.Name) == nil || env.Fake.Firewall(testProject, other.Name) == nil {
		t.Error("our Delete removed another installation's instance or rule")
	}
}

// Seed behaviour (gcp Create): "409 (isAlreadyExists) is success." An
// instance made under the name between Create's read and its insert is
// adopted only when it is ours: someone else's is Permanent, not success.
func TestGapConflictOnInsertIsSuccess(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	req := testRequest("conflict")
	// Someone else's instance appears just before the insert.
	p.wireSeam = func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/instances") {
				body := plantedInstance(req.Name, nil)
				body.Description = proto.String("made by hand")
				if err := env.Fake.PutInstance(testProject, testZone, body, "RUNNING"); err != nil {
					return nil, err
				}
			}
			return next.RoundTrip(r)
		})
	}
	if _, err := b.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	waitStep(t, p, req.Name)
	if _, err := b.Get(t.Context(), formatID(testZone, req.Name)); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "not managed by this operator") {
		t.Fatalf("Get after a 409 for someone else's instance: %v", err)
	}
	if d := env.Fake.Instance(testProject, testZone, req.Name).GetDescription(); d != "made by hand" {
		t.Errorf("the other instance changed: %q", d)
	}
}
