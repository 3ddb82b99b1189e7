package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/ippool"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestProxyGroupPeersChangedInPlace (issue 24): on a provider that tells a
// running member its peers in place (provider.GroupPeersUpdater), a group
// that grows from two members to three and back keeps the two members'
// instances: each gets the new peer list through UpdateGroupPeers, never a
// new instance. The newcomer is made only once both others run with it
// among their peers: while their updates fail it waits (a newcomer that
// nobody lists would hear no advert and take the group's address beside
// the holder).
func TestProxyGroupPeersChangedInPlace(t *testing.T) {
	entry, fp := poolEntry(t, "inplace", ippool.Spec{Addresses: []string{"192.0.2.10-192.0.2.20"}, Prefix: 24, Gateway: "192.0.2.1"})
	// grow-1's guest cannot be told while refused is set (a guest agent
	// that does not answer); refusals counts its refusals.
	var refused atomic.Value
	var refusals atomic.Int32
	peers := fake.PeersUpdater{Provider: fp, Refuse: func(instance string) error {
		if name, _ := refused.Load().(string); name != "" && name == instance {
			refusals.Add(1)
			return provider.Errorf(provider.ErrTransient, "guest agent not answering")
		}
		return nil
	}}
	entry.Peers = peers
	ns, _ := startGroupManagerOn(t, entry)
	ctx := context.Background()
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grow"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, Template: egressv1.ProxyTemplate{
			Spec: egressv1.ProxySpec{Provider: "inplace", Port: 3128, AllowedSourceRanges: []string{"192.0.2.0/24"}},
		}},
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitGroup(t, ns, "grow", "two members ready", allReady(2))
	member := func(name string) *egressv1.Proxy {
		t.Helper()
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, px); err != nil {
			t.Fatal(err)
		}
		return px
	}
	own := func(px *egressv1.Proxy) netip.Addr {
		if px.Status.EgressAddress == nil {
			return netip.Addr{}
		}
		a, _ := netip.ParseAddr(px.Status.EgressAddress.Address)
		return a
	}
	instances := map[string]string{}
	for _, name := range []string{"grow-0", "grow-1"} {
		instances[name] = member(name).Status.InstanceName
	}
	scale := func(n int32) {
		t.Helper()
		testenv.EventuallyNil(t, "scale to "+fmt.Sprint(n), func() error {
			cur := &egressv1.ProxyGroup{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), cur); err != nil {
				return err
			}
			cur.Spec.Members = n
			return env.Client.Update(ctx, cur)
		})
	}

	// Grow while grow-1's guest cannot be told: the newcomer gets its
	// own address, the roll gives grow-0 and then grow-1 the new list in
	// their specs, grow-0's guest takes it, grow-1's does not, and the
	// newcomer waits.
	refused.Store(instances["grow-1"])
	scale(3)
	var newcomer netip.Addr
	testenv.EventuallyNil(t, "grow-1 listing grow-2 in its spec", func() error {
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "grow-2"}, px); err != nil {
			return err
		}
		newcomer = own(px)
		if !newcomer.IsValid() {
			return fmt.Errorf("grow-2 has no address of its own yet")
		}
		if ga := member("grow-1").Spec.GroupAddress; ga == nil || !slices.Contains(ga.Peers, newcomer.String()) {
			return fmt.Errorf("grow-1's spec.groupAddress %+v", ga)
		}
		return nil
	})
	// Three failed updates later (each retried after the transient
	// backoff), the newcomer has still made nothing.
	failedFrom := refusals.Load()
	testenv.EventuallyNil(t, "grow-1's failed peer updates", func() error {
		if n := refusals.Load() - failedFrom; n < 3 {
			return fmt.Errorf("%d failed updates since", n)
		}
		return nil
	})
	if got := peers.GroupPeers(instances["grow-0"]); !slices.Contains(got, newcomer) {
		t.Errorf("grow-0's instance runs with peers %v, want %s among them", got, newcomer)
	}
	for _, req := range fp.CreateRequests() {
		if req.ProxyName == "grow-2" {
			t.Fatalf("grow-2 was made while the other members could not be told it: %+v", req.GroupAddress)
		}
	}
	if ga := member("grow-2").Spec.GroupAddress; ga == nil || ga.Address != "" {
		t.Errorf("grow-2's spec.groupAddress %+v while the others do not list it: want none yet", ga)
	}

	// The guests answer again: three members, the first two on their
	// instances.
	refused.Store("")
	waitGroup(t, ns, "grow", "three members ready", allReady(3))
	addr := map[string]netip.Addr{}
	for _, name := range []string{"grow-0", "grow-1", "grow-2"} {
		addr[name] = own(member(name))
	}
	sorted := func(a ...netip.Addr) []netip.Addr {
		slices.SortFunc(a, func(x, y netip.Addr) int { return x.Compare(y) })
		return a
	}
	wantPeers := map[string][]netip.Addr{
		"grow-0": sorted(addr["grow-1"], addr["grow-2"]),
		"grow-1": sorted(addr["grow-0"], addr["grow-2"]),
	}
	checkKept := func(when string) {
		t.Helper()
		for name, want := range wantPeers {
			px := member(name)
			if px.Status.InstanceName != instances[name] {
				t.Errorf("%s: %s on instance %s, want it kept on %s", when, name, px.Status.InstanceName, instances[name])
			}
			if got := peers.GroupPeers(instances[name]); !slices.Equal(got, want) {
				t.Errorf("%s: %s's instance runs with peers %v, want %v", when, name, got, want)
			}
		}
	}
	checkKept("grown")
	// A pass whose status write lost to another writer's change (the
	// group's roll) repeats its Create on the next pass, which is
	// idempotent (cachelag.go, pass): the instances made are
	// counted by name.
	instancesMade := func(proxy string) (names []string, first *provider.CreateRequest) {
		for _, req := range fp.CreateRequests() {
			if req.ProxyName == proxy && !slices.Contains(names, req.Name) {
				names = append(names, req.Name)
				if first == nil {
					first = &req
				}
			}
		}
		return names, first
	}
	made, first := instancesMade("grow-2")
	if len(made) != 1 || first.GroupAddress == nil || !slices.Equal(first.GroupAddress.Peers, sorted(addr["grow-0"], addr["grow-1"])) {
		t.Errorf("grow-2's instances %v, the first's request %+v: want one, with grow-0 and grow-1 as peers", made, first)
	}

	// Shrink: the newcomer goes, the others forget it in place.
	scale(2)
	testenv.EventuallyNil(t, "grow-2 gone and the peers updated", func() error {
		gone := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "grow-2"}, gone); err == nil {
			return fmt.Errorf("grow-2 still there")
		}
		if got := peers.GroupPeers(instances["grow-0"]); !slices.Equal(got, []netip.Addr{addr["grow-1"]}) {
			return fmt.Errorf("grow-0 runs with peers %v", got)
		}
		if got := peers.GroupPeers(instances["grow-1"]); !slices.Equal(got, []netip.Addr{addr["grow-0"]}) {
			return fmt.Errorf("grow-1 runs with peers %v", got)
		}
		return nil
	})
	wantPeers = map[string][]netip.Addr{"grow-0": {addr["grow-1"]}, "grow-1": {addr["grow-0"]}}
	checkKept("shrunk")
	waitGroup(t, ns, "grow", "two members ready again", allReady(2))
	for _, name := range []string{"grow-0", "grow-1"} {
		if made, _ := instancesMade(name); len(made) != 1 || made[0] != instances[name] {
			t.Errorf("%s: instances %v made through growing and shrinking, want %s alone", name, made, instances[name])
		}
	}
	if ups := fp.Backend().PeersUpdates(); len(ups) != 4 {
		t.Errorf("peer updates %+v: want 4 (each of two members, growing and shrinking)", ups)
	}
}
