package fakecompute_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
)

// The JSON on the wire is the API's: camelCase, 64-bit integers as
// strings, status names, kind and links.
func TestWireForm(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	op := e.insert(body("egress-a"))
	_, b := e.raw("GET", "/compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a")
	var in map[string]any
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	if _, ok := in["id"].(string); !ok {
		t.Errorf("id is %T, the API sends 64-bit integers as strings: %s", in["id"], b)
	}
	disk := in["disks"].([]any)[0].(map[string]any)
	if _, ok := disk["diskSizeGb"].(string); !ok || disk["autoDelete"] != true {
		t.Errorf("disk %v", disk)
	}
	for _, k := range []string{"kind", "creationTimestamp", "selfLink", "machineType", "networkInterfaces", "labelFingerprint", "status", "zone"} {
		if _, ok := in[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	nic := in["networkInterfaces"].([]any)[0].(map[string]any)
	if _, ok := nic["networkIP"]; !ok || nic["name"] != "nic0" {
		t.Errorf("nic %v", nic)
	}
	for _, snake := range []string{"network_interfaces", "self_link", "creation_timestamp", "machine_type"} {
		if bytes.Contains(b, []byte(`"`+snake+`"`)) {
			t.Errorf("snake_case %q on the wire", snake)
		}
	}
	_, b = e.raw("GET", "/compute/v1/projects/proj-1/zones/us-central1-a/operations/"+op.Name())
	var o map[string]any
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	if o["status"] != "DONE" || o["kind"] != "compute#operation" || o["progress"] != float64(100) {
		t.Errorf("operation %s", b)
	}
	if _, ok := o["targetId"].(string); !ok {
		t.Errorf("targetId %T", o["targetId"])
	}
	if !strings.HasPrefix(op.Name(), "operation-") || strings.Count(op.Name(), "-") != 4 {
		t.Errorf("operation name %q, want the API's operation-<ms>-<hex>-<hex>-<hex>", op.Name())
	}

	// A body with a field the API does not know is refused.
	req, _ := http.NewRequestWithContext(e.ctx, "POST", e.srv.URL+"/compute/v1/projects/proj-1/zones/us-central1-a/instances",
		strings.NewReader(`{"name":"egress-z","machineTyp":"zones/us-central1-a/machineTypes/e2-small"}`))
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("unknown field: %d", resp.StatusCode)
	}
}

// Reset empties the fake and restores the knobs.
func TestReset(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	e.insert(body("egress-a"))
	e.fake.FailNext(fakecompute.Fault{Path: "**", Times: fakecompute.Always, Err: fakecompute.BackendError()})
	e.fake.SetZoneUnreachable(zone, true)
	e.fake.Reset()
	if len(e.fake.Instances(project)) != 0 || len(e.fake.Requests()) != 0 || len(e.fake.Operations(project)) != 0 {
		t.Fatal("state left after Reset")
	}
	op := e.insert(body("egress-a"))
	if op.Done() {
		t.Fatal("operation polls not restored to the default by Reset")
	}
	if names, w := e.aggregated("", 0); len(names) != 1 || w["zones/"+zone] != "" {
		t.Fatalf("after Reset: %v %v", names, w)
	}
}

// Concurrent clients (run with -race): inserts, gets, lists, polls and
// knob calls at once leave a consistent fake.
func TestConcurrentClients(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("egress-%d", i)
			op, err := e.ic.Insert(e.ctx, &computepb.InsertInstanceRequest{Project: project, Zone: zone, InstanceResource: body(name)})
			if err != nil {
				errs <- err
				return
			}
			if err := op.Wait(e.ctx); err != nil {
				errs <- err
				return
			}
			if _, err := e.ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: zone, Instance: name}); err != nil {
				errs <- err
			}
			it := e.ic.AggregatedList(e.ctx, &computepb.AggregatedListInstancesRequest{Project: project, MaxResults: proto.Uint32(3)})
			for {
				if _, err := it.Next(); err != nil {
					break
				}
			}
			e.fake.Advance(1)
			_ = e.fake.Requests()
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ins := e.fake.Instances(project)
	if len(ins) != 8 {
		t.Fatalf("%d instances, want 8", len(ins))
	}
	seen := map[string]bool{}
	for _, in := range ins {
		ip := in.GetNetworkInterfaces()[0].GetNetworkIP()
		if ip == "" || seen[ip] {
			t.Fatalf("internal address %q missing or shared", ip)
		}
		seen[ip] = true
	}
}
