package fakecompute_test

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
)

const addrPrefix = "projects/proj-1/regions/us-central1/addresses/"

func (e *env) reserveErr(reg string, a *computepb.Address) (*compute.Operation, error) {
	return e.ac.Insert(e.ctx, &computepb.InsertAddressRequest{Project: project, Region: reg, AddressResource: a})
}

// reserve reserves an EXTERNAL address in region and waits it out.
func (e *env) reserve(reg, name string) *computepb.Address {
	e.t.Helper()
	op, err := e.reserveErr(reg, &computepb.Address{Name: proto.String(name)})
	if err != nil {
		e.t.Fatalf("addresses.insert %s: %v", name, err)
	}
	e.wait(op)
	return e.mustAddress(reg, name)
}

func (e *env) getAddress(reg, name string) (*computepb.Address, error) {
	return e.ac.Get(e.ctx, &computepb.GetAddressRequest{Project: project, Region: reg, Address: name})
}

func (e *env) mustAddress(reg, name string) *computepb.Address {
	e.t.Helper()
	a, err := e.getAddress(reg, name)
	if err != nil {
		e.t.Fatalf("addresses.get %s: %v", name, err)
	}
	return a
}

func (e *env) wait(op *compute.Operation) {
	e.t.Helper()
	if err := op.Wait(e.ctx); err != nil {
		e.t.Fatalf("%s %s: %v", op.Proto().GetOperationType(), op.Proto().GetTargetLink(), err)
	}
	if !op.Done() || op.Proto().GetError() != nil {
		e.t.Fatalf("operation after Wait: %v", op.Proto())
	}
}

// staticBody is body(name) whose access config names natIP.
func staticBody(name, natIP string) *computepb.Instance {
	b := body(name)
	b.NetworkInterfaces[0].AccessConfigs[0].NatIP = proto.String(natIP)
	return b
}

// bareBody is body(name) without an access config (no external address).
func bareBody(name string) *computepb.Instance {
	b := body(name)
	b.NetworkInterfaces[0].AccessConfigs = nil
	return b
}

func natIP(in *computepb.Instance) string {
	_, x := addrs(in)
	return x
}

// wantAddress checks an address's status and users.
func wantAddress(t *testing.T, a *computepb.Address, status string, users ...string) {
	t.Helper()
	if a.GetStatus() != status || !slices.Equal(a.GetUsers(), users) {
		t.Fatalf("address %s: %s users %q, want %s users %q", a.GetName(), a.GetStatus(), a.GetUsers(), status, users)
	}
}

const instLink = "https://www.googleapis.com/compute/v1/projects/proj-1/zones/us-central1-a/instances/"

// The cycle a Proxy keeping its address goes through: reserve, an instance
// holds it (IN_USE, users), delete refused, deleteAccessConfig frees it,
// addAccessConfig gives it to another instance, that instance's delete
// frees it, the address is deleted. Every call is in the request log.
func TestAddressFollowsTheInstancesHoldingIt(t *testing.T) {
	e := newEnv(t)

	// Reserve: RESERVING while the regional insert operation runs.
	op, err := e.reserveErr(region, &computepb.Address{Name: proto.String("egress-ip"), Description: proto.String("proxy p1"),
		Labels: map[string]string{"egress-operator-managed": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if op.Proto().GetOperationType() != "insert" || op.Proto().GetRegion() != "https://www.googleapis.com/compute/v1/projects/proj-1/regions/us-central1" ||
		op.Proto().GetTargetLink() != "https://www.googleapis.com/compute/v1/"+addrPrefix+"egress-ip" || op.Proto().GetZone() != "" {
		t.Errorf("insert operation %v", op.Proto())
	}
	a := e.mustAddress(region, "egress-ip")
	wantAddress(t, a, "RESERVING")
	e.wait(op)
	a = e.mustAddress(region, "egress-ip")
	wantAddress(t, a, "RESERVED")
	ip := a.GetAddress()
	if !externalNet.Contains(net.ParseIP(ip)) || a.GetAddressType() != "EXTERNAL" || a.GetNetworkTier() != "PREMIUM" ||
		a.GetKind() != "compute#address" || a.GetId() == 0 || a.GetLabelFingerprint() == "" ||
		a.GetSelfLink() != "https://www.googleapis.com/compute/v1/"+addrPrefix+"egress-ip" ||
		a.GetRegion() != "https://www.googleapis.com/compute/v1/projects/proj-1/regions/us-central1" {
		t.Fatalf("reserved address %v", a)
	}

	e.fake.SetOperationPolls(1) // from here every Wait is one poll

	// An instance holding it: its natIP from the start, the address IN_USE.
	op = e.insert(staticBody("egress-a", ip))
	if got := natIP(e.mustGet("egress-a")); got != ip {
		t.Errorf("natIP while PROVISIONING %q, want the reserved %s", got, ip)
	}
	e.wait(op)
	in := e.mustGet("egress-a")
	if in.GetStatus() != "RUNNING" || natIP(in) != ip || in.GetNetworkInterfaces()[0].GetAccessConfigs()[0].GetNetworkTier() != "PREMIUM" {
		t.Fatalf("instance %s natIP %q, want RUNNING with %s", in.GetStatus(), natIP(in), ip)
	}
	wantAddress(t, e.mustAddress(region, "egress-ip"), "IN_USE", instLink+"egress-a")

	// Deleting it while in use is refused.
	_, err = e.ac.Delete(e.ctx, &computepb.DeleteAddressRequest{Project: project, Region: region, Address: "egress-ip"})
	wantAPIError(t, err, 400, "resourceInUseByAnotherResource",
		"The address resource '"+addrPrefix+"egress-ip' is already being used by 'projects/proj-1/zones/us-central1-a/instances/egress-a'")

	// deleteAccessConfig releases it.
	op, err = e.ic.DeleteAccessConfig(e.ctx, &computepb.DeleteAccessConfigInstanceRequest{Project: project, Zone: zone,
		Instance: "egress-a", AccessConfig: "External NAT", NetworkInterface: "nic0"})
	if err != nil {
		t.Fatal(err)
	}
	if op.Proto().GetOperationType() != "deleteAccessConfig" {
		t.Errorf("operation %v", op.Proto())
	}
	e.wait(op)
	if acs := e.mustGet("egress-a").GetNetworkInterfaces()[0].GetAccessConfigs(); len(acs) != 0 {
		t.Fatalf("access configs after deleteAccessConfig: %v", acs)
	}
	wantAddress(t, e.mustAddress(region, "egress-ip"), "RESERVED")

	// addAccessConfig gives it to another instance.
	e.wait(e.insert(bareBody("egress-b")))
	if got := natIP(e.mustGet("egress-b")); got != "" {
		t.Fatalf("an instance without access config has natIP %q", got)
	}
	op, err = e.ic.AddAccessConfig(e.ctx, &computepb.AddAccessConfigInstanceRequest{Project: project, Zone: zone, Instance: "egress-b",
		NetworkInterface: "nic0", AccessConfigResource: &computepb.AccessConfig{Name: proto.String("External NAT"),
			Type: proto.String("ONE_TO_ONE_NAT"), NatIP: proto.String(ip)}})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	if got := natIP(e.mustGet("egress-b")); got != ip {
		t.Fatalf("natIP after addAccessConfig %q, want %s", got, ip)
	}
	wantAddress(t, e.mustAddress(region, "egress-ip"), "IN_USE", instLink+"egress-b")

	// Deleting the instance releases it.
	op, err = e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-b"})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	wantAddress(t, e.mustAddress(region, "egress-ip"), "RESERVED")

	// Now it can be deleted.
	op, err = e.ac.Delete(e.ctx, &computepb.DeleteAddressRequest{Project: project, Region: region, Address: "egress-ip"})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	_, err = e.getAddress(region, "egress-ip")
	wantAPIError(t, err, 404, "notFound", "The resource '"+addrPrefix+"egress-ip' was not found")

	// The log holds every call; the polls (GETs) aside, exactly these.
	var calls []string
	for _, r := range e.fake.Requests() {
		if r.Method != "GET" {
			calls = append(calls, r.String())
		}
	}
	want := []string{
		"POST /compute/v1/projects/proj-1/regions/us-central1/addresses -> 200",
		"POST /compute/v1/projects/proj-1/zones/us-central1-a/instances -> 200",
		"DELETE /compute/v1/projects/proj-1/regions/us-central1/addresses/egress-ip -> 400",
		"POST /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a/deleteAccessConfig?accessConfig=External+NAT&networkInterface=nic0 -> 200",
		"POST /compute/v1/projects/proj-1/zones/us-central1-a/instances -> 200",
		"POST /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-b/addAccessConfig?networkInterface=nic0 -> 200",
		"DELETE /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-b -> 200",
		"DELETE /compute/v1/projects/proj-1/regions/us-central1/addresses/egress-ip -> 200",
	}
	if !slices.Equal(calls, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	if n := e.fake.Count("GET", "projects/proj-1/regions/us-central1/operations/*"); n < 2 {
		t.Errorf("%d regionOperations.get calls logged, want the SDK's Wait polls", n)
	}
	for _, r := range e.fake.Requests() {
		if strings.HasSuffix(r.Path, "/addAccessConfig") && !strings.Contains(r.Body, `"natIP":"`+ip+`"`) {
			t.Errorf("addAccessConfig body %s, want the natIP", r.Body)
		}
	}
}

// A stopped instance keeps its reserved address (the address stays
// IN_USE) and starts with it again.
func TestReservedAddressStaysWithAStoppedInstance(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	ip := e.reserve(region, "egress-ip").GetAddress()
	e.wait(e.insert(staticBody("egress-a", ip)))
	op, err := e.ic.Stop(e.ctx, &computepb.StopInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	if in := e.mustGet("egress-a"); in.GetStatus() != "TERMINATED" || natIP(in) != ip {
		t.Fatalf("stopped: %s natIP %q, want TERMINATED with %s", in.GetStatus(), natIP(in), ip)
	}
	wantAddress(t, e.mustAddress(region, "egress-ip"), "IN_USE", instLink+"egress-a")
	op, err = e.ic.Start(e.ctx, &computepb.StartInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	if in := e.mustGet("egress-a"); in.GetStatus() != "RUNNING" || natIP(in) != ip {
		t.Fatalf("started: %s natIP %q, want RUNNING with %s", in.GetStatus(), natIP(in), ip)
	}
}

// Reserving the ephemeral IP an instance holds promotes it: the address is
// IN_USE by that instance, and outlives it.
func TestReservingAnEphemeralIPPromotesIt(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	e.wait(e.insert(body("egress-a")))
	ip := natIP(e.mustGet("egress-a"))
	if ip == "" {
		t.Fatal("no ephemeral natIP")
	}
	op, err := e.reserveErr(region, &computepb.Address{Name: proto.String("egress-ip"), Address: proto.String(ip)})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	wantAddress(t, e.mustAddress(region, "egress-ip"), "IN_USE", instLink+"egress-a")
	op, err = e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	a := e.mustAddress(region, "egress-ip")
	wantAddress(t, a, "RESERVED")
	if a.GetAddress() != ip {
		t.Errorf("address %s, want the promoted %s", a.GetAddress(), ip)
	}
}

// A reserved INTERNAL address is held through networkIP; a second
// instance asking for the same IP fails its operation.
func TestInternalAddressHeldByNetworkIP(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	op, err := e.reserveErr(region, &computepb.Address{Name: proto.String("egress-int"), AddressType: proto.String("INTERNAL"),
		Address: proto.String("10.128.0.50")})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	a := e.mustAddress(region, "egress-int")
	wantAddress(t, a, "RESERVED")
	if a.GetSubnetwork() != "https://www.googleapis.com/compute/v1/projects/proj-1/regions/us-central1/subnetworks/default" ||
		a.GetPurpose() != "GCE_ENDPOINT" || a.GetAddress() != "10.128.0.50" {
		t.Errorf("internal address %v", a)
	}
	b := bareBody("egress-a")
	b.NetworkInterfaces[0].NetworkIP = proto.String("10.128.0.50")
	e.wait(e.insert(b))
	if i, _ := addrs(e.mustGet("egress-a")); i != "10.128.0.50" {
		t.Fatalf("networkIP %q", i)
	}
	wantAddress(t, e.mustAddress(region, "egress-int"), "IN_USE", instLink+"egress-a")

	b = bareBody("egress-b")
	b.NetworkInterfaces[0].NetworkIP = proto.String("10.128.0.50")
	op = e.insert(b)
	err = op.Wait(e.ctx)
	wantOpError(t, op, err, 409, "IP_IN_USE_BY_ANOTHER_RESOURCE", "IP '10.128.0.50' is already being used by another resource.")

	op, err = e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: "egress-a"})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	wantAddress(t, e.mustAddress(region, "egress-int"), "RESERVED")
}

// wantOpError checks a failed operation: Wait's error carries
// httpErrorStatusCode, the operation's error its code and message.
func wantOpError(t *testing.T, op *compute.Operation, err error, status int, code, msg string) *computepb.Errors {
	t.Helper()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != status {
		t.Fatalf("Wait: %v, want a %d", err, status)
	}
	errs := op.Proto().GetError().GetErrors()
	if len(errs) != 1 || errs[0].GetCode() != code || errs[0].GetMessage() != msg {
		t.Fatalf("operation error %v, want %s %q", op.Proto().GetError(), code, msg)
	}
	return errs[0]
}

// Each error as GCE answers it.
func TestAddressErrors(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	ip := e.reserve(region, "egress-ip").GetAddress()

	_, err := e.reserveErr(region, &computepb.Address{Name: proto.String("egress-ip")})
	wantAPIError(t, err, 409, "alreadyExists", "The resource '"+addrPrefix+"egress-ip' already exists")
	_, err = e.getAddress(region, "egress-none")
	wantAPIError(t, err, 404, "notFound", "The resource '"+addrPrefix+"egress-none' was not found")
	_, err = e.getAddress("mars-north1", "egress-ip")
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'region': 'mars-north1'. Unknown region.")
	_, err = e.reserveErr(region, &computepb.Address{Name: proto.String("Egress")})
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'resource.name': 'Egress'. Must be a match of regex")
	_, err = e.reserveErr(region, &computepb.Address{Name: proto.String("egress-x"), Subnetwork: proto.String("regions/us-central1/subnetworks/default")})
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'resource.subnetwork': 'regions/us-central1/subnetworks/default'. The field cannot be specified with external address.")

	// natIP naming no reserved address of the instance's region: an IP
	// nobody reserved, and an address of another region.
	_, err = e.insertErr(staticBody("egress-a", "203.0.113.250"), "")
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'resource.networkInterfaces[0].accessConfigs[0].natIP': '203.0.113.250'. "+
		"The specified external IP address '203.0.113.250' was not found in region 'us-central1'.")
	eastIP := e.reserve("us-east1", "egress-east").GetAddress()
	_, err = e.insertErr(staticBody("egress-a", eastIP), "")
	wantAPIError(t, err, 400, "invalid", "The specified external IP address '"+eastIP+"' was not found in region 'us-central1'.")
	if _, err := e.get("egress-a"); err == nil {
		t.Fatal("a refused insert left an instance")
	}

	// natIP of an address another instance holds: accepted, then the
	// operation fails and no instance comes of it.
	e.wait(e.insert(staticBody("egress-a", ip)))
	op := e.insert(staticBody("egress-b", ip))
	err = op.Wait(e.ctx)
	wantOpError(t, op, err, 409, "IP_IN_USE_BY_ANOTHER_RESOURCE", "IP '"+ip+"' is already being used by another resource.")
	_, err = e.get("egress-b")
	wantAPIError(t, err, 404, "notFound", "instances/egress-b' was not found")
	wantAddress(t, e.mustAddress(region, "egress-ip"), "IN_USE", instLink+"egress-a")

	// addAccessConfig: one exists already; the address is held elsewhere.
	_, err = e.ic.AddAccessConfig(e.ctx, &computepb.AddAccessConfigInstanceRequest{Project: project, Zone: zone, Instance: "egress-a",
		NetworkInterface: "nic0", AccessConfigResource: &computepb.AccessConfig{Name: proto.String("External NAT")}})
	wantAPIError(t, err, 400, "badRequest", "At most one access config currently supported.")
	e.wait(e.insert(bareBody("egress-c")))
	op, err = e.ic.AddAccessConfig(e.ctx, &computepb.AddAccessConfigInstanceRequest{Project: project, Zone: zone, Instance: "egress-c",
		NetworkInterface: "nic0", AccessConfigResource: &computepb.AccessConfig{NatIP: proto.String(ip)}})
	if err != nil {
		t.Fatal(err)
	}
	err = op.Wait(e.ctx)
	wantOpError(t, op, err, 409, "IP_IN_USE_BY_ANOTHER_RESOURCE", "IP '"+ip+"' is already being used by another resource.")
	if acs := e.mustGet("egress-c").GetNetworkInterfaces()[0].GetAccessConfigs(); len(acs) != 0 {
		t.Errorf("a failed addAccessConfig added %v", acs)
	}
	_, err = e.ic.AddAccessConfig(e.ctx, &computepb.AddAccessConfigInstanceRequest{Project: project, Zone: zone, Instance: "egress-c",
		NetworkInterface: "nic0", AccessConfigResource: &computepb.AccessConfig{NatIP: proto.String("203.0.113.250")}})
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'resource.natIP': '203.0.113.250'. The specified external IP address '203.0.113.250' was not found in region 'us-central1'.")
	_, err = e.ic.DeleteAccessConfig(e.ctx, &computepb.DeleteAccessConfigInstanceRequest{Project: project, Zone: zone,
		Instance: "egress-a", AccessConfig: "External NAT", NetworkInterface: "nic7"})
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'networkInterfaceName': 'nic7'.  Must be a valid network interface name (e.g. nic0, nic1)")

	// An address asked for by IP that another address has.
	op, err = e.reserveErr(region, &computepb.Address{Name: proto.String("egress-dup"), Address: proto.String(ip)})
	if err != nil {
		t.Fatal(err)
	}
	err = op.Wait(e.ctx)
	wantOpError(t, op, err, 409, "IP_IN_USE_BY_ANOTHER_RESOURCE", "IP '"+ip+"' is already being used by another resource.")
	if _, err := e.getAddress(region, "egress-dup"); err == nil {
		t.Error("a failed insert left an address")
	}

	// A second call while the first's operation runs.
	e.fake.SetOperationPolls(3)
	if _, err := e.reserveErr(region, &computepb.Address{Name: proto.String("egress-slow")}); err != nil {
		t.Fatal(err)
	}
	_, err = e.ac.Delete(e.ctx, &computepb.DeleteAddressRequest{Project: project, Region: region, Address: "egress-slow"})
	wantAPIError(t, err, 400, "resourceNotReady", "The resource '"+addrPrefix+"egress-slow' is not ready")

	// setLabels with a stale fingerprint.
	_, err = e.ac.SetLabels(e.ctx, &computepb.SetLabelsAddressRequest{Project: project, Region: region, Resource: "egress-ip",
		RegionSetLabelsRequestResource: &computepb.RegionSetLabelsRequest{Labels: map[string]string{"a": "b"}, LabelFingerprint: proto.String("stale")}})
	wantAPIError(t, err, 412, "conditionNotMet", "Labels fingerprint either invalid or resource labels have changed")
}

// setLabels with the current fingerprint changes the labels at once.
func TestAddressSetLabels(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	a := e.reserve(region, "egress-ip")
	op, err := e.ac.SetLabels(e.ctx, &computepb.SetLabelsAddressRequest{Project: project, Region: region, Resource: "egress-ip",
		RegionSetLabelsRequestResource: &computepb.RegionSetLabelsRequest{Labels: map[string]string{"proxy": "p1"}, LabelFingerprint: a.LabelFingerprint}})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	b := e.mustAddress(region, "egress-ip")
	if b.GetLabels()["proxy"] != "p1" || len(b.GetLabels()) != 1 || b.GetLabelFingerprint() == a.GetLabelFingerprint() {
		t.Errorf("after setLabels: %v %s", b.GetLabels(), b.GetLabelFingerprint())
	}
}

// The regional STATIC_ADDRESSES quota counts static EXTERNAL addresses:
// over it an insert's operation fails with QUOTA_EXCEEDED (or the call
// with 403 quotaExceeded); INTERNAL ones do not count.
func TestStaticAddressesQuota(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	e.fake.SetRegionQuota(region, "STATIC_ADDRESSES", 1)
	e.reserve(region, "egress-1")
	op, err := e.reserveErr(region, &computepb.Address{Name: proto.String("egress-2")})
	if err != nil {
		t.Fatalf("insert over quota answered %v; GCE accepts it and fails the operation", err)
	}
	err = op.Wait(e.ctx)
	item := wantOpError(t, op, err, 403, "QUOTA_EXCEEDED", "Quota 'STATIC_ADDRESSES' exceeded.  Limit: 1.0 in region us-central1.")
	if qi := item.GetErrorDetails()[0].GetQuotaInfo(); qi.GetMetricName() != "compute.googleapis.com/static_addresses" ||
		qi.GetLimitName() != "STATIC-ADDRESSES-per-project-region" || qi.GetLimit() != 1 || qi.GetDimensions()["region"] != region {
		t.Errorf("quotaInfo %v", qi)
	}
	if op.Proto().GetHttpErrorMessage() != "FORBIDDEN" {
		t.Errorf("httpErrorMessage %q", op.Proto().GetHttpErrorMessage())
	}
	_, err = e.getAddress(region, "egress-2")
	wantAPIError(t, err, 404, "notFound", "was not found")

	op, err = e.reserveErr(region, &computepb.Address{Name: proto.String("egress-int"), AddressType: proto.String("INTERNAL")})
	if err != nil {
		t.Fatal(err)
	}
	e.wait(op)
	e.reserve("us-east1", "egress-east") // another region's quota

	e.fake.SetQuotaSynchronous(true)
	_, err = e.reserveErr(region, &computepb.Address{Name: proto.String("egress-3")})
	wantAPIError(t, err, 403, "quotaExceeded", "Quota 'STATIC_ADDRESSES' exceeded.  Limit: 1.0 in region us-central1.")

	reg, err := e.rc.Get(e.ctx, &computepb.GetRegionRequest{Project: project, Region: region})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range reg.GetQuotas() {
		if q.GetMetric() == "STATIC_ADDRESSES" && (q.GetUsage() != 1 || q.GetLimit() != 1) {
			t.Errorf("regions.get STATIC_ADDRESSES %v, want usage 1 of 1", q)
		}
	}
}

// list and aggregatedList select with the filter forms of the other lists
// and page; every region and "global" are keys of the aggregated list.
func TestAddressLists(t *testing.T) {
	e := newEnv(t)
	for _, s := range []struct{ region, name, proxy string }{
		{region, "egress-a", "p1"}, {region, "egress-b", "p2"}, {region, "other", ""}, {"us-east1", "egress-c", "p1"},
	} {
		a := &computepb.Address{Name: proto.String(s.name)}
		if s.proxy != "" {
			a.Labels = map[string]string{"egress-operator-proxy": s.proxy}
		}
		if err := e.fake.PutAddress(project, s.region, a); err != nil {
			t.Fatal(err)
		}
	}
	list := func(filter string, size uint32) []string {
		t.Helper()
		req := &computepb.ListAddressesRequest{Project: project, Region: region}
		req.Filter, req.MaxResults = listParams(filter, size)
		var names []string
		eachItem(t, fmt.Sprintf("list %q", filter), e.ac.List(e.ctx, req).Next, func(a *computepb.Address) {
			names = append(names, a.GetName())
		})
		return names
	}
	for _, tc := range []struct {
		filter string
		size   uint32
		want   string
	}{
		{"", 0, "egress-a egress-b other"},
		{"", 1, "egress-a egress-b other"},
		{`labels.egress-operator-proxy = "p1"`, 0, "egress-a"},
		{`labels.egress-operator-proxy:*`, 0, "egress-a egress-b"},
		{`name eq "egress-.*"`, 0, "egress-a egress-b"},
		{`status = "RESERVED"`, 0, "egress-a egress-b other"},
	} {
		if got := strings.Join(list(tc.filter, tc.size), " "); got != tc.want {
			t.Errorf("list %q (pages of %d): %s, want %s", tc.filter, tc.size, got, tc.want)
		}
	}
	_, err := e.ac.List(e.ctx, &computepb.ListAddressesRequest{Project: project, Region: region, Filter: proto.String("color = red")}).Next()
	wantAPIError(t, err, 400, "invalid", "Invalid list filter expression.")

	aggregated := func(filter string, size uint32) (names []string, warnings map[string]string) {
		t.Helper()
		req := &computepb.AggregatedListAddressesRequest{Project: project}
		req.Filter, req.MaxResults = listParams(filter, size)
		warnings = map[string]string{}
		it := e.ac.AggregatedList(e.ctx, req)
		eachItem(t, fmt.Sprintf("aggregatedList %q", filter), it.Next, func(pair compute.AddressesScopedListPair) {
			for _, a := range pair.Value.GetAddresses() {
				names = append(names, pair.Key+"/"+a.GetName())
			}
			if w := pair.Value.GetWarning(); w != nil {
				warnings[pair.Key] = w.GetCode()
			}
		})
		return names, warnings
	}
	names, warnings := aggregated(`labels.egress-operator-proxy = "p1"`, 0)
	if strings.Join(names, " ") != "regions/us-central1/egress-a regions/us-east1/egress-c" {
		t.Errorf("aggregated names %v", names)
	}
	for _, scope := range []string{"global", "regions/europe-west1"} {
		if warnings[scope] != "NO_RESULTS_ON_PAGE" {
			t.Errorf("scope %s warning %q, want NO_RESULTS_ON_PAGE (warnings %v)", scope, warnings[scope], warnings)
		}
	}
	if names, _ := aggregated("", 1); len(names) != 4 {
		t.Errorf("aggregated in pages of 1: %v, want all 4", names)
	}
}

// Seeding and the fault injection reach addresses as they reach instances.
func TestAddressSeedingAndFaults(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	if err := e.fake.PutAddress(project, region, &computepb.Address{Name: proto.String("egress-ip"), Address: proto.String("203.0.113.77")}); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.PutInstance(project, zone, staticBody("egress-a", "203.0.113.77"), "TERMINATED"); err != nil {
		t.Fatal(err)
	}
	if a := e.fake.Address(project, region, "egress-ip"); a.GetStatus() != "IN_USE" || natIP(e.fake.Instance(project, zone, "egress-a")) != "203.0.113.77" {
		t.Fatalf("seeded: %v", a)
	}
	if err := e.fake.PutInstance(project, zone, staticBody("egress-b", "203.0.113.77"), ""); err == nil {
		t.Error("a second instance was seeded with an address in use")
	}
	e.fake.FailNext(fakecompute.Fault{Method: "POST", Path: "projects/*/regions/*/addresses", Async: fakecompute.ZoneResourcePoolExhausted().WithoutHTTPStatus()})
	op, err := e.reserveErr(region, &computepb.Address{Name: proto.String("egress-f")})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(e.ctx); err != nil || op.Proto().GetError() == nil {
		t.Fatalf("async fault: Wait %v, error %v", err, op.Proto().GetError())
	}
	e.fake.FailNext(fakecompute.Fault{Method: "DELETE", Path: "projects/*/regions/*/addresses/*", Err: fakecompute.Forbidden("compute.addresses.delete", "{resource}")})
	_, err = e.ac.Delete(e.ctx, &computepb.DeleteAddressRequest{Project: project, Region: region, Address: "egress-ip"})
	wantAPIError(t, err, 403, "forbidden", "Required 'compute.addresses.delete' permission for '"+addrPrefix+"egress-ip'")
	if got := len(e.fake.Addresses(project)); got != 1 {
		t.Errorf("%d addresses, want the seeded one", got)
	}
	e.fake.Reset()
	if len(e.fake.Addresses(project)) != 0 {
		t.Error("addresses left after Reset")
	}
}
