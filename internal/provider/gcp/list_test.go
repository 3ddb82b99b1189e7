package gcp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// ListByTag reads every page of the aggregated list (500 a page) and
// lists this installation's instances only.
func TestListByTagPagesAndFilters(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, nil)
	const n = 520 // 514 of ours: more than a page
	for i := 0; i < n; i++ {
		labels := provider.Marks{Managed: true, UID: fmt.Sprintf("uid-%d", i), Installation: testInstallation}.Labels()
		if i%100 == 0 {
			labels[provider.MarkInstallation] = "other-installation"
		}
		zone := []string{"us-central1-a", "us-east1-b", "europe-west1-c"}[i%3]
		body := plantedInstance(fmt.Sprintf("proxy-many-%03d", i), labels)
		body.MachineType = ptr("zones/" + zone + "/machineTypes/e2-micro")
		if err := env.Fake.PutInstance(testProject, zone, body, "RUNNING"); err != nil {
			t.Fatal(err)
		}
	}
	list, err := bounded(p).ListByTag(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := n - 6; len(list) != want {
		t.Fatalf("listed %d, want %d (the other installation's left out)", len(list), want)
	}
	for _, in := range list {
		if in.UID == "" || in.CreatedAt.IsZero() || !strings.HasPrefix(in.ID, "zones/") {
			t.Fatalf("listed %+v", in)
		}
	}
	if pages := env.Fake.Count("GET", "projects/"+testProject+"/aggregated/instances"); pages < 2 {
		t.Errorf("%d pages read, want at least 2", pages)
	}
	for _, r := range env.Fake.Requests() {
		if strings.HasSuffix(r.Path, "/aggregated/instances") {
			if f := r.Query.Get("filter"); !strings.Contains(f, "labels.proxy-operator-installation") || !strings.Contains(f, "labels.proxy-operator-managed") {
				t.Errorf("filter %q: want the managed and the installation marks", f)
			}
		}
	}
}

// Seed gap (gcp): "ListByTag ... ReturnPartialSuccess, so an unreachable
// zone is left out silently."
//
// A zone that answers with a warning (UNREACHABLE) is left out, logged,
// counted and noted; the others are listed. Leaving it out is safe: the
// collector deletes only what it saw, and a rule of that zone is never
// reported as orphaned.
func TestGapUnreachableZoneIsLeftOutSilently(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	here := testRequest("reachable")
	createRunning(t, b, here)
	there := testRequest("unreachable")
	there.Placement.Zone = "us-east1-b"
	createRunning(t, b, there)
	env.Fake.SetZoneUnreachable("us-east1-b", true)
	before := testutil.ToFloat64(zoneListWarnings.WithLabelValues(testName, "us-east1-b", "UNREACHABLE"))
	ctx, logs := logCtx(t)
	list, err := b.ListByTag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != formatID(testZone, here.Name) {
		t.Fatalf("listed %+v; want only the reachable zone's instance", list)
	}
	if got := testutil.ToFloat64(zoneListWarnings.WithLabelValues(testName, "us-east1-b", "UNREACHABLE")) - before; got != 1 {
		t.Errorf("metric counted %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "zones left out of the listing") || !strings.Contains(logs.String(), `"zonesLeftOut"="us-east1-b"`) {
		t.Errorf("the left-out zone is not in the log or the outcome line:\n%s", logs)
	}
	// Its instance's rule exists but is not judged: the zone did not answer.
	secs, err := secondaries(p).ListSecondary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secs {
		if s.Instance == there.Name && s.InstanceGone {
			t.Errorf("the rule of an instance in an unreachable zone is reported orphaned: %+v", s)
		}
	}
}

// An instance whose create step runs is listed from its first moment,
// before the API shows it.
func TestListByTagListsACreateInFlight(t *testing.T) {
	_, p, b := newBoundedTestProvider(t)
	req := testRequest("in-flight")
	release := make(chan struct{})
	p.wireSeam = holdInserts(release)
	if _, err := b.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	list, err := b.ListByTag(t.Context())
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != formatID(testZone, req.Name) || list[0].UID != req.UID || list[0].CreatedAt.IsZero() {
		t.Fatalf("listed %+v; want the instance in flight", list)
	}
}

func ptr(s string) *string { return &s }
