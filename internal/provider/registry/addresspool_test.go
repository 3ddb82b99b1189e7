package registry

import (
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// An addressPool is taken only by types that render a static address; it
// is parsed once, kept on the entry, and a change of it alone keeps the
// provider but tells the listeners, so the entry's Proxies move.
func TestAddressPool(t *testing.T) {
	var built []*stub
	types := testTypes(&built)
	pooled := types["plain"]
	pooled.AddressPools = true
	types["pooled"] = pooled
	r := New(types, provider.Options{})
	t.Cleanup(r.Close)

	const pool = "addressPool: {addresses: [192.0.2.10-192.0.2.20], prefix: 24, gateway: 192.0.2.1, dnsServers: [192.0.2.53]}"
	err := r.Apply(entries(t, r, "providers:\n- {name: a, type: plain, "+pool+"}\n"))
	if err == nil || !strings.Contains(err.Error(), "providers[0].addressPool: Forbidden: provider type plain gives its instances no static address") {
		t.Fatalf("an addressPool on a type without static addresses: %v", err)
	}

	var told [][]string
	r.OnChange(func(names []string) { told = append(told, names) })
	if err := r.Apply(entries(t, r, "providers:\n- {name: a, type: pooled, "+pool+"}\n- {name: b, type: pooled}\n")); err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	b, _ := r.Get("b")
	ap := a.AddressPool()
	if ap == nil || ap.Pool == nil || ap.Ref != (PoolRef{APIGroup: BuiltinPoolGroup, Kind: BuiltinPoolKind, Name: "a"}) ||
		len(ap.DNS) != 1 || ap.DNS[0].String() != "192.0.2.53" || ap.Pool.Size() != 11 || b.AddressPool() != nil {
		t.Fatalf("entry a's pool %+v, b's %+v", ap, b.AddressPool())
	}

	// Another IPAM provider's pool: the entry's claims name it.
	const ref = "addressPool: {ipamPoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: dmz}}"
	builtBefore := len(built)
	told = nil
	if err := r.Apply(entries(t, r, "providers:\n- {name: a, type: pooled, "+ref+"}\n- {name: b, type: pooled}\n")); err != nil {
		t.Fatal(err)
	}
	a2, _ := r.Get("a")
	if a2 != a || len(built) != builtBefore {
		t.Fatalf("a changed pool rebuilt the provider")
	}
	if ap := a2.AddressPool(); ap == nil || ap.Pool != nil || ap.Ref != (PoolRef{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "dmz"}) {
		t.Fatalf("entry a's pool after the change: %+v", ap)
	}
	if len(told) != 1 || strings.Join(told[0], ",") != "a" {
		t.Fatalf("listeners told %v, want [[a]]", told)
	}

	// The same file again: nothing to tell.
	told = nil
	if err := r.Apply(entries(t, r, "providers:\n- {name: a, type: pooled, "+ref+"}\n- {name: b, type: pooled}\n")); err != nil {
		t.Fatal(err)
	}
	if len(told) != 0 {
		t.Fatalf("an unchanged file told %v", told)
	}
}

// The shipped types take an addressPool exactly where their profile says
// they render a static address.
func TestDefaultTypesTakeAddressPoolsByProfile(t *testing.T) {
	var got []string
	for name, typ := range DefaultTypes() {
		if typ.AddressPools {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	if strings.Join(got, ",") != "kvm,kvm2,proxmox" {
		t.Fatalf("types taking an addressPool: %v, want kvm, kvm2, proxmox", got)
	}
}
