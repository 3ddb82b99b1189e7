package fakecompute_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
)

var (
	_, internalNet, _ = net.ParseCIDR("10.128.0.0/20")
	_, externalNet, _ = net.ParseCIDR("203.0.113.0/24")
)

func addrs(in *computepb.Instance) (internal, external string) {
	nic := in.GetNetworkInterfaces()[0]
	internal = nic.GetNetworkIP()
	if acs := nic.GetAccessConfigs(); len(acs) > 0 {
		external = acs[0].GetNatIP()
	}
	return internal, external
}

// An instance goes PROVISIONING, STAGING (internal address), RUNNING
// (external address) as a client polls it, and reads as the API writes it.
func TestInsertThenGetWalksTheLifecycle(t *testing.T) {
	e := newEnv(t)
	op := e.insert(body("egress-a"))
	if op.Done() || op.Proto().GetStatus() != computepb.Operation_RUNNING || op.Proto().GetOperationType() != "insert" {
		t.Fatalf("insert answered %v, want a RUNNING insert operation", op.Proto())
	}
	if !strings.HasSuffix(op.Proto().GetTargetLink(), "/projects/proj-1/zones/us-central1-a/instances/egress-a") ||
		!strings.HasPrefix(op.Proto().GetZone(), "https://www.googleapis.com/compute/v1/projects/proj-1/zones/") {
		t.Errorf("operation links %q %q", op.Proto().GetTargetLink(), op.Proto().GetZone())
	}

	in := e.mustGet("egress-a")
	if in.GetStatus() != "PROVISIONING" {
		t.Fatalf("first get: %s, want PROVISIONING", in.GetStatus())
	}
	if i, x := addrs(in); i != "" || x != "" {
		t.Errorf("PROVISIONING with addresses %q %q", i, x)
	}
	in = e.mustGet("egress-a")
	i, x := addrs(in)
	if in.GetStatus() != "STAGING" || !internalNet.Contains(net.ParseIP(i)) || x != "" {
		t.Fatalf("second get: %s %q %q, want STAGING with an internal address only", in.GetStatus(), i, x)
	}
	in = e.mustGet("egress-a")
	i, x = addrs(in)
	if in.GetStatus() != "RUNNING" || !internalNet.Contains(net.ParseIP(i)) || !externalNet.Contains(net.ParseIP(x)) {
		t.Fatalf("third get: %s %q %q, want RUNNING with both addresses", in.GetStatus(), i, x)
	}
	if got := e.pollZoneOp(op.Name()); got.GetStatus() != computepb.Operation_DONE || got.GetProgress() != 100 || got.GetEndTime() == "" {
		t.Errorf("insert operation after RUNNING: %v", got)
	}

	if in.GetKind() != "compute#instance" || in.GetId() == 0 || in.GetLabelFingerprint() == "" ||
		in.GetSelfLink() != "https://www.googleapis.com/compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a" ||
		in.GetMachineType() != "https://www.googleapis.com/compute/v1/projects/proj-1/zones/us-central1-a/machineTypes/e2-small" {
		t.Errorf("instance fields: %v", in)
	}
	if _, err := time.Parse(time.RFC3339, in.GetCreationTimestamp()); err != nil || !strings.HasSuffix(in.GetCreationTimestamp(), "-08:00") {
		t.Errorf("creationTimestamp %q: %v", in.GetCreationTimestamp(), err)
	}
	d := in.GetDisks()[0]
	if d.GetInitializeParams() != nil || !strings.HasSuffix(d.GetSource(), "/zones/us-central1-a/disks/egress-a") ||
		d.GetDiskSizeGb() != 20 || !d.GetAutoDelete() || !d.GetBoot() {
		t.Errorf("boot disk %v", d)
	}
	if in.GetLabels()["egress-operator-uid"] != "6f1c2a" || in.GetMetadata().GetItems()[0].GetValue() == "" {
		t.Errorf("labels or metadata lost: %v %v", in.GetLabels(), in.GetMetadata())
	}
}

// An operation runs for SetOperationPolls polls: the n-th poll sees DONE.
func TestOperationIsDoneOnItsNthPoll(t *testing.T) {
	e := newEnv(t)
	e.fake.SetAdvanceOnGet(false)
	e.fake.SetOperationPolls(3)
	op := e.insert(body("egress-a"))
	for i := 1; i <= 2; i++ {
		if got := e.pollZoneOp(op.Name()); got.GetStatus() != computepb.Operation_RUNNING {
			t.Fatalf("poll %d: %s, want RUNNING", i, got.GetStatus())
		}
		if st := e.mustGet("egress-a").GetStatus(); st == "RUNNING" {
			t.Fatalf("instance RUNNING after poll %d of 3", i)
		}
	}
	if got := e.pollZoneOp(op.Name()); got.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("poll 3: %s, want DONE", got.GetStatus())
	}
	if st := e.mustGet("egress-a").GetStatus(); st != "RUNNING" {
		t.Fatalf("after DONE: %s", st)
	}
}

// The SDK's Operation.Wait polls the fake to DONE.
func TestSDKWaitReachesDone(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	op := e.insert(body("egress-a"))
	if err := op.Wait(e.ctx); err != nil || !op.Done() {
		t.Fatalf("Wait: %v, done %v", err, op.Done())
	}
	if st := e.mustGet("egress-a").GetStatus(); st != "RUNNING" {
		t.Fatalf("after Wait: %s", st)
	}
}

// zoneOperations.wait runs the operation out; with SetWaitPolls(1) it may
// come back RUNNING, as the API's may.
func TestOperationsWait(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(5)
	op := e.insert(body("egress-a"))
	got, err := e.zo.Wait(e.ctx, &computepb.WaitZoneOperationRequest{Project: project, Zone: zone, Operation: op.Name()})
	if err != nil || got.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("wait: %v %v", got.GetStatus(), err)
	}
	e.fake.SetWaitPolls(1)
	op = e.insert(body("egress-b"))
	got, err = e.zo.Wait(e.ctx, &computepb.WaitZoneOperationRequest{Project: project, Zone: zone, Operation: op.Name()})
	if err != nil || got.GetStatus() != computepb.Operation_RUNNING {
		t.Fatalf("wait with one poll: %v %v, want RUNNING", got.GetStatus(), err)
	}
	_, err = e.zo.Get(e.ctx, &computepb.GetZoneOperationRequest{Project: project, Zone: zone, Operation: "operation-0-0-0-0"})
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/proj-1/zones/us-central1-a/operations/operation-0-0-0-0' was not found")
}

// A repeated requestId returns the operation the first call started and
// creates nothing more; a non-UUID is refused.
func TestRequestIDMakesInsertIdempotent(t *testing.T) {
	e := newEnv(t)
	const id = "0b5c0d7e-0000-4000-8000-000000000001"
	first, err := e.insertErr(body("egress-a"), id)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.insertErr(body("egress-a"), id)
	if err != nil {
		t.Fatalf("repeat with the same requestId: %v", err)
	}
	if again.Name() != first.Name() {
		t.Fatalf("repeat answered operation %s, want %s", again.Name(), first.Name())
	}
	if n := len(e.fake.Instances(project)); n != 1 {
		t.Fatalf("%d instances after a repeated requestId", n)
	}
	_, err = e.insertErr(body("egress-a"), "")
	wantAPIError(t, err, 409, "alreadyExists", "The resource 'projects/proj-1/zones/us-central1-a/instances/egress-a' already exists")
	_, err = e.insertErr(body("egress-b"), "not-a-uuid")
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'requestId': 'not-a-uuid'")
}

// Delete makes the instance STOPPING and removes it when DONE; a second
// delete meanwhile is refused as configured.
func TestDeleteAndRepeatedDelete(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	e.insert(body("egress-a"))
	e.fake.SetOperationPolls(3)
	e.fake.SetAdvanceOnGet(false)
	del, err := e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	if err != nil {
		t.Fatal(err)
	}
	if st := e.mustGet("egress-a").GetStatus(); st != "STOPPING" {
		t.Fatalf("being deleted: %s, want STOPPING", st)
	}

	_, err = e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	wantAPIError(t, err, 403, "rateLimitExceeded", "Quota exceeded")
	e.fake.SetRepeatDelete(fakecompute.RepeatDeleteNotReady)
	_, err = e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	wantAPIError(t, err, 400, "resourceNotReady", "The resource 'projects/proj-1/zones/us-central1-a/instances/egress-a' is not ready")
	e.fake.SetRepeatDelete(fakecompute.RepeatDeleteNewOperation)
	second, err := e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	if err != nil || second.Name() == del.Name() {
		t.Fatalf("second delete: %v (operation %s, first %s)", err, second.Name(), del.Name())
	}
	// Polling the second polls the first.
	for i := 0; i < 3; i++ {
		e.pollZoneOp(second.Name())
	}
	if got := e.pollZoneOp(del.Name()); got.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("first delete after three polls of the second: %s", got.GetStatus())
	}
	_, err = e.get("egress-a")
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/proj-1/zones/us-central1-a/instances/egress-a' was not found")
	_, err = e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	wantAPIError(t, err, 404, "notFound", "was not found")
}

// A client that only GETs a deleted instance sees it disappear.
func TestDeletedInstanceDisappearsOnGets(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	e.insert(body("egress-a"))
	e.fake.SetOperationPolls(2)
	if _, err := e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if in, err := e.get("egress-a"); err != nil || in.GetStatus() != "STOPPING" {
			t.Fatalf("get %d: %v %v, want STOPPING", i, in.GetStatus(), err)
		}
	}
	_, err := e.get("egress-a")
	wantAPIError(t, err, 404, "notFound", "was not found")
}

// Any call on an instance another operation is busy with is 400
// resourceNotReady: here a delete while the insert still runs.
func TestDeleteWhileInsertRunsIsNotReady(t *testing.T) {
	e := newEnv(t)
	e.fake.SetAdvanceOnGet(false)
	e.insert(body("egress-a"))
	_, err := e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	wantAPIError(t, err, 400, "resourceNotReady", "is not ready")
	e.fake.Settle()
	if _, err := e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"}); err != nil {
		t.Fatalf("delete after the insert is DONE: %v", err)
	}
}

// stop, start, suspend, resume move the status as GCE does; start gives a
// new external address.
func TestStopStartSuspendResume(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	e.insert(body("egress-a"))
	_, before := addrs(e.mustGet("egress-a"))
	e.fake.SetOperationPolls(1)
	e.fake.SetAdvanceOnGet(false)

	call := func(what string, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	ref := func() (string, string, string) { return project, zone, "egress-a" }
	p, z, n := ref()
	call("stop", func() error {
		_, err := e.ic.Stop(e.ctx, &computepb.StopInstanceRequest{Project: p, Zone: z, Instance: n})
		return err
	})
	if st := e.mustGet(n).GetStatus(); st != "STOPPING" {
		t.Fatalf("after stop: %s", st)
	}
	e.fake.Advance(1)
	in := e.mustGet(n)
	if _, x := addrs(in); in.GetStatus() != "TERMINATED" || x != "" {
		t.Fatalf("stopped: %s with external %q", in.GetStatus(), x)
	}
	call("start", func() error {
		_, err := e.ic.Start(e.ctx, &computepb.StartInstanceRequest{Project: p, Zone: z, Instance: n})
		return err
	})
	if st := e.mustGet(n).GetStatus(); st != "PROVISIONING" {
		t.Fatalf("after start: %s", st)
	}
	e.fake.Advance(1)
	in = e.mustGet(n)
	if _, x := addrs(in); in.GetStatus() != "RUNNING" || x == "" || x == before {
		t.Fatalf("started: %s with external %q (before %q), want RUNNING with a new address", in.GetStatus(), x, before)
	}
	call("suspend", func() error {
		_, err := e.ic.Suspend(e.ctx, &computepb.SuspendInstanceRequest{Project: p, Zone: z, Instance: n})
		return err
	})
	e.fake.Advance(1)
	if st := e.mustGet(n).GetStatus(); st != "SUSPENDED" {
		t.Fatalf("after suspend: %s", st)
	}
	_, err := e.ic.Start(e.ctx, &computepb.StartInstanceRequest{Project: p, Zone: z, Instance: n})
	wantAPIError(t, err, 400, "invalid", "is suspended")
	call("resume", func() error {
		_, err := e.ic.Resume(e.ctx, &computepb.ResumeInstanceRequest{Project: p, Zone: z, Instance: n})
		return err
	})
	if st := e.mustGet(n).GetStatus(); st != "STAGING" {
		t.Fatalf("after resume: %s", st)
	}
	e.fake.Advance(1)
	if st := e.mustGet(n).GetStatus(); st != "RUNNING" {
		t.Fatalf("resumed: %s", st)
	}
}

// setLabels needs the current fingerprint (412 conditionNotMet otherwise,
// the body as the API sends it) and valid labels.
func TestSetLabelsChecksTheFingerprint(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	e.insert(body("egress-a"))
	in := e.mustGet("egress-a")
	set := func(fp string, labels map[string]string) error {
		_, err := e.ic.SetLabels(e.ctx, &computepb.SetLabelsInstanceRequest{Project: project, Zone: zone, Instance: "egress-a",
			InstancesSetLabelsRequestResource: &computepb.InstancesSetLabelsRequest{LabelFingerprint: proto.String(fp), Labels: labels}})
		return err
	}
	gerr := wantAPIError(t, set("", map[string]string{"a": "b"}), 412, "conditionNotMet",
		"Labels fingerprint either invalid or resource labels have changed")
	if !strings.Contains(gerr.Body, `"location":"If-Match"`) || !strings.Contains(gerr.Body, `"locationType":"header"`) {
		t.Errorf("412 body without its location: %s", gerr.Body)
	}
	wantAPIError(t, set(in.GetLabelFingerprint(), map[string]string{"Owner": "x"}), 400, "invalid",
		"Invalid value for field 'labels': ''. Label key 'Owner' violates format constraints.")
	if err := set(in.GetLabelFingerprint(), map[string]string{"egress-operator-managed": "true", "team": "net"}); err != nil {
		t.Fatalf("setLabels with the current fingerprint: %v", err)
	}
	after := e.mustGet("egress-a")
	if after.GetLabels()["team"] != "net" || after.GetLabelFingerprint() == in.GetLabelFingerprint() {
		t.Fatalf("labels %v fingerprint %q (was %q)", after.GetLabels(), after.GetLabelFingerprint(), in.GetLabelFingerprint())
	}
	wantAPIError(t, set(in.GetLabelFingerprint(), map[string]string{"x": "y"}), 412, "conditionNotMet", "fingerprint")
}

// The fake disagrees with a bad insert body the way the API does.
func TestInsertValidation(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name   string
		mutate func(*computepb.Instance)
		code   int
		reason string
		msg    string
	}{
		{"no name", func(b *computepb.Instance) { b.Name = nil }, 400, "required", "Required field 'resource.name' not specified"},
		{"bad name", func(b *computepb.Instance) { b.Name = proto.String("Egress_A") }, 400, "invalid",
			"Invalid value for field 'resource.name': 'Egress_A'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"},
		{"name too long", func(b *computepb.Instance) { b.Name = proto.String("a" + strings.Repeat("b", 63)) }, 400, "invalid", "Must be a match of regex"},
		{"short machine type", func(b *computepb.Instance) { b.MachineType = proto.String("e2-small") }, 400, "invalid",
			"Invalid value for field 'resource.machineType': 'e2-small'. The URL is malformed."},
		{"unknown machine type", func(b *computepb.Instance) {
			b.MachineType = proto.String("zones/us-central1-a/machineTypes/n1-standard-99")
		},
			400, "invalid", "Machine type with name 'n1-standard-99' does not exist in zone 'us-central1-a'."},
		{"machine type of another zone", func(b *computepb.Instance) { b.MachineType = proto.String("zones/us-east1-b/machineTypes/e2-small") },
			400, "invalid", "Invalid value for field 'resource.machineType'"},
		{"no disks", func(b *computepb.Instance) { b.Disks = nil }, 400, "invalid", "Invalid value for field 'resource.disks': ''. No disks are specified."},
		{"first disk not boot", func(b *computepb.Instance) { b.Disks[0].Boot = nil }, 400, "invalid",
			"Invalid value for field 'resource.disks[0]': ''. Boot disk must be the first disk attached to the instance."},
		{"no image", func(b *computepb.Instance) { b.Disks[0].InitializeParams.SourceImage = nil }, 400, "required",
			"Required field 'resource.disks[0].initializeParams.sourceImage' not specified"},
		{"family without project", func(b *computepb.Instance) {
			b.Disks[0].InitializeParams.SourceImage = proto.String("family/debian-12")
		},
			400, "invalid", "'family/debian-12'. The URL is malformed."},
		{"unknown image", func(b *computepb.Instance) {
			b.Disks[0].InitializeParams.SourceImage = proto.String("projects/debian-cloud/global/images/family/debian-10")
		}, 404, "notFound", "The resource 'projects/debian-cloud/global/images/family/debian-10' was not found"},
		{"no network interface", func(b *computepb.Instance) { b.NetworkInterfaces = nil }, 400, "required", "'resource.networkInterfaces'"},
		{"unknown network", func(b *computepb.Instance) { b.NetworkInterfaces[0].Network = proto.String("global/networks/prod") },
			404, "notFound", "The resource 'projects/proj-1/global/networks/prod' was not found"},
		{"subnetwork of another region", func(b *computepb.Instance) {
			b.NetworkInterfaces[0].Subnetwork = proto.String("regions/us-east1/subnetworks/default")
		}, 404, "notFound", "projects/proj-1/regions/us-east1/subnetworks/default"},
		{"bad tag", func(b *computepb.Instance) { b.Tags.Items = []string{"Egress"} }, 400, "invalid", "'resource.tags.items[0]': 'Egress'"},
		{"label value with a dot", func(b *computepb.Instance) { b.Labels["role"] = "head.default" }, 400, "invalid",
			"Invalid value for field 'resource.labels': ''. Label value 'head.default' violates format constraints. The value can only contain lowercase letters, numeric characters, underscores and dashes. The value can be at most 63 characters long. International characters are allowed."},
		{"label value too long", func(b *computepb.Instance) { b.Labels["uid"] = strings.Repeat("a", 64) }, 400, "invalid", "Label value 'aaaa"},
		{"label key upper case", func(b *computepb.Instance) { b.Labels["KubernetesCluster"] = "x" }, 400, "invalid",
			"Label key 'KubernetesCluster' violates format constraints. The key must start with a lowercase character"},
		{"label key starting with a digit", func(b *computepb.Instance) { b.Labels["1x"] = "x" }, 400, "invalid", "Label key '1x'"},
		{"65 labels", func(b *computepb.Instance) {
			for i := 0; i < 63; i++ {
				b.Labels["k"+strings.Repeat("x", i)] = "v"
			}
		}, 400, "invalid", "at most 64 labels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := body("egress-a")
			c.mutate(b)
			_, err := e.insertErr(b, "")
			wantAPIError(t, err, c.code, c.reason, c.msg)
		})
	}
	if n := len(e.fake.Instances(project)); n != 0 {
		t.Fatalf("%d instances created by refused inserts", n)
	}
	// International characters are allowed, as the API says.
	b := body("egress-intl")
	b.Labels["équipe"] = "réseau"
	if _, err := e.insertErr(b, ""); err != nil {
		t.Fatalf("international label: %v", err)
	}
}

// An unknown project is 404, an unknown zone 400, as the API answers.
func TestUnknownProjectAndZone(t *testing.T) {
	e := newEnv(t)
	_, err := e.ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: "nope", Zone: zone, Instance: "x"})
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/nope' was not found")
	_, err = e.ic.Insert(e.ctx, &computepb.InsertInstanceRequest{Project: project, Zone: "us-central1-q", InstanceResource: body("x")})
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'zone': 'us-central1-q'. Unknown zone.")
	_, err = e.ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: "us-east1", Instance: "x"})
	wantAPIError(t, err, 400, "invalid", "Unknown zone.")
}

// SetAddressDelay gives a RUNNING instance without an external address for
// a few steps.
func TestAddressDelay(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	e.fake.SetAddressDelay(2)
	e.insert(body("egress-a"))
	for i := 0; i < 2; i++ {
		in := e.mustGet("egress-a")
		if _, x := addrs(in); in.GetStatus() != "RUNNING" || x != "" {
			t.Fatalf("get %d: %s %q, want RUNNING without an external address", i, in.GetStatus(), x)
		}
	}
	if _, x := addrs(e.mustGet("egress-a")); !externalNet.Contains(net.ParseIP(x)) {
		t.Fatalf("external address %q after the delay", x)
	}
}

// PutInstance seeds stopped and suspended instances for adoption tests.
func TestPutInstance(t *testing.T) {
	e := newEnv(t)
	if err := e.fake.PutInstance(project, zone, body("egress-old"), "TERMINATED"); err != nil {
		t.Fatal(err)
	}
	in := e.mustGet("egress-old")
	if i, x := addrs(in); in.GetStatus() != "TERMINATED" || i == "" || x != "" {
		t.Fatalf("seeded: %s %q %q", in.GetStatus(), i, x)
	}
	if err := e.fake.PutInstance(project, zone, body("Bad_Name"), ""); err == nil {
		t.Fatal("PutInstance took an invalid body")
	}
	if err := e.fake.SetInstanceStatus(project, zone, "egress-old", "SUSPENDED"); err != nil {
		t.Fatal(err)
	}
	if st := e.mustGet("egress-old").GetStatus(); st != "SUSPENDED" {
		t.Fatalf("status %s", st)
	}
}
