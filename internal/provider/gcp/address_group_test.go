package gcp

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// testGroup is the ProxyGroup team-a/g; its members are Proxies of their
// own (testRequest's, each with its own UID).
var testGroup = provider.GroupRef{Namespace: "team-a", Name: "g", UID: "uid-group-g"}

// groupAddress is testGroup's address as its controller names it:
// reserved by the provider unless reserve is false (the user's).
func groupAddress(reserve bool) provider.EgressAddress {
	g := testGroup
	return provider.EgressAddress{Name: provider.EgressAddressName(g.Namespace, g.Name, g.UID), Reserve: reserve, Group: &g}
}

// groupMarks are the labels a group's reserved address carries.
func groupMarks(uid string) map[string]string {
	return map[string]string{provider.MarkManaged: "true", provider.MarkUID: uid, provider.MarkInstallation: testInstallation, markReclaim: reclaimDelete}
}

// logMove prints the fake's requests since the last ClearRequests, one
// "METHOD path -> status" a line, and returns them without the operation
// waits, their paths relative to the project.
func logMove(t *testing.T, env *gcptest.Env, what string) []string {
	t.Helper()
	reqs := env.Fake.Requests()
	t.Logf("%s (%d requests):", what, len(reqs))
	var calls []string
	for _, r := range reqs {
		t.Logf("  %s %s -> %d", r.Method, r.Path, r.Status)
		if !strings.HasSuffix(r.Path, "/wait") {
			calls = append(calls, r.Method+" "+strings.TrimPrefix(r.Path, "/compute/v1/projects/"+testProject+"/"))
		}
	}
	return calls
}

// holds reports whether the fake's address is IN_USE by exactly the
// instance name, and that instance's access config has its IP.
func holds(t *testing.T, env *gcptest.Env, addr, name string) bool {
	t.Helper()
	a := env.Fake.Address(testProject, testRegion, addr)
	return a.GetStatus() == "IN_USE" && len(a.GetUsers()) == 1 && strings.HasSuffix(a.GetUsers()[0], "/"+formatID(testZone, name)) &&
		natIPOfInstance(t, env, name) == a.GetAddress()
}

// hasAccessConfigWith reports whether the instance has an access config
// with ip.
func hasAccessConfigWith(t *testing.T, env *gcptest.Env, name, ip string) bool {
	t.Helper()
	in := env.Fake.Instance(testProject, testZone, name)
	for _, nic := range in.GetNetworkInterfaces() {
		if natConfig(nic, ip) != nil {
			return true
		}
	}
	return false
}

// A group's address: the first move reserves it, marked with the group's
// UID (not the member's), and puts it on member A's instance; the next
// moves take it between the instances of different Proxies (A to B, then
// back to A without naming the holder): the group decided.
func TestGroupAddressReservedAndMovedBetweenMembers(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	reqA, reqB := testRequest("g-0"), testRequest("g-1")
	instA, instB := createRunning(t, b, reqA), createRunning(t, b, reqB)
	ea := groupAddress(true)

	env.Fake.ClearRequests()
	if err := mover(p).MoveEgressAddress(t.Context(), ea, "", instA.ID); err != nil {
		t.Fatalf("first MoveEgressAddress (reserving): %v", err)
	}
	logMove(t, env, "the first move's requests")
	a := env.Fake.Address(testProject, testRegion, ea.Name)
	if a == nil {
		t.Fatalf("no address %s reserved", ea.Name)
	}
	if want := groupMarks(testGroup.UID); !maps.Equal(a.GetLabels(), want) {
		t.Errorf("address labels %v, want %v", a.GetLabels(), want)
	}
	if !strings.Contains(a.GetDescription(), "ProxyGroup team-a/g") || a.GetAddressType() != "EXTERNAL" {
		t.Errorf("address %s: type %s, description %q; want EXTERNAL naming ProxyGroup team-a/g", ea.Name, a.GetAddressType(), a.GetDescription())
	}
	// The insert itself carried the group's UID, never the member's.
	i := requestIndex(env, "POST", "projects/"+testProject+"/regions/"+testRegion+"/addresses", 0)
	if i < 0 {
		t.Fatal("no address insert")
	}
	var body struct{ Labels map[string]string }
	if err := json.Unmarshal([]byte(env.Fake.Requests()[i].Body), &body); err != nil {
		t.Fatal(err)
	}
	if body.Labels[provider.MarkUID] != testGroup.UID {
		t.Errorf("the insert's UID label %q, want the group's %q (A's is %q)", body.Labels[provider.MarkUID], testGroup.UID, reqA.UID)
	}
	if !holds(t, env, ea.Name, reqA.Name) {
		t.Fatalf("after the first move the address is %s by %v, A's natIP %q; want it on A", a.GetStatus(), a.GetUsers(), natIPOfInstance(t, env, reqA.Name))
	}
	ip := a.GetAddress()

	// A to B: different Proxies (their instances' UID labels differ).
	if reqA.UID == reqB.UID {
		t.Fatal("the members share a UID")
	}
	env.Fake.ClearRequests()
	if err := mover(p).MoveEgressAddress(t.Context(), ea, instA.ID, instB.ID); err != nil {
		t.Fatalf("MoveEgressAddress A to B: %v", err)
	}
	calls := logMove(t, env, "the group move's requests, member A's instance to member B's")
	wantCalls := []string{
		"GET regions/" + testRegion + "/addresses/" + ea.Name,
		"GET " + formatID(testZone, reqB.Name),
		"GET " + formatID(testZone, reqA.Name),
		"POST " + formatID(testZone, reqA.Name) + "/deleteAccessConfig",
		"POST " + formatID(testZone, reqB.Name) + "/deleteAccessConfig",
		"POST " + formatID(testZone, reqB.Name) + "/addAccessConfig",
		// A still runs: it gets an ephemeral address back, after B
		// holds the group's.
		"GET " + formatID(testZone, reqA.Name),
		"POST " + formatID(testZone, reqA.Name) + "/addAccessConfig",
	}
	if strings.Join(calls, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("the move's calls (waits left out):\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(wantCalls, "\n"))
	}
	if !holds(t, env, ea.Name, reqB.Name) {
		t.Errorf("B does not hold the address: %+v", env.Fake.Address(testProject, testRegion, ea.Name))
	}
	if hasAccessConfigWith(t, env, reqA.Name, ip) {
		t.Errorf("A still has an access config with %s", ip)
	}
	if got := natIPOfInstance(t, env, reqA.Name); got == "" || got == ip {
		t.Errorf("A, which still runs, has external address %q after giving the group's (%s) up; want an ephemeral one of its own", got, ip)
	}

	// Again: already on B, one read.
	env.Fake.ClearRequests()
	if err := mover(p).MoveEgressAddress(t.Context(), ea, instA.ID, instB.ID); err != nil {
		t.Fatalf("second MoveEgressAddress A to B: %v", err)
	}
	if reqs := env.Fake.Requests(); len(reqs) != 1 || reqs[0].Method != "GET" {
		t.Errorf("a repeated move made %v, want one GET of the address", reqs)
	}

	// Back to A, the holder not named: taken from B all the same.
	if err := mover(p).MoveEgressAddress(t.Context(), ea, "", instA.ID); err != nil {
		t.Fatalf("MoveEgressAddress back to A without fromID: %v", err)
	}
	if !holds(t, env, ea.Name, reqA.Name) || hasAccessConfigWith(t, env, reqB.Name, ip) {
		t.Errorf("after the move back: %+v", env.Fake.Address(testProject, testRegion, ea.Name))
	}
	if n := count(env, "POST", "projects/"+testProject+"/regions/"+testRegion+"/addresses"); n != 0 {
		t.Errorf("%d address inserts after the first move", n)
	}
}

// The holder lost: member A's instance is deleted outside; GCE releases
// its address (RESERVED, no users), and the group moves it to member B.
func TestGroupAddressMovedFromALostHolder(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	reqA, reqB := testRequest("g-0"), testRequest("g-1")
	instA, instB := createRunning(t, b, reqA), createRunning(t, b, reqB)
	ea := groupAddress(true)
	if err := mover(p).MoveEgressAddress(t.Context(), ea, "", instA.ID); err != nil {
		t.Fatalf("first MoveEgressAddress: %v", err)
	}
	if !holds(t, env, ea.Name, reqA.Name) {
		t.Fatal("A does not hold the address after the first move")
	}

	if code := human(t, env, "DELETE", instancePath(reqA.Name), nil, nil); code != 200 {
		t.Fatalf("deleting A's instance outside: %d", code)
	}
	env.Fake.Settle()
	if env.Fake.Instance(testProject, testZone, reqA.Name) != nil {
		t.Fatal("A's instance is still there")
	}
	a := env.Fake.Address(testProject, testRegion, ea.Name)
	if a.GetStatus() != "RESERVED" || len(a.GetUsers()) != 0 {
		t.Fatalf("after A's delete the address is %s by %v; want RESERVED without users", a.GetStatus(), a.GetUsers())
	}

	env.Fake.ClearRequests()
	if err := mover(p).MoveEgressAddress(t.Context(), ea, instA.ID, instB.ID); err != nil {
		t.Fatalf("MoveEgressAddress from the lost A to B: %v", err)
	}
	calls := logMove(t, env, "the move from a lost holder")
	for _, c := range calls {
		if strings.Contains(c, reqA.Name) {
			t.Errorf("a call on the lost instance: %s", c)
		}
	}
	if !holds(t, env, ea.Name, reqB.Name) {
		t.Errorf("B does not hold the address: %+v", env.Fake.Address(testProject, testRegion, ea.Name))
	}
}

// Refusals of a group's move, each Permanent, naming what is wrong, and
// with nothing changed: the holder an instance of another installation;
// the address another owner's (its UID label) or another installation's;
// the user's address the group names missing.
func TestGroupAddressRefused(t *testing.T) {
	ip := func(env *gcptest.Env, name string) string {
		return env.Fake.Address(testProject, testRegion, name).GetAddress()
	}
	putAddress := func(t *testing.T, env *gcptest.Env, name string, labels map[string]string) {
		t.Helper()
		if err := env.Fake.PutAddress(testProject, testRegion, &computepb.Address{Name: proto.String(name), AddressType: proto.String("EXTERNAL"), Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		ea   provider.EgressAddress
		// setup seeds the fake before the move.
		setup func(t *testing.T, env *gcptest.Env, ea provider.EgressAddress)
		want  []string
	}{
		{
			name: "held by another installation's instance",
			ea:   groupAddress(true),
			setup: func(t *testing.T, env *gcptest.Env, ea provider.EgressAddress) {
				putAddress(t, env, ea.Name, groupMarks(testGroup.UID))
				body := plantedInstance("foreign", provider.Marks{Managed: true, UID: "uid-theirs", Installation: "inst-other"}.Labels())
				body.NetworkInterfaces[0].AccessConfigs[0].NatIP = proto.String(ip(env, ea.Name))
				if err := env.Fake.PutInstance(testProject, testZone, body, "RUNNING"); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"in use by " + formatID(testZone, "foreign"), "not an instance of this operator installation", "ProxyGroup team-a/g spec.egressAddress"},
		},
		{
			name: "another owner's UID label",
			ea:   groupAddress(true),
			setup: func(t *testing.T, env *gcptest.Env, ea provider.EgressAddress) {
				putAddress(t, env, ea.Name, groupMarks("uid-someone-else"))
			},
			want: []string{"belongs to another Proxy or ProxyGroup (UID uid-someone-else)", "ProxyGroup team-a/g spec.egressAddress"},
		},
		{
			name: "another installation's address",
			ea:   groupAddress(true),
			setup: func(t *testing.T, env *gcptest.Env, ea provider.EgressAddress) {
				putAddress(t, env, ea.Name, provider.Marks{Managed: true, UID: testGroup.UID, Installation: "inst-other"}.Labels())
			},
			want: []string{"not reserved by this operator installation", "the ProxyGroup's spec.egressAddress.name"},
		},
		{
			name:  "the user's address missing",
			ea:    provider.EgressAddress{Name: "no-such-ip", Group: &testGroup},
			setup: func(*testing.T, *gcptest.Env, provider.EgressAddress) {},
			want:  []string{`ProxyGroup team-a/g spec.egressAddress.name "no-such-ip": no address of that name in region ` + testRegion},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, p, b := newBoundedTestProvider(t)
			member := testRequest("g-1")
			inst := createRunning(t, b, member)
			tc.setup(t, env, tc.ea)
			before := env.Fake.Address(testProject, testRegion, tc.ea.Name)
			env.Fake.ClearRequests()
			err := mover(p).MoveEgressAddress(t.Context(), tc.ea, "", inst.ID)
			t.Logf("MoveEgressAddress: %v", err)
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("MoveEgressAddress: %v, want Permanent", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, r := range env.Fake.Requests() {
				if r.Method == "POST" {
					t.Errorf("a refused move wrote: %s %s", r.Method, r.Path)
				}
			}
			if after := env.Fake.Address(testProject, testRegion, tc.ea.Name); !proto.Equal(before, after) {
				t.Errorf("the address changed: %v, was %v", after, before)
			}
		})
	}
}

// Without Group the old rule stands: an address held by an instance of
// another Proxy of this installation, not named as fromID, is not taken.
func TestEgressAddressMoveWithoutGroupRefusesAnotherProxysHolder(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	req := reservedRequest("holder", false)
	createRunning(t, b, req)
	other := createRunning(t, b, testRequest("other"))
	env.Fake.ClearRequests()
	err := mover(p).MoveEgressAddress(t.Context(), *req.EgressAddress, "", other.ID)
	t.Logf("MoveEgressAddress without Group: %v", err)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "in use by "+formatID(testZone, req.Name)) ||
		!strings.Contains(err.Error(), "another Proxy of this operator installation (UID "+req.UID+")") {
		t.Fatalf("MoveEgressAddress without Group to another Proxy's instance: %v, want Permanent naming the holder and its UID", err)
	}
	for _, r := range env.Fake.Requests() {
		if r.Method == "POST" {
			t.Errorf("a refused move wrote: %s %s", r.Method, r.Path)
		}
	}
	if !holds(t, env, req.EgressAddress.Name, req.Name) {
		t.Error("the holder lost the address")
	}
}
