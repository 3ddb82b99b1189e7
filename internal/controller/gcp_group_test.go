package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// TestGCPGroupFailoverRequestLog (issue 24): a ProxyGroup of two members
// on the real gcp provider over the fake Compute API, with an egress
// address of the group's own. The address is reserved for the group
// (labelled with the group's UID) and given to the holder's instance;
// the holder's instance is then deleted outside the operator (lost): the
// group moves the address to the other member, and the lost member gets
// a new instance. The fake's request log of that failover is printed
// (writes, and the reads of the address), with the time from the delete
// to the address on the other member as seen in the group's status.
func TestGCPGroupFailoverRequestLog(t *testing.T) {
	gce := gcptest.New(t)
	entry := gcpEntry(t, gce, 50*time.Millisecond)
	ns, evs := startGroupManagerOn(t, entry)
	ctx := context.Background()

	// Every member's guest reports serving once its VM runs, as the
	// reporter does (the lost instance's report goes with it).
	reportAsGuests(t, ns, 20*time.Millisecond, func(px *egressv1.Proxy) {
		if px.Status.ProviderID != "" {
			_ = reportServing(gce, px.Status.ProviderID)
		}
	})

	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "partner"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, EgressAddress: &egressv1.EgressAddressSpec{},
			Template: egressv1.ProxyTemplate{Spec: egressv1.ProxySpec{Provider: "gce", Port: 3128, AllowedSourceRanges: []string{"198.51.100.0/24"}}}},
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	const region = "us-central1"
	addrName := provider.EgressAddressName(ns, g.Name, string(g.UID))
	member := func(name string) *egressv1.Proxy {
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, px); err != nil {
			t.Fatal(err)
		}
		return px
	}
	var ip string
	g = waitGroup(t, ns, g.Name, "both ready, the address on the holder's instance", func(g *egressv1.ProxyGroup) error {
		if err := allReady(2)(g); err != nil {
			return fmt.Errorf("%w (members' Ready: %s)", err, membersReady(ns, "partner-0", "partner-1"))
		}
		a := gce.Fake.Address(gce.Project, region, addrName)
		if a == nil || a.GetStatus() != "IN_USE" || g.Status.EgressAddress == nil || g.Status.EgressAddress.Member != g.Status.Holder {
			return fmt.Errorf("address %v, status %+v", a, g.Status.EgressAddress)
		}
		ip = a.GetAddress()
		if holder := member(g.Status.Holder); holder.Status.IP != ip || g.Status.Endpoint != ip+":3128" {
			return fmt.Errorf("holder %s at %s, group endpoint %s; the address is %s", holder.Name, holder.Status.IP, g.Status.Endpoint, ip)
		}
		return nil
	})
	a := gce.Fake.Address(gce.Project, region, addrName)
	if a.GetLabels()[provider.MarkUID] != string(g.UID) {
		t.Fatalf("the group's address is labelled %v, want the group's UID %s", a.GetLabels(), g.UID)
	}
	first := g.Status.Holder
	other := "partner-0"
	if first == "partner-0" {
		other = "partner-1"
	}
	lostID := member(first).Status.ProviderID
	t.Logf("group %s: endpoint %s, address %s (%s, labelled with the group's UID) on member %s (%s)", g.Name, g.Status.Endpoint, addrName, ip, first, lostID)

	// The holder's instance is deleted outside the operator.
	before := len(gce.Fake.Requests())
	parts := strings.Split(lostID, "/") // zones/<zone>/instances/<name>
	url := gce.Endpoint() + "/compute/v1/projects/" + gce.Project + "/zones/" + parts[1] + "/instances/" + parts[3]
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+gce.Tokens.Token(gce.Email))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("deleting %s outside: %d", lostID, resp.StatusCode)
	}
	lost := time.Now()
	var movedAfter time.Duration
	g = waitGroup(t, ns, g.Name, "the address on "+other, func(g *egressv1.ProxyGroup) error {
		ea := g.Status.EgressAddress
		if g.Status.Holder != other || ea == nil || ea.Member != other || ea.ProviderID != member(other).Status.ProviderID {
			return fmt.Errorf("holder %s, egressAddress %+v", g.Status.Holder, ea)
		}
		movedAfter = time.Since(lost)
		return nil
	})
	g = waitGroup(t, ns, g.Name, "both ready again, the endpoint the address", func(g *egressv1.ProxyGroup) error {
		if err := allReady(2)(g); err != nil {
			c := meta.FindStatusCondition(member(first).Status.Conditions, egressv1.ConditionReady)
			rs := gce.Fake.Requests()
			var ls []string
			for _, r := range rs[max(before, len(rs)-25):] {
				ls = append(ls, r.String())
			}
			return fmt.Errorf("%w; member %s: %+v\n%s", err, first, c, strings.Join(ls, "\n"))
		}
		// The lost member comes back under the same name (the same ID):
		// ready again is its new instance serving.
		if g.Status.Endpoint != ip+":3128" || g.Status.Holder != other {
			return fmt.Errorf("endpoint %s, holder %s", g.Status.Endpoint, g.Status.Holder)
		}
		return nil
	})
	back := time.Since(lost)
	if a := gce.Fake.Address(gce.Project, region, addrName); a.GetAddress() != ip || len(a.GetUsers()) != 1 ||
		!strings.HasSuffix(a.GetUsers()[0], strings.TrimPrefix(member(other).Status.ProviderID, "zones/")) {
		t.Fatalf("after the failover the address is %s used by %v; want %s on %s", a.GetAddress(), a.GetUsers(), ip, member(other).Status.ProviderID)
	}
	var log []string
	for _, r := range gce.Fake.Requests()[before:] {
		if r.Method != http.MethodGet && !strings.HasSuffix(r.Path, "/wait") || strings.Contains(r.Path, "/addresses/") {
			log = append(log, r.String())
		}
	}
	t.Logf("holder %s's instance deleted outside; the address on %s in %s (group status); both members ready again in %s; the writes and address reads of the failover (%d of %d requests):\n  %s",
		first, other, movedAfter.Round(time.Millisecond), back.Round(time.Millisecond), len(log), len(gce.Fake.Requests())-before, strings.Join(log, "\n  "))
	if ev := evs.with(ReasonEgressAddressMoved); len(ev) < 2 || !strings.Contains(ev[len(ev)-1], "to member "+other) {
		t.Errorf("%s events %q", ReasonEgressAddressMoved, ev)
	}
	if c := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionAvailable); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Available %+v", c)
	}
}

// membersReady says each named member's Ready condition, for a failure
// line.
func membersReady(ns string, names ...string) string {
	var out []string
	for _, n := range names {
		px := &egressv1.Proxy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, px); err != nil {
			out = append(out, n+": "+err.Error())
			continue
		}
		c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady)
		if c == nil {
			out = append(out, n+": no Ready")
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s/%s %q", n, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}
