package fakecompute_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"
)

// seedFleet puts instances of two installations in two zones.
func seedFleet(t *testing.T, e *env) {
	t.Helper()
	for _, s := range []struct{ zone, name, inst string }{
		{"us-central1-a", "egress-a", "blue"}, {"us-central1-a", "egress-b", "blue"},
		{"us-central1-a", "egress-c", "green"}, {"us-central1-b", "egress-d", "blue"},
		{"us-east1-b", "egress-e", "blue"},
	} {
		b := body(s.name)
		b.MachineType = proto.String("zones/" + s.zone + "/machineTypes/e2-small")
		b.Labels["egress-operator-installation"] = s.inst
		if err := e.fake.PutInstance(project, s.zone, b, ""); err != nil {
			t.Fatal(err)
		}
	}
	other := body("someone-else")
	other.Labels = map[string]string{"team": "db"}
	if err := e.fake.PutInstance(project, zone, other, ""); err != nil {
		t.Fatal(err)
	}
}

func sorted(s []string) []string { sort.Strings(s); return s }

// The filter forms a provider writes select the same instances the API
// would.
func TestAggregatedListFilters(t *testing.T) {
	e := newEnv(t)
	seedFleet(t, e)
	cases := []struct {
		filter string
		want   string
	}{
		{``, "egress-a egress-b egress-c egress-d egress-e someone-else"},
		{`labels.egress-operator-managed = "true"`, "egress-a egress-b egress-c egress-d egress-e"},
		{`labels.egress-operator-managed=true`, "egress-a egress-b egress-c egress-d egress-e"},
		{`(labels.egress-operator-managed = "true") AND (labels.egress-operator-installation = "blue")`, "egress-a egress-b egress-d egress-e"},
		{`(labels.egress-operator-managed = "true") (labels.egress-operator-installation = "green")`, "egress-c"},
		{`labels.egress-operator-installation = "green" OR labels.team = "db"`, "egress-c someone-else"},
		{`labels.egress-operator-managed = "true" AND labels.egress-operator-installation = "blue" OR labels.egress-operator-installation = "green"`,
			"egress-a egress-b egress-c egress-d egress-e"},
		{`labels.team:*`, "someone-else"},
		{`labels.egress-operator-installation != "blue"`, "egress-c someone-else"},
		{`name eq "egress-[ab]"`, "egress-a egress-b"},
		{`(name eq egress-.*) (labels.egress-operator-installation ne blue)`, "egress-c"},
		{`status = "RUNNING"`, "egress-a egress-b egress-c egress-d egress-e someone-else"},
		{`labels.egress-operator-managed = "false"`, ""},
	}
	for _, c := range cases {
		t.Run(c.filter, func(t *testing.T) {
			names, _ := e.aggregated(c.filter, 0)
			if got := strings.Join(sorted(names), " "); got != c.want {
				t.Errorf("filter %q: %q, want %q", c.filter, got, c.want)
			}
		})
	}
}

// The API refuses filters it cannot read.
func TestAggregatedListBadFilters(t *testing.T) {
	e := newEnv(t)
	for _, f := range []string{
		`labels.a = "x" AND`,
		`(labels.a = "x"`,
		`labels.a = "x" AND name eq "y"`,
		`name eq "a" AND name eq "b"`,
		`sourceRanges eq ".*"`,
		`creationTimestamp > "2026"`,
		`name eq "(["`,
	} {
		it := e.ic.AggregatedList(e.ctx, &computepb.AggregatedListInstancesRequest{Project: project, Filter: proto.String(f)})
		_, err := it.Next()
		wantAPIError(t, err, 400, "invalid", fmt.Sprintf("Invalid value for field 'filter': '%s'. Invalid list filter expression.", f))
	}
}

// Pages of maxResults, every zone a key on every page, empty zones with
// NO_RESULTS_ON_PAGE, and the SDK iterator following nextPageToken.
func TestAggregatedListPagingAndWarnings(t *testing.T) {
	e := newEnv(t)
	seedFleet(t, e)
	e.fake.ClearRequests()
	names, warnings := e.aggregated(`labels.egress-operator-managed = "true"`, 2)
	if got := strings.Join(sorted(names), " "); got != "egress-a egress-b egress-c egress-d egress-e" {
		t.Fatalf("paged: %q", got)
	}
	if n := e.fake.Count("GET", "projects/*/aggregated/instances"); n != 3 {
		t.Fatalf("%d pages fetched for 5 instances at 2 a page", n)
	}
	if warnings["zones/europe-west1-b"] != "NO_RESULTS_ON_PAGE" {
		t.Fatalf("warnings %v", warnings)
	}
	reqs := e.fake.Requests()
	if reqs[0].Query.Get("maxResults") != "2" || reqs[0].Query.Get("pageToken") != "" || reqs[1].Query.Get("pageToken") == "" {
		t.Fatalf("queries %v %v", reqs[0].Query, reqs[1].Query)
	}

	resp, b := e.raw("GET", "/compute/v1/projects/proj-1/aggregated/instances?maxResults=2")
	var page struct {
		Kind          string `json:"kind"`
		ID            string `json:"id"`
		NextPageToken string `json:"nextPageToken"`
		Items         map[string]struct {
			Instances []json.RawMessage `json:"instances"`
			Warning   *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Data    []struct{ Key, Value string }
			} `json:"warning"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &page); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
	}
	if page.Kind != "compute#instanceAggregatedList" || page.ID != "projects/proj-1/aggregated/instances" || page.NextPageToken == "" {
		t.Fatalf("page %s", b)
	}
	if len(page.Items) != 10 {
		t.Fatalf("%d scopes on a page, want every zone (10)", len(page.Items))
	}
	w := page.Items["zones/us-east1-c"].Warning
	if w == nil || w.Message != "There are no results for scope 'zones/us-east1-c' on this page." ||
		len(w.Data) != 1 || w.Data[0].Key != "scope" || w.Data[0].Value != "zones/us-east1-c" {
		t.Fatalf("warning %+v", w)
	}
	if n := len(page.Items["zones/us-central1-a"].Instances); n != 2 {
		t.Fatalf("first page has %d instances of us-central1-a", n)
	}

	for _, q := range []string{"maxResults=501", "pageToken=garbage"} {
		resp, b := e.raw("GET", "/compute/v1/projects/proj-1/aggregated/instances?"+q)
		if resp.StatusCode != 400 || !strings.Contains(string(b), `"reason":"invalid"`) {
			t.Errorf("%s: %d %s", q, resp.StatusCode, b)
		}
	}
}

// An unreachable zone answers a warning UNREACHABLE and none of its
// instances, also in "unreachables" with returnPartialSuccess.
func TestAggregatedListUnreachableZone(t *testing.T) {
	e := newEnv(t)
	seedFleet(t, e)
	e.fake.SetZoneUnreachable("us-central1-b", true)
	names, warnings := e.aggregated(`labels.egress-operator-managed = "true"`, 0)
	if got := strings.Join(sorted(names), " "); got != "egress-a egress-b egress-c egress-e" {
		t.Fatalf("with us-central1-b unreachable: %q", got)
	}
	if warnings["zones/us-central1-b"] != "UNREACHABLE" {
		t.Fatalf("warnings %v", warnings)
	}
	// Its instances take no place on a page either: four pages of one.
	e.fake.ClearRequests()
	if names, _ := e.aggregated(`labels.egress-operator-managed = "true"`, 1); len(names) != 4 {
		t.Fatalf("paged with us-central1-b unreachable: %v", names)
	}
	if n := e.fake.Count("GET", "projects/*/aggregated/instances"); n != 4 {
		t.Fatalf("%d pages of one for four reachable instances", n)
	}
	_, b := e.raw("GET", "/compute/v1/projects/proj-1/aggregated/instances?"+url.Values{"returnPartialSuccess": {"true"}}.Encode())
	var page struct {
		Unreachables []string `json:"unreachables"`
	}
	if err := json.Unmarshal(b, &page); err != nil || len(page.Unreachables) != 1 || page.Unreachables[0] != "zones/us-central1-b" {
		t.Fatalf("unreachables %v (%v): %s", page.Unreachables, err, b)
	}
	it := e.ic.List(e.ctx, &computepb.ListInstancesRequest{Project: project, Zone: "us-central1-b"})
	if _, err := it.Next(); err == nil {
		t.Fatal("a list of the unreachable zone answered")
	}
	e.fake.SetZoneUnreachable("us-central1-b", false)
	if names, _ := e.aggregated(`labels.egress-operator-installation = "blue"`, 0); len(names) != 4 {
		t.Fatalf("reachable again: %v", names)
	}
}

// instances.list of one zone filters and pages too.
func TestListOneZone(t *testing.T) {
	e := newEnv(t)
	seedFleet(t, e)
	it := e.ic.List(e.ctx, &computepb.ListInstancesRequest{Project: project, Zone: zone,
		Filter: proto.String(`labels.egress-operator-managed = "true"`), MaxResults: proto.Uint32(1)})
	var names []string
	for {
		in, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, in.GetName())
	}
	if got := strings.Join(names, " "); got != "egress-a egress-b egress-c" {
		t.Fatalf("list: %q", got)
	}
	if n := e.fake.Count("GET", "projects/*/zones/us-central1-a/instances"); n != 3 {
		t.Fatalf("%d pages", n)
	}
}
