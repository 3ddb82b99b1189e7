package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/ippool"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// poolEntry is a fake provider entry whose Proxies get their addresses
// from a pool written as in the providers config.
func poolEntry(t *testing.T, name string, spec ippool.Spec) (*registry.Entry, *fake.Provider) {
	t.Helper()
	if errs := spec.Validate(nil); len(errs) > 0 {
		t.Fatalf("pool spec: %v", errs)
	}
	pool, err := spec.Pool()
	if err != nil {
		t.Fatal(err)
	}
	e, fp := fakeEntry(name)
	var dns []netip.Addr
	for _, d := range spec.DNSServers {
		dns = append(dns, netip.MustParseAddr(d))
	}
	e.SetAddressPool(&registry.AddressPool{Ref: registry.PoolRef{APIGroup: registry.BuiltinPoolGroup, Kind: registry.BuiltinPoolKind, Name: name},
		Pool: pool, DNS: dns})
	return e, fp
}

// allocator is the built-in IPAM provider, driven by the test.
func newAllocator(providers Providers) *AddressPoolReconciler {
	return &AddressPoolReconciler{Client: env.Client, APIReader: env.Client, Providers: providers}
}

// bindAll runs the allocator once over every claim of the namespace.
func bindAll(t *testing.T, a *AddressPoolReconciler, ns string) {
	t.Helper()
	list := &ipamv1.IPAddressClaimList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		if _, err := a.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: c.Name}}); err != nil {
			t.Fatalf("allocator on claim %s: %v", c.Name, err)
		}
	}
}

// untilPool reconciles the Proxy and binds its claims until cond holds.
func (d *direct) untilPool(a *AddressPoolReconciler, name string, n int, what string, cond func(*egressv1.Proxy) bool) *egressv1.Proxy {
	d.t.Helper()
	for i := 0; i < n; i++ {
		d.reconcile(name)
		bindAll(d.t, a, d.ns)
		if px := d.get(name); px != nil && cond(px) {
			return px
		}
	}
	d.t.Fatalf("%s: not reached after %d passes; status %+v", what, n, d.get(name).Status)
	return nil
}

func readyMessage(px *egressv1.Proxy) string {
	for _, c := range px.Status.Conditions {
		if c.Type == egressv1.ConditionReady {
			return c.Message
		}
	}
	return ""
}

var testPool = ippool.Spec{Addresses: []string{"192.0.2.10-192.0.2.11"}, Prefix: 24, Gateway: "192.0.2.1", DNSServers: []string{"192.0.2.53"}}

func TestPoolAddressKeptThroughReplacementAndReleased(t *testing.T) {
	providers := &staticProviders{}
	entry, fp := poolEntry(t, "pool", testPool)
	providers.set(entry)
	d := newDirect(t, providers)
	a := newAllocator(providers)
	ctx := context.Background()

	// A first Proxy: its claim is made before any instance, and bound to
	// the pool's lowest address; the instance is made with it.
	d.create(newProxy("a", "pool"))
	d.reconcile("a")
	if n := fp.Calls("create"); n != 0 {
		t.Fatalf("%d creates before the claim was bound", n)
	}
	if px := d.get("a"); !strings.Contains(readyMessage(px), "waiting for AddressPool."+registry.BuiltinPoolGroup+"/pool to bind") {
		t.Fatalf("before the allocator ran: Ready %s %q", readyReason(px), readyMessage(px))
	}
	px := d.untilPool(a, "a", 10, "a Running", hasReason("True/Running"))
	reqs := fp.CreateRequests()
	if len(reqs) != 1 || reqs[0].StaticAddress == nil || reqs[0].StaticAddress.String() != "192.0.2.10/24 via 192.0.2.1 dns 192.0.2.53" {
		t.Fatalf("create requests: %+v", reqs)
	}
	if st := px.Status.EgressAddress; st == nil || st.Address != "192.0.2.10" || st.Name != "a" || st.ProviderID != px.Status.ProviderID ||
		st.Pool != "AddressPool."+registry.BuiltinPoolGroup+"/pool" {
		t.Fatalf("status.egressAddress %+v (providerID %s)", st, px.Status.ProviderID)
	}
	t.Logf("Proxy a: %s on %s (IPAddress %s, pool %s)", px.Status.EgressAddress.Address, px.Status.ProviderID, px.Status.EgressAddress.Name, px.Status.EgressAddress.Pool)

	// A second gets the next address.
	d.create(newProxy("b", "pool"))
	pb := d.untilPool(a, "b", 10, "b Running", hasReason("True/Running"))
	if pb.Status.EgressAddress == nil || pb.Status.EgressAddress.Address != "192.0.2.11" {
		t.Fatalf("Proxy b: status.egressAddress %+v", pb.Status.EgressAddress)
	}

	// The pool is exhausted: QuotaExceeded naming it, no instance.
	d.create(newProxy("c", "pool"))
	pc := d.untilPool(a, "c", 10, "c QuotaExceeded", hasReason("False/"+egressv1.ReasonQuotaExceeded))
	if msg := readyMessage(pc); !strings.Contains(msg, "pool 192.0.2.10-192.0.2.11") || !strings.Contains(msg, "providers config entry pool") {
		t.Fatalf("exhausted: %q", msg)
	}
	t.Logf("Proxy c: %s %q", readyReason(pc), readyMessage(pc))
	if st := pc.Status.EgressAddress; st == nil || st.Name != "c" || st.Address != "" {
		t.Fatalf("Proxy c's unbound claim is not recorded: %+v", st)
	}

	// Asking for an address another Proxy holds: Permanent, naming it.
	pd := newProxy("d", "pool")
	pd.Spec.EgressAddress = &egressv1.EgressAddressSpec{Address: "192.0.2.10"}
	d.create(pd)
	pd = d.untilPool(a, "d", 10, "d PermanentFailure", hasReason("False/"+egressv1.ReasonPermanentFailure))
	if msg := readyMessage(pd); !strings.Contains(msg, "192.0.2.10") || !strings.Contains(msg, "held by IPAddressClaim "+d.ns+"/a") {
		t.Fatalf("held: %q", msg)
	}
	t.Logf("Proxy d: %s %q", readyReason(pd), readyMessage(pd))

	// A spec change replaces a's instance on the same address, and never
	// with two instances holding it: the old one goes first.
	creates := fp.Calls("create")
	old := px.Status.ProviderID
	fp.SetDeleteReturnsEarly(2) // the old instance takes a while to go, as a VM does
	px.Spec.Port = 3129
	if err := env.Client.Update(ctx, px); err != nil {
		t.Fatal(err)
	}
	var waited string
	px = d.untilPool(a, "a", 20, "a replaced", func(p *egressv1.Proxy) bool {
		if strings.Contains(readyMessage(p), "on the Proxy's pool address") {
			waited = readyReason(p) + " " + readyMessage(p)
		}
		live := 0
		for _, r := range fp.Backend().Records() {
			if r.Marks != nil && r.Marks.UID == string(px.UID) {
				live++
			}
		}
		if live > 1 {
			t.Fatalf("%d instances of Proxy a at once: the pool address would be on both", live)
		}
		return p.Status.ProviderID != "" && p.Status.ProviderID != old && readyReason(p) == "True/Running"
	})
	if waited == "" || fp.Calls("create") != creates+1 {
		t.Fatalf("replacement: no pass waited for the old instance to go (%q), creates %d (was %d)", waited, fp.Calls("create"), creates)
	}
	if _, ok := fp.Backend().Lookup(strings.TrimPrefix(old, "fake/")); ok {
		t.Fatalf("the old instance %s is still there", old)
	}
	t.Logf("while the old instance went: %s", waited)
	reqs = fp.CreateRequests()
	if got := reqs[len(reqs)-1].StaticAddress; got == nil || got.Address.Addr().String() != "192.0.2.10" || px.Status.EgressAddress.Address != "192.0.2.10" {
		t.Fatalf("the replacement's address %v, status %+v", got, px.Status.EgressAddress)
	}
	t.Logf("Proxy a replaced: %s -> %s, still %s", old, px.Status.ProviderID, px.Status.EgressAddress.Address)

	// Deleting a releases its address: the claim and the IPAddress go, and
	// c, which waited on an exhausted pool, gets it.
	if err := env.Client.Delete(ctx, px); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20 && d.get("a") != nil; i++ {
		d.reconcile("a")
		bindAll(t, a, d.ns)
	}
	if d.get("a") != nil {
		t.Fatalf("Proxy a still there: %+v", d.get("a").Status)
	}
	ip := &ipamv1.IPAddress{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: d.ns, Name: "a"}, ip); !apierrors.IsNotFound(err) {
		t.Fatalf("IPAddress a after its Proxy is gone: %v (%+v)", err, ip.Spec)
	}
	pc = d.untilPool(a, "c", 10, "c Running once a released its address", hasReason("True/Running"))
	if pc.Status.EgressAddress.Address != "192.0.2.10" {
		t.Fatalf("Proxy c: %+v", pc.Status.EgressAddress)
	}

	// d never got its address: deleting it still releases its claim.
	if err := env.Client.Delete(ctx, d.get("d")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20 && d.get("d") != nil; i++ {
		d.reconcile("d")
		bindAll(t, a, d.ns)
	}
	claim := &ipamv1.IPAddressClaim{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: d.ns, Name: "d"}, claim); d.get("d") != nil || !apierrors.IsNotFound(err) {
		t.Fatalf("after deleting Proxy d: Proxy %v, its claim: %v", d.get("d") != nil, err)
	}
}

// Claims bound at once never share an address: the allocator reads the
// pool's addresses from the API server under the pool's lock.
func TestPoolAllocatorConcurrentClaimsGetDistinctAddresses(t *testing.T) {
	providers := &staticProviders{}
	entry, _ := poolEntry(t, "many", ippool.Spec{Addresses: []string{"192.0.2.0/26"}, Prefix: 24})
	providers.set(entry)
	a := newAllocator(providers)
	ns := newNamespace(t)
	ctx := context.Background()
	const n = 16
	for i := range n {
		c := &ipamv1.IPAddressClaim{}
		c.Namespace, c.Name = ns, fmt.Sprintf("claim-%02d", i)
		c.Spec.PoolRef = ipamv1.IPPoolReference{APIGroup: registry.BuiltinPoolGroup, Kind: registry.BuiltinPoolKind, Name: "many"}
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for round := 0; round < 3; round++ {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := a.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("claim-%02d", i)}})
				if err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
					errs <- err
				}
			}()
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list := &ipamv1.IPAddressList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, ip := range list.Items {
		if other, dup := seen[ip.Spec.Address]; dup {
			t.Fatalf("address %s given to %s and %s", ip.Spec.Address, other, ip.Spec.ClaimRef.Name)
		}
		seen[ip.Spec.Address] = ip.Spec.ClaimRef.Name
	}
	if len(seen) != n {
		t.Fatalf("%d addresses for %d claims: %v", len(seen), n, seen)
	}
	t.Logf("%d claims reconciled 3 times each, %d at once: %d distinct addresses", n, n, len(seen))
}

// An address asked for on an entry without a pool is refused, naming the
// field, before any instance: it would otherwise be read as an address for
// the backend to reserve.
func TestPoolAddressWithoutPoolIsRefused(t *testing.T) {
	providers := &staticProviders{}
	entry, fp := fakeEntry("nopool")
	providers.set(entry)
	d := newDirect(t, providers)
	px := newProxy("web", "nopool")
	px.Spec.EgressAddress = &egressv1.EgressAddressSpec{Address: "192.0.2.10"}
	d.create(px)
	got := d.reconcileUntil("web", 3, "refused", hasReason("False/"+egressv1.ReasonPermanentFailure))
	if msg := readyMessage(got); !strings.Contains(msg, "spec.egressAddress.address: 192.0.2.10 picks an address from the entry's addressPool, and providers config entry nopool has none") || fp.Calls("create") != 0 {
		t.Fatalf("Ready %q, creates %d", msg, fp.Calls("create"))
	}
}
