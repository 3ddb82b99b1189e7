package gcp

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

const testRegion = "us-central1"

// reservedRequest is testRequest for a Proxy whose egress address the
// provider reserves (as the reconciler names it).
func reservedRequest(proxy string, retain bool) provider.CreateRequest {
	req := testRequest(proxy)
	req.EgressAddress = &provider.EgressAddress{Name: provider.EgressAddressName(req.Namespace, req.ProxyName, req.UID), Reserve: true, Retain: retain}
	return req
}

// replacementOf is req with another shape: the same Proxy's next instance.
func replacementOf(req provider.CreateRequest, shape string) provider.CreateRequest {
	req.Name = provider.InstanceName(req.Namespace, req.ProxyName, req.UID, shape)
	return req
}

func mover(p *Provider) provider.EgressAddressMover {
	return provider.WithBoundary(testName, Type, p).Mover
}

// stepError runs Create and returns the create's error: Create's own, or
// that of its background step as the next Get reports it.
func stepError(t *testing.T, p *Provider, req provider.CreateRequest) error {
	t.Helper()
	b := bounded(p)
	inst, err := b.Create(t.Context(), req)
	if err != nil {
		return err
	}
	waitStep(t, p, req.Name)
	_, err = b.Get(t.Context(), inst.ID)
	return err
}

// natIPOfInstance is the fake's natIP of the instance's first access
// config, "" without one.
func natIPOfInstance(t *testing.T, env *gcptest.Env, name string) string {
	t.Helper()
	in := env.Fake.Instance(testProject, testZone, name)
	if in == nil {
		t.Fatalf("no instance %s", name)
	}
	return natIPOf(in.GetNetworkInterfaces()[0])
}

func addressSecondaries(t *testing.T, p *Provider) []provider.Secondary {
	t.Helper()
	list, err := secondaries(p).ListSecondary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []provider.Secondary
	for _, s := range list {
		if s.Kind == kindAddress {
			out = append(out, s)
		}
	}
	return out
}

// (a) Reserve: the address is reserved with the marks and the reclaim
// label before the insert, the instance is inserted with it as natIP, and
// Get reports it as the IP and as the egress address from the backend. A
// later Create with another reclaim policy rewrites the label.
func TestEgressAddressReservedAndUsed(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	req := reservedRequest("reserved", false)
	name := req.EgressAddress.Name
	inst := createRunning(t, b, req)

	a := env.Fake.Address(testProject, testRegion, name)
	if a == nil {
		t.Fatalf("no address %s reserved; requests: %v", name, env.Fake.Requests())
	}
	want := map[string]string{provider.MarkManaged: "true", provider.MarkUID: req.UID, provider.MarkInstallation: testInstallation, markReclaim: reclaimDelete}
	if !maps.Equal(a.GetLabels(), want) {
		t.Errorf("address labels %v, want %v", a.GetLabels(), want)
	}
	if a.GetAddressType() != "EXTERNAL" || !strings.Contains(a.GetDescription(), "team-a/reserved") {
		t.Errorf("address %s: type %s, description %q", name, a.GetAddressType(), a.GetDescription())
	}
	ip := a.GetAddress()
	if got := natIPOfInstance(t, env, req.Name); got != ip {
		t.Errorf("instance natIP %q, want the address %s", got, ip)
	}
	if a.GetStatus() != "IN_USE" || len(a.GetUsers()) != 1 || !strings.HasSuffix(a.GetUsers()[0], "/"+formatID(testZone, req.Name)) {
		t.Errorf("address status %s users %v, want IN_USE by %s", a.GetStatus(), a.GetUsers(), req.Name)
	}
	if inst.IP != ip || inst.Egress.IP != ip || inst.Egress.Source != provider.EgressFromBackend {
		t.Errorf("Get: IP %q egress %+v, want %s from the backend", inst.IP, inst.Egress, ip)
	}
	ins := requestIndex(env, "POST", "projects/"+testProject+"/regions/"+testRegion+"/addresses", 0)
	insert := requestIndex(env, "POST", insertPath, 0)
	if ins < 0 || insert < 0 || ins > insert {
		t.Errorf("address insert at %d, instance insert at %d: the address must come first", ins, insert)
	}

	// The next instance of the Proxy, with reclaimPolicy Retain now: the
	// label follows (one setLabels), and the address is not reserved again.
	retained := replacementOf(reservedRequest("reserved", true), "retain")
	if err := stepError(t, p, retained); err != nil {
		t.Fatal(err)
	}
	if got := env.Fake.Address(testProject, testRegion, name).GetLabels()[markReclaim]; got != reclaimRetain {
		t.Errorf("reclaim label %q after a Create with Retain, want %q", got, reclaimRetain)
	}
	if n := count(env, "POST", "projects/"+testProject+"/regions/"+testRegion+"/addresses/"+name+"/setLabels"); n != 1 {
		t.Errorf("%d setLabels, want 1", n)
	}
	if n := count(env, "POST", "projects/"+testProject+"/regions/"+testRegion+"/addresses"); n != 1 {
		t.Errorf("%d address inserts, want 1", n)
	}
}

// (b) A replacement: the second instance of the Proxy comes up on an
// ephemeral address while the first holds the reserved one; the move takes
// it over (the request log is printed with its count and time); a second
// move is one read.
func TestEgressAddressMovesAtTheReplacement(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	req := reservedRequest("moving", false)
	ea := *req.EgressAddress
	first := createRunning(t, b, req)
	ip := first.IP
	next := replacementOf(req, "next")
	second := createRunning(t, b, next)
	if second.IP == "" || second.IP == ip {
		t.Fatalf("the replacement's IP %q: want an ephemeral address, not the Proxy's %s", second.IP, ip)
	}
	if got := natIPOfInstance(t, env, req.Name); got != ip {
		t.Fatalf("the first instance lost the address before the move: natIP %q", got)
	}

	ctx, logs := logCtxAt(t, 1)
	env.Fake.ClearRequests()
	start := time.Now()
	if err := mover(p).MoveEgressAddress(ctx, ea, first.ID, second.ID); err != nil {
		t.Fatalf("MoveEgressAddress: %v\n%s", err, logs)
	}
	took := time.Since(start)
	reqs := env.Fake.Requests()
	var calls []string
	t.Logf("the move's requests (%d calls, %.3f s on the fake):", len(reqs), took.Seconds())
	for _, r := range reqs {
		t.Logf("  %s %s -> %d", r.Method, r.Path, r.Status)
		if strings.HasSuffix(r.Path, "/wait") {
			continue // operations.wait, as many as the fake needs
		}
		calls = append(calls, r.Method+" "+strings.TrimPrefix(r.Path, "/compute/v1/projects/"+testProject+"/"))
	}
	wantCalls := []string{
		"GET regions/" + testRegion + "/addresses/" + ea.Name,
		"GET " + formatID(testZone, next.Name),
		"GET " + formatID(testZone, req.Name),
		"POST " + formatID(testZone, req.Name) + "/deleteAccessConfig",
		"POST " + formatID(testZone, next.Name) + "/deleteAccessConfig",
		"POST " + formatID(testZone, next.Name) + "/addAccessConfig",
	}
	if strings.Join(calls, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("the move's calls (waits left out):\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(wantCalls, "\n"))
	}
	// Every change is followed to its end before the next one.
	for i, r := range reqs {
		if r.Method == "POST" && !strings.HasSuffix(r.Path, "/wait") {
			if i+1 >= len(reqs) || !strings.HasSuffix(reqs[i+1].Path, "/wait") {
				t.Errorf("%s %s not followed by its operation's wait", r.Method, r.Path)
			}
		}
	}
	moved := logs.Find("gcp egress address moved", "gapSeconds")
	if len(moved) != 1 {
		t.Errorf("no V(1) line with the move's seconds:\n%s", logs)
	}
	t.Logf("%s", strings.Join(moved, "\n"))

	got, err := b.Get(t.Context(), second.ID)
	if err != nil || got.IP != ip || got.Egress.IP != ip {
		t.Errorf("Get of the new instance after the move: %+v, %v; want IP and egress %s", got, err, ip)
	}
	if nat := natIPOfInstance(t, env, req.Name); nat != "" {
		t.Errorf("the old instance still has an external address %s", nat)
	}
	a := env.Fake.Address(testProject, testRegion, ea.Name)
	if len(a.GetUsers()) != 1 || !strings.HasSuffix(a.GetUsers()[0], "/"+formatID(testZone, next.Name)) {
		t.Errorf("address users %v, want the new instance", a.GetUsers())
	}

	// Again: already there, one read and nothing written.
	env.Fake.ClearRequests()
	if err := mover(p).MoveEgressAddress(t.Context(), ea, first.ID, second.ID); err != nil {
		t.Fatalf("second MoveEgressAddress: %v", err)
	}
	if reqs := env.Fake.Requests(); len(reqs) != 1 || reqs[0].Method != "GET" {
		t.Errorf("a second move made %v, want one GET of the address", reqs)
	}

	// To an instance that is gone: NotFound.
	goneID := formatID(testZone, replacementOf(req, "gone").Name)
	if err := mover(p).MoveEgressAddress(t.Context(), ea, second.ID, goneID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("move to a missing instance: %v, want NotFound", err)
	}
}

// (c) Secondary resources: a retained address is never listed; one that
// goes with its Proxy is, with Kind address and no instance; deleting it
// while an instance holds it is Transient, and once the instance is gone
// it is deleted.
func TestEgressAddressSecondary(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	keep := reservedRequest("keep", true)
	createRunning(t, b, keep)
	if list := addressSecondaries(t, p); len(list) != 0 {
		t.Fatalf("a retained address is listed: %+v", list)
	}

	drop := reservedRequest("drop", false)
	inst := createRunning(t, b, drop)
	list := addressSecondaries(t, p)
	if len(list) != 1 {
		t.Fatalf("address secondaries %+v, want the one of %s", list, drop.ProxyName)
	}
	s := list[0]
	a := env.Fake.Address(testProject, testRegion, drop.EgressAddress.Name)
	wantID := formatAddressID(testRegion, drop.EgressAddress.Name, a.GetId())
	if s.ID != wantID || s.Instance != "" || s.InstanceID != "" || !s.InstanceGone || s.CreatedAt.IsZero() ||
		s.Marks != (provider.Marks{Managed: true, UID: drop.UID, Installation: testInstallation}) {
		t.Errorf("secondary %+v, want ID %s, no instance, InstanceGone, the marks and a creation time", s, wantID)
	}
	if _, _, err := parseRuleID(s.ID); err == nil {
		t.Errorf("address ID %s parses as a rule's", s.ID)
	}

	err := secondaries(p).DeleteSecondary(t.Context(), s.ID)
	t.Logf("DeleteSecondary(%s) while in use: %v", s.ID, err)
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "deleted once its instance is gone") {
		t.Fatalf("DeleteSecondary of an address in use: %v, want Transient", err)
	}
	if env.Fake.Address(testProject, testRegion, drop.EgressAddress.Name) == nil {
		t.Fatal("the address in use was deleted")
	}

	if err := b.Delete(t.Context(), inst.ID); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "instance "+inst.ID+" gone", func() error {
		if _, err := b.Get(t.Context(), inst.ID); !errors.Is(err, provider.ErrNotFound) {
			return fmt.Errorf("Get: %v", err)
		}
		return nil
	})
	if err := secondaries(p).DeleteSecondary(t.Context(), s.ID); err != nil {
		t.Fatalf("DeleteSecondary once the instance is gone: %v", err)
	}
	env.Fake.Settle()
	if env.Fake.Address(testProject, testRegion, drop.EgressAddress.Name) != nil {
		t.Error("the address is still there")
	}
	if err := secondaries(p).DeleteSecondary(t.Context(), s.ID); err != nil {
		t.Errorf("DeleteSecondary of a gone address: %v", err)
	}
	if env.Fake.Address(testProject, testRegion, keep.EgressAddress.Name) == nil {
		t.Error("the retained address went")
	}
	if err := secondaries(p).DeleteSecondary(t.Context(), "regions/us-central1/addresses/x"); !errors.Is(err, provider.ErrPermanent) {
		t.Errorf("malformed address ID: %v, want Permanent", err)
	}
}

// (d) The user's own address: used, never labelled, never listed; one in
// another region, one that does not exist and one another Proxy's
// instance holds are Permanent, each naming what is wrong.
func TestEgressAddressUsersOwn(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	put := func(region, name, typ string) *computepb.Address {
		t.Helper()
		if err := env.Fake.PutAddress(testProject, region, &computepb.Address{Name: proto.String(name), AddressType: proto.String(typ),
			Labels: map[string]string{"team": "net"}}); err != nil {
			t.Fatal(err)
		}
		return env.Fake.Address(testProject, region, name)
	}
	users := func(proxy, addr string) provider.CreateRequest {
		req := testRequest(proxy)
		req.EgressAddress = &provider.EgressAddress{Name: addr}
		return req
	}
	mine := put(testRegion, "my-ip", "EXTERNAL")
	req := users("own", "my-ip")
	inst := createRunning(t, b, req)
	if inst.IP != mine.GetAddress() || natIPOfInstance(t, env, req.Name) != mine.GetAddress() {
		t.Errorf("instance IP %q, want the user's address %s", inst.IP, mine.GetAddress())
	}
	if got := env.Fake.Address(testProject, testRegion, "my-ip").GetLabels(); !maps.Equal(got, map[string]string{"team": "net"}) {
		t.Errorf("the user's address was labelled: %v", got)
	}
	if n := count(env, "POST", "projects/"+testProject+"/regions/*/addresses/*/setLabels") +
		count(env, "POST", "projects/"+testProject+"/regions/*/addresses"); n != 0 {
		t.Errorf("%d address writes for the user's address", n)
	}
	if list := addressSecondaries(t, p); len(list) != 0 {
		t.Errorf("the user's address is listed: %+v", list)
	}

	// Nor is it moved away from another Proxy's instance.
	other := createRunning(t, b, testRequest("other"))
	writes := count(env, "POST", "projects/"+testProject+"/zones/*/instances/*/deleteAccessConfig")
	err := mover(p).MoveEgressAddress(t.Context(), *req.EgressAddress, "", other.ID)
	t.Logf("MoveEgressAddress to another Proxy's instance: %v", err)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "in use by "+formatID(testZone, req.Name)) {
		t.Errorf("MoveEgressAddress to another Proxy's instance: %v, want Permanent naming the holder", err)
	}
	if n := count(env, "POST", "projects/"+testProject+"/zones/*/instances/*/deleteAccessConfig"); n != writes {
		t.Errorf("%d access configs deleted by a refused move", n-writes)
	}

	put("europe-west1", "eu-ip", "EXTERNAL")
	put(testRegion, "inner-ip", "INTERNAL")
	for _, tc := range []struct {
		proxy, addr string
		want        []string
	}{
		{"elsewhere", "eu-ip", []string{`"eu-ip"`, "region europe-west1", "region " + testRegion}},
		{"missing", "no-such-ip", []string{`"no-such-ip"`, "region " + testRegion}},
		{"internal", "inner-ip", []string{`"inner-ip"`, "INTERNAL"}},
		{"taken", "my-ip", []string{"my-ip", "in use by " + formatID(testZone, req.Name), "another Proxy"}},
	} {
		t.Run(tc.proxy, func(t *testing.T) {
			err := stepError(t, p, users(tc.proxy, tc.addr))
			t.Logf("Create with address %s: %v", tc.addr, err)
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("Create with address %s: %v, want Permanent", tc.addr, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// (e) Out of static addresses: QuotaExceeded naming STATIC_ADDRESSES,
// whether the operation says so or the insert is refused at once, and no
// instance is inserted; out of IN_USE_ADDRESSES, the instance's insert is
// QuotaExceeded naming that.
func TestEgressAddressQuota(t *testing.T) {
	for _, tc := range []struct {
		metric  string
		sync    bool
		inserts int
	}{
		{"STATIC_ADDRESSES", false, 0},
		{"STATIC_ADDRESSES", true, 0},
		{"IN_USE_ADDRESSES", false, 1},
		{"IN_USE_ADDRESSES", true, 1},
	} {
		t.Run(fmt.Sprintf("%s synchronous=%v", tc.metric, tc.sync), func(t *testing.T) {
			env := gcptest.New(t)
			env.Fake.SetRegionQuota(testRegion, tc.metric, 0)
			env.Fake.SetQuotaSynchronous(tc.sync)
			p := newTestProvider(t, env, nil)
			req := reservedRequest("quota", false)
			err := stepError(t, p, req)
			t.Logf("Create: %v", err)
			if !errors.Is(err, provider.ErrQuotaExceeded) || !strings.Contains(err.Error(), tc.metric) {
				t.Fatalf("Create over the %s quota: %v, want QuotaExceeded naming it", tc.metric, err)
			}
			if n := count(env, "POST", insertPath); n != tc.inserts {
				t.Errorf("%d instance inserts, want %d", n, tc.inserts)
			}
		})
	}
}

// (f) addressMode internal: refused before any call, naming the field.
func TestEgressAddressRefusedInInternalMode(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, func(c *Config) { c.AddressMode = AddressInternal })
	_, err := bounded(p).Create(t.Context(), reservedRequest("internal", false))
	t.Logf("Create: %v", err)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "spec.egressAddress") || !strings.Contains(err.Error(), "networkIP") {
		t.Fatalf("Create in internal mode: %v, want Permanent naming spec.egressAddress", err)
	}
	if reqs := env.Fake.Requests(); len(reqs) != 0 {
		t.Errorf("requests before the refusal: %v", reqs)
	}
	if err := mover(p).MoveEgressAddress(t.Context(), provider.EgressAddress{Name: "x"}, "", formatID(testZone, "y")); !errors.Is(err, provider.ErrPermanent) {
		t.Errorf("MoveEgressAddress in internal mode: %v, want Permanent", err)
	}
}
