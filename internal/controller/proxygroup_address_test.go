package controller

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// A member's spec.groupAddress as the group decides it: the peers change
// once, when every address is known, and a newcomer joins only once every
// member that runs an instance lists it and runs that list.
func TestDesiredGroupAddress(t *testing.T) {
	vip := netip.MustParsePrefix("192.0.2.100/24")
	a0, a1, a2 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")
	pending := &egressv1.MemberGroupAddress{}
	full := func(peers ...string) *egressv1.MemberGroupAddress {
		return &egressv1.MemberGroupAddress{Address: "192.0.2.100/24", Peers: peers}
	}
	for _, tc := range []struct {
		name string
		a    groupAddressing
		n, i int
		want *egressv1.MemberGroupAddress
	}{{
		name: "off a pool: none",
		a:    groupAddressing{},
		n:    2, i: 0, want: nil,
	}, {
		name: "the group's address not bound yet: wait",
		a:    groupAddressing{pooled: true, members: map[int]netip.Addr{0: a0, 1: a1}},
		n:    2, i: 0, want: pending,
	}, {
		name: "a member's address not bound yet: wait",
		a:    groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0}},
		n:    2, i: 0, want: pending,
	}, {
		name: "its own address not bound yet: wait",
		a:    groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{1: a1}},
		n:    2, i: 0, want: pending,
	}, {
		name: "first start: every address known, nobody runs yet: the others, sorted",
		a:    groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0, 1: a1, 2: a2}},
		n:    3, i: 1, want: full("192.0.2.10", "192.0.2.12"),
	}, {
		name: "the second of a first start: member 0 already lists it (and runs nothing yet)",
		a: groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0, 1: a1},
			specs: map[int]*egressv1.MemberGroupAddress{0: full("192.0.2.11")}},
		n: 2, i: 1, want: full("192.0.2.10"),
	}, {
		name: "a newcomer (scale to 3) waits while a running member does not list it",
		a: groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0, 1: a1, 2: a2},
			specs: map[int]*egressv1.MemberGroupAddress{0: full("192.0.2.11"), 1: full("192.0.2.10"), 2: pending},
			older: map[int]bool{}},
		n: 3, i: 2, want: pending,
	}, {
		name: "meanwhile the running members are given the newcomer",
		a: groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0, 1: a1, 2: a2},
			specs: map[int]*egressv1.MemberGroupAddress{0: full("192.0.2.11"), 1: full("192.0.2.10"), 2: pending},
			older: map[int]bool{}},
		n: 3, i: 0, want: full("192.0.2.11", "192.0.2.12"),
	}, {
		name: "a newcomer waits while a member lists it but may still run its old list",
		a: groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0, 1: a1, 2: a2},
			specs: map[int]*egressv1.MemberGroupAddress{0: full("192.0.2.11", "192.0.2.12"), 1: full("192.0.2.10", "192.0.2.12"), 2: pending},
			older: map[int]bool{1: true}},
		n: 3, i: 2, want: pending,
	}, {
		name: "the newcomer joins once every running member lists it and runs nothing older",
		a: groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0, 1: a1, 2: a2},
			specs: map[int]*egressv1.MemberGroupAddress{0: full("192.0.2.11", "192.0.2.12"), 1: full("192.0.2.10", "192.0.2.12"), 2: pending},
			older: map[int]bool{}},
		n: 3, i: 2, want: full("192.0.2.10", "192.0.2.11"),
	}, {
		name: "a running member keeps its list while a newcomer's address is not known",
		a: groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0, 1: a1},
			specs: map[int]*egressv1.MemberGroupAddress{0: full("192.0.2.11"), 1: full("192.0.2.10")}, older: map[int]bool{}},
		n: 3, i: 0, want: full("192.0.2.11"),
	}, {
		name: "scaled to one: no peers",
		a: groupAddressing{pooled: true, virtual: vip, members: map[int]netip.Addr{0: a0, 1: a1},
			specs: map[int]*egressv1.MemberGroupAddress{0: full("192.0.2.11")}, older: map[int]bool{}},
		n: 1, i: 0, want: full(),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := desiredGroupAddress(tc.a, tc.n, tc.i)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("member %d of %d: %+v, want %+v", tc.i, tc.n, got, tc.want)
			}
		})
	}
}

// A member's spec.groupAddress as its provider takes it.
func TestMemberGroupAddress(t *testing.T) {
	static := &provider.StaticAddress{Address: netip.MustParsePrefix("192.0.2.10/24")}
	member := func(ga *egressv1.MemberGroupAddress, owner string) *egressv1.Proxy {
		px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: "g-1", Labels: map[string]string{egressv1.LabelGroup: "g", egressv1.LabelGroupMember: "1"}},
			Spec: egressv1.ProxySpec{GroupAddress: ga}}
		if owner != "" {
			px.OwnerReferences = []metav1.OwnerReference{{APIVersion: egressv1.GroupVersion.String(), Kind: owner, Name: "g", UID: "group-uid", Controller: ptr.To(true)}}
		}
		return px
	}
	full := &egressv1.MemberGroupAddress{Address: "192.0.2.100/24", Peers: []string{"192.0.2.11"}}

	got, err := memberGroupAddress(member(full, "ProxyGroup"), static, "pool")
	want := &provider.GroupAddress{Virtual: netip.MustParsePrefix("192.0.2.100/24"), Peers: []netip.Addr{netip.MustParseAddr("192.0.2.11")}, Group: "group-uid", Index: 1}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("a member: %+v, %v; want %+v", got, err, want)
	}
	if got, err := memberGroupAddress(member(nil, "ProxyGroup"), static, "pool"); got != nil || err != nil {
		t.Errorf("no groupAddress: %+v, %v", got, err)
	}
	if _, err := memberGroupAddress(member(&egressv1.MemberGroupAddress{}, "ProxyGroup"), static, "pool"); err == nil || !strings.Contains(err.Error(), "waiting for ProxyGroup g") {
		t.Errorf("an empty one: %v, want a wait naming the group", err)
	} else if _, ok := isPoolPending(err); !ok {
		t.Errorf("an empty one: %v is not a wait", err)
	}
	for _, tc := range []struct {
		name   string
		px     *egressv1.Proxy
		static *provider.StaticAddress
		want   string
	}{
		{"no group controls it", member(full, ""), static, "no ProxyGroup controls Proxy g-1: remove the field"},
		{"another kind controls it", member(full, "Deployment"), static, "no ProxyGroup controls Proxy g-1"},
		{"no pool address", member(full, "ProxyGroup"), nil, "providers config entry pool has no addressPool"},
	} {
		_, err := memberGroupAddress(tc.px, tc.static, "pool")
		if err == nil || !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want Permanent naming %q", tc.name, err, tc.want)
		}
	}
}
