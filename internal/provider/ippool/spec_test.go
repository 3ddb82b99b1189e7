package ippool

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

var root = field.NewPath("spec", "addressPool")

// fieldErrs renders errors as "type path" for comparison.
func fieldErrs(errs field.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = string(e.Type) + " " + e.Field
	}
	slices.Sort(out)
	return out
}

func TestValidate(t *testing.T) {
	const (
		inv = "FieldValueInvalid spec.addressPool."
		req = "FieldValueRequired spec.addressPool."
		frb = "FieldValueForbidden spec.addressPool."
		dup = "FieldValueDuplicate spec.addressPool."
		tmn = "FieldValueTooMany spec.addressPool."
	)
	many := make([]string, MaxEntries+1)
	for i := range many {
		many[i] = fmt.Sprintf("192.0.2.%d", i+1)
	}
	ref := &PoolRef{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "proxies"}
	for _, tc := range []struct {
		name string
		spec Spec
		want []string // "type path", in any order; none: valid
		// msg is a part of the first error's detail, for errors whose
		// reason matters.
		msg string
	}{
		{name: "v4 range cidr single", spec: Spec{Addresses: []string{"192.0.2.10-192.0.2.20", "192.0.2.64/28", "192.0.2.200"}, Prefix: 24,
			Gateway: "192.0.2.1", DNSServers: []string{"192.0.2.53", "2001:db8::53"}, Exclude: []string{"192.0.2.15", "192.0.2.66-192.0.2.67"}}},
		{name: "v6 /64", spec: Spec{Addresses: []string{"2001:db8:0:1::/64"}, Prefix: 64, Gateway: "2001:db8:0:1::1"}},
		{name: "range with spaces", spec: Spec{Addresses: []string{"192.0.2.10 - 192.0.2.20"}, Prefix: 24}},
		{name: "v4 /31 point to point", spec: Spec{Addresses: []string{"192.0.2.0/31"}, Prefix: 31}},
		{name: "ipam ref with dns", spec: Spec{IPAMPoolRef: ref, DNSServers: []string{"192.0.2.53"}}},

		{name: "neither", spec: Spec{}, want: []string{req + "addresses"}},
		{name: "neither, dns only", spec: Spec{DNSServers: []string{"192.0.2.53"}}, want: []string{req + "addresses"}},
		{name: "both", spec: Spec{IPAMPoolRef: ref, Addresses: []string{"192.0.2.10"}, Prefix: 24, Gateway: "192.0.2.1", Exclude: []string{"192.0.2.11"}},
			want: []string{frb + "addresses", frb + "exclude", frb + "gateway", frb + "prefix"}},
		{name: "ref fields", spec: Spec{IPAMPoolRef: &PoolRef{APIGroup: "Ipam.x", Kind: "inClusterIPPool", Name: "Proxies_"}},
			want: []string{inv + "ipamPoolRef.apiGroup", inv + "ipamPoolRef.kind", inv + "ipamPoolRef.name"}},
		{name: "ref empty", spec: Spec{IPAMPoolRef: &PoolRef{}},
			want: []string{req + "ipamPoolRef.apiGroup", req + "ipamPoolRef.kind", req + "ipamPoolRef.name"}},
		{name: "ref kind too long", spec: Spec{IPAMPoolRef: &PoolRef{APIGroup: "a.b", Kind: "K" + strings.Repeat("x", 63), Name: "n"}},
			want: []string{inv + "ipamPoolRef.kind"}},

		{name: "no prefix", spec: Spec{Addresses: []string{"192.0.2.10"}}, want: []string{req + "prefix"}},
		{name: "v4 prefix 33", spec: Spec{Addresses: []string{"192.0.2.10"}, Prefix: 33}, want: []string{inv + "prefix"}, msg: "1-32"},
		{name: "v6 prefix 129", spec: Spec{Addresses: []string{"2001:db8::10"}, Prefix: 129}, want: []string{inv + "prefix"}, msg: "1-128"},
		{name: "negative prefix", spec: Spec{Addresses: []string{"192.0.2.10"}, Prefix: -1}, want: []string{inv + "prefix"}},

		{name: "bad entry", spec: Spec{Addresses: []string{"192.0.2.10", "nope"}, Prefix: 24}, want: []string{inv + "addresses[1]"}},
		{name: "host bits", spec: Spec{Addresses: []string{"192.0.2.65/28"}, Prefix: 24}, want: []string{inv + "addresses[0]"}, msg: "host bits"},
		{name: "non-canonical cidr", spec: Spec{Addresses: []string{"2001:DB8::/64"}, Prefix: 64}, want: []string{inv + "addresses[0]"}, msg: "canonical"},
		{name: "mapped cidr", spec: Spec{Addresses: []string{"::ffff:192.0.2.0/120"}, Prefix: 24}, want: []string{inv + "addresses[0]"}, msg: "192.0.2.0/24"},
		{name: "zone", spec: Spec{Addresses: []string{"fe80::1%eth0"}, Prefix: 64}, want: []string{inv + "addresses[0]"}},
		{name: "mapped single", spec: Spec{Addresses: []string{"::ffff:192.0.2.7"}, Prefix: 24}, want: []string{inv + "addresses[0]"}, msg: "write 192.0.2.7"},
		{name: "backwards range", spec: Spec{Addresses: []string{"192.0.2.20-192.0.2.10"}, Prefix: 24}, want: []string{inv + "addresses[0]"}, msg: "starts after"},
		{name: "mixed range", spec: Spec{Addresses: []string{"192.0.2.10-2001:db8::1"}, Prefix: 24}, want: []string{inv + "addresses[0]"}},
		{name: "bad range end", spec: Spec{Addresses: []string{"192.0.2.10-x"}, Prefix: 24}, want: []string{inv + "addresses[0]"}, msg: "last address"},
		{name: "loopback", spec: Spec{Addresses: []string{"127.0.0.5"}, Prefix: 8}, want: []string{inv + "addresses[0]"}, msg: "loopback"},
		{name: "range over multicast", spec: Spec{Addresses: []string{"200.0.0.0-245.0.0.0"}, Prefix: 1}, want: []string{inv + "addresses[0]"}, msg: "multicast"},
		{name: "v6 multicast", spec: Spec{Addresses: []string{"ff02::1"}, Prefix: 64}, want: []string{inv + "addresses[0]"}},
		{name: "families mixed", spec: Spec{Addresses: []string{"192.0.2.10", "2001:db8::1"}, Prefix: 24}, want: []string{inv + "addresses[1]"}, msg: "one family"},
		{name: "other network", spec: Spec{Addresses: []string{"192.0.2.10", "198.51.100.10"}, Prefix: 24}, want: []string{inv + "addresses[1]"}, msg: "192.0.2.0/24"},
		{name: "cidr wider than prefix", spec: Spec{Addresses: []string{"192.0.2.0/23"}, Prefix: 24}, want: []string{inv + "addresses[0]"}},
		{name: "overlap", spec: Spec{Addresses: []string{"192.0.2.10-192.0.2.20", "192.0.2.30", "192.0.2.16/28"}, Prefix: 24},
			want: []string{inv + "addresses[2]"}, msg: "spec.addressPool.addresses[0]"},
		{name: "same address twice spelled apart", spec: Spec{Addresses: []string{"2001:db8::a", "2001:db8:0:0::A"}, Prefix: 64},
			want: []string{inv + "addresses[1]"}, msg: "addresses[0]"},
		{name: "too many addresses", spec: Spec{Addresses: many, Prefix: 24}, want: []string{tmn + "addresses"}},

		{name: "exclude bad", spec: Spec{Addresses: []string{"192.0.2.0/24"}, Prefix: 24, Exclude: []string{"192.0.2.1", "x"}}, want: []string{inv + "exclude[1]"}},
		{name: "exclude family", spec: Spec{Addresses: []string{"192.0.2.0/24"}, Prefix: 24, Exclude: []string{"2001:db8::1"}}, want: []string{inv + "exclude[0]"}},
		{name: "exclude off network", spec: Spec{Addresses: []string{"192.0.2.0/24"}, Prefix: 24, Exclude: []string{"198.51.100.1"}}, want: []string{inv + "exclude[0]"}, msg: "excludes nothing"},
		{name: "exclude duplicate", spec: Spec{Addresses: []string{"192.0.2.0/24"}, Prefix: 24, Exclude: []string{"192.0.2.5", "192.0.2.5"}}, want: []string{dup + "exclude[1]"}},
		{name: "too many excludes", spec: Spec{Addresses: []string{"192.0.2.0/24"}, Prefix: 24, Exclude: many}, want: []string{tmn + "exclude"}},
		{name: "excluded all", spec: Spec{Addresses: []string{"192.0.2.10-192.0.2.11"}, Prefix: 24, Gateway: "192.0.2.10", Exclude: []string{"192.0.2.11"}},
			want: []string{inv + "addresses"}, msg: "no address"},
		{name: "only network and broadcast", spec: Spec{Addresses: []string{"192.0.2.0", "192.0.2.255"}, Prefix: 24}, want: []string{inv + "addresses"}},

		{name: "gateway bad", spec: Spec{Addresses: []string{"192.0.2.10"}, Prefix: 24, Gateway: "gw"}, want: []string{inv + "gateway"}},
		{name: "gateway off network", spec: Spec{Addresses: []string{"192.0.2.10"}, Prefix: 24, Gateway: "192.0.3.1"}, want: []string{inv + "gateway"}, msg: "192.0.2.0/24"},
		{name: "gateway family", spec: Spec{Addresses: []string{"192.0.2.10"}, Prefix: 24, Gateway: "2001:db8::1"}, want: []string{inv + "gateway"}},
		{name: "gateway broadcast", spec: Spec{Addresses: []string{"192.0.2.10"}, Prefix: 24, Gateway: "192.0.2.255"}, want: []string{inv + "gateway"}, msg: "broadcast"},
		{name: "gateway v6 subnet anycast", spec: Spec{Addresses: []string{"2001:db8::10"}, Prefix: 64, Gateway: "2001:db8::"}, want: []string{inv + "gateway"}},
		{name: "gateway zone", spec: Spec{Addresses: []string{"2001:db8::10"}, Prefix: 64, Gateway: "2001:db8::1%eth0"}, want: []string{inv + "gateway"}, msg: "zone"},

		{name: "dns bad", spec: Spec{Addresses: []string{"192.0.2.10"}, Prefix: 24, DNSServers: []string{"192.0.2.53", "resolver"}}, want: []string{inv + "dnsServers[1]"}},
		{name: "dns unspecified", spec: Spec{IPAMPoolRef: ref, DNSServers: []string{"0.0.0.0"}}, want: []string{inv + "dnsServers[0]"}},
		{name: "dns duplicate", spec: Spec{IPAMPoolRef: ref, DNSServers: []string{"192.0.2.53", "192.0.2.53"}}, want: []string{dup + "dnsServers[1]"}},
		{name: "too many dns", spec: Spec{IPAMPoolRef: ref, DNSServers: many}, want: []string{tmn + "dnsServers"}},
		{name: "every field wrong at once", spec: Spec{Addresses: []string{"192.0.2.10", "2001:db8::1"}, Prefix: 40, Gateway: "x", Exclude: []string{"y"}, DNSServers: []string{"z"}},
			want: []string{inv + "addresses[1]", inv + "dnsServers[0]", inv + "exclude[0]", inv + "gateway", inv + "prefix"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.spec.Validate(root)
			got := fieldErrs(errs)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("Validate = %v\nwant fields %v", errs, want)
			}
			if tc.msg != "" && !strings.Contains(errs[0].Detail, tc.msg) {
				t.Errorf("Validate detail %q, want it to mention %q", errs[0].Detail, tc.msg)
			}
			p, err := tc.spec.Pool()
			switch {
			case len(want) > 0 && err == nil:
				t.Errorf("Pool() of an invalid spec = %v, want an error", p)
			case len(want) == 0 && tc.spec.IPAMPoolRef == nil && err != nil:
				t.Errorf("Pool() of a valid spec: %v", err)
			case tc.spec.IPAMPoolRef != nil && err == nil:
				t.Errorf("Pool() of an ipamPoolRef spec = %v, want an error", p)
			}
		})
	}
}

func TestSpecDNS(t *testing.T) {
	s := Spec{IPAMPoolRef: &PoolRef{}, DNSServers: []string{"192.0.2.53", "2001:db8::53"}}
	want := []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("2001:db8::53")}
	if got := s.DNS(); !slices.Equal(got, want) {
		t.Errorf("DNS() = %v, want %v", got, want)
	}
}
