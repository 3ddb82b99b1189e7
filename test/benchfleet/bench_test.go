package main

import (
	"bufio"
	"strings"
	"testing"
	"time"
)

func TestParseWrites(t *testing.T) {
	metrics := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="egress.proxy-operator.dev",resource="proxies",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 5
apiserver_request_total{code="201",component="apiserver",dry_run="",group="authorization.k8s.io",resource="selfsubjectaccessreviews",scope="cluster",subresource="",verb="POST",version="v1"} 4
apiserver_request_duration_seconds_count{verb="POST",resource="events"} 99
`
	got, err := parseWrites(bufio.NewScanner(strings.NewReader(metrics)))
	if err != nil {
		t.Fatal(err)
	}
	want := writeCounts{
		{"POST", "events"}:                   8, // summed over codes
		{"PATCH", "proxies/status"}:          3,
		{"GET", "pods"}:                      2,
		{"POST", "selfsubjectaccessreviews"}: 4,
	}
	if len(got) != len(want) {
		t.Fatalf("parseWrites = %v, want %v (WATCH and other metrics left out)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	writes, asks, reads := got.split()
	if writes.total() != 11 || asks.total() != 4 || reads.total() != 2 {
		t.Errorf("split: writes %v, reviews %v, reads %v; want 11, 4, 2", writes, asks, reads)
	}
	if s := writes.perObject(2); s != "POST events 4.00, PATCH proxies/status 1.50" {
		t.Errorf("perObject = %q", s)
	}
}

func TestMinus(t *testing.T) {
	before := writeCounts{{"POST", "events"}: 3, {"PUT", "leases"}: 1}
	after := writeCounts{{"POST", "events"}: 5, {"PUT", "leases"}: 1, {"POST", "pods"}: 2}
	d := after.minus(before)
	if len(d) != 2 || d[writeKey{"POST", "events"}] != 2 || d[writeKey{"POST", "pods"}] != 2 {
		t.Errorf("minus = %v, want POST events 2, POST pods 2 and nothing unchanged", d)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(101-i)*time.Second) // unsorted
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Second}, {90, 90 * time.Second}, {99, 99 * time.Second}, {100, 100 * time.Second}, {0.1, time.Second}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
}

func TestLocalBindCIDR(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{50, "127.64.0.0/16"},
		{10000, "127.64.0.0/16"},
		{32766, "127.64.0.0/16"},  // 2n+3 = 65535 addresses fit
		{32767, "127.64.0.0/15"},  // 65537 do not
		{100000, "127.64.0.0/14"}, // 200003 < 2^18
	} {
		if got := localBindCIDR(tc.n); got != tc.want {
			t.Errorf("localBindCIDR(%d) = %s, want %s", tc.n, got, tc.want)
		}
	}
}

// TestRatios: the operator's times and write rate over the floor's. Here
// the operator took 3x the floor's time for 2.25x its writes: the API
// server took writes at 0.75 of the floor's rate.
func TestRatios(t *testing.T) {
	var out strings.Builder
	r := &report{out: &out}
	r.ratios("kubernetes",
		phases{create: 4 * time.Second, delete: 2 * time.Second, createWrites: 4000, deleteWrites: 2000},
		phases{create: 12 * time.Second, delete: 8 * time.Second, createWrites: 9000, deleteWrites: 6000})
	want := `kubernetes.create_ratio_to_floor: 3.00
kubernetes.delete_ratio_to_floor: 4.00
kubernetes.floor_create_writes_per_second: 1000.00
kubernetes.create_writes_per_second: 750.00
kubernetes.create_write_rate_to_floor: 0.75
kubernetes.floor_delete_writes_per_second: 1000.00
kubernetes.delete_writes_per_second: 750.00
kubernetes.delete_write_rate_to_floor: 0.75
`
	if out.String() != want {
		t.Errorf("ratios printed\n%s\nwant\n%s", out.String(), want)
	}
}
