package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParseCanonical(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // the error names this; empty: accepted
	}{
		{"10.0.0.0/8", ""},
		{"192.168.1.7/32", ""},
		{"2001:db8::/32", ""},
		{"fd00::1/128", ""},
		{"0.0.0.0/0", ""},
		{"10.0.0.1/8", "write 10.0.0.0/8 for the whole range, or 10.0.0.1/32 for the one host"},
		{"192.168.1.7/24", "write 192.168.1.0/24"},
		{"2001:db8::1/32", "write 2001:db8::/32 for the whole range, or 2001:db8::1/128"},
		{"2001:DB8::/32", "not in canonical form: write 2001:db8::/32"},
		{"2001:db8:0:0:0:0:0:0/32", "not in canonical form: write 2001:db8::/32"},
		{" 10.0.0.0/8", "must be a CIDR"},
		{"10.0.0.0", "must be a CIDR"},
		{"10.0.0.0/33", "must be a CIDR"},
		{"::ffff:10.0.0.0/104", "IPv4-mapped IPv6 range: write the IPv4 range 10.0.0.0/8"},
		{"fe80::/10%eth0", "must be a CIDR"},
	} {
		pfx, err := ParseCanonical(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ParseCanonical(%q): %v, want accepted", tc.in, err)
		case tc.want == "" && pfx.String() != tc.in:
			t.Errorf("ParseCanonical(%q) = %s", tc.in, pfx)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ParseCanonical(%q): %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

func TestParseRangesNamesEachEntry(t *testing.T) {
	got, errs := ParseRanges([]string{"10.0.0.0/8", "10.0.0.1/8", "nope", "10.0.0.0/8"}, field.NewPath("allowedSourceRanges"))
	msg := errs.ToAggregate().Error()
	for _, want := range []string{
		`allowedSourceRanges[1]: Invalid value: "10.0.0.1/8": has host bits set: write 10.0.0.0/8`,
		`allowedSourceRanges[2]: Invalid value: "nope": must be a CIDR`,
		`allowedSourceRanges[3]: Duplicate value: "10.0.0.0/8"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors %q lack %q", msg, want)
		}
	}
	if len(got) != 4 || got[0] != netip.MustParsePrefix("10.0.0.0/8") || got[1].IsValid() {
		t.Errorf("prefixes %v, want aligned with the input and invalid where refused", got)
	}
}

// Every default range is refused, as the issue lists them, mapped and
// zoned forms included; public addresses pass. Pure checks, no traffic.
func TestDefaultPolicyDeniesInternalRanges(t *testing.T) {
	p := Default()
	for _, a := range []string{
		"127.0.0.1", "127.255.255.254", "0.0.0.0", "0.1.2.3",
		"169.254.169.254", "169.254.0.1",
		"10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.0.1",
		"100.64.0.1", "100.127.255.255", "100.100.100.200",
		"::", "::1", "fe80::1", "fe80::1%eth0", "fc00::1", "fd00::1", "fd00:ec2::254",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
		// Grown to the registries' not globally reachable rows.
		"192.0.2.1", "198.51.100.7", "203.0.113.9", "198.18.0.1", "192.0.0.8", "192.0.0.170", "240.0.0.1",
		"255.255.255.255", "224.0.0.1", "239.255.255.250", "192.88.99.1",
		"2001:db8::1", "3fff::1", "100::1", "2001:2::1", "5f00::1", "ff02::1", "64:ff9b:1::1",
		// IPv4 carried in IPv6: refused whole by default.
		"64:ff9b::7f00:1", "64:ff9b::808:808", "::7f00:1", "::ffff:0:7f00:1", "2002:7f00:1::1", "2001::1",
	} {
		err := p.CheckAddr(netip.MustParseAddr(a))
		var r *Refusal
		if !errors.As(err, &r) || !strings.Contains(err.Error(), "allowedDestinations") {
			t.Errorf("CheckAddr(%s): %v, want a Refusal pointing at allowedDestinations", a, err)
		}
	}
	for _, a := range []string{"172.32.0.1", "100.128.0.1", "11.0.0.1", "2a00:1450::1", "fe00::1", "192.0.0.9", "2001:1::1", "2001:3::5", "::ffff:11.0.0.1"} {
		if err := p.CheckAddr(netip.MustParseAddr(a)); err != nil {
			t.Errorf("CheckAddr(%s): %v, want allowed", a, err)
		}
	}
	err := p.CheckAddr(netip.MustParseAddr("169.254.169.254"))
	if err == nil || !strings.Contains(err.Error(), "169.254.0.0/16, link-local (cloud metadata") {
		t.Errorf("refusal %v does not say which range and why", err)
	}
}

func TestAllowedDestinationsAreExceptions(t *testing.T) {
	s := Settings{AllowedDestinations: []string{"127.0.0.5/32", "10.20.0.0/16"}}
	if errs := s.Validate(nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	// Narrower than the documentation row that holds it, so the refusal
	// gives this range's reason, not the registry's.
	extra := Range{netip.MustParsePrefix("203.0.113.0/25"), "the cluster's Service range"}
	p := s.Policy(extra)
	for a, allowed := range map[string]bool{
		"127.0.0.5": true, "127.0.0.6": false, "127.0.0.1": false,
		"10.20.1.1": true, "10.21.0.1": false, "::ffff:10.20.1.1": true,
		"203.0.113.9": false, "198.51.100.1": false, "11.0.0.1": true,
	} {
		if err := p.CheckAddr(netip.MustParseAddr(a)); (err == nil) != allowed {
			t.Errorf("CheckAddr(%s): %v, want allowed=%t", a, err, allowed)
		}
	}
	if err := p.CheckAddr(netip.MustParseAddr("203.0.113.9")); err == nil || !strings.Contains(err.Error(), "Service range") {
		t.Errorf("extra range refusal %v does not say why", err)
	}
}

func TestCheckPort(t *testing.T) {
	def := Default()
	wide := (&Settings{ConnectPorts: []int32{443, 8443}}).Policy()
	for _, tc := range []struct {
		p       *Policy
		port    uint16
		connect bool
		ok      bool
	}{
		{def, 443, true, true}, {def, 80, true, false}, {def, 22, true, false}, {def, 8443, true, false},
		{wide, 8443, true, true}, {wide, 443, true, true}, {wide, 22, true, false},
		{def, 80, false, true}, {def, 443, false, true}, {def, 8080, false, true}, {def, 65535, false, true},
		{def, 25, false, false}, {def, 22, false, false}, {def, 1024, false, false}, {def, 0, false, false},
	} {
		err := tc.p.CheckPort(tc.port, tc.connect)
		if (err == nil) != tc.ok {
			t.Errorf("CheckPort(%d, connect=%t) with connect ports %v: %v, want ok=%t", tc.port, tc.connect, tc.p.ConnectPorts(), err, tc.ok)
		}
	}
	if err := def.Decide(Destination{Connect: true, Port: 22, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}); err == nil || !strings.Contains(err.Error(), "connectPorts") {
		t.Errorf("Decide of CONNECT 10.0.0.1:22: %v, want the port refusal naming connectPorts", err)
	}
	for _, scheme := range []string{"ftp", "gopher", "", "HTTP"} {
		var r *Refusal
		if err := def.Decide(Destination{Scheme: scheme, Port: 80, Addrs: []netip.Addr{netip.MustParseAddr("11.0.0.1")}}); !errors.As(err, &r) || r.Class != RefusedScheme {
			t.Errorf("Decide of a plain %q request: %v, want the scheme refused", scheme, err)
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		s    Settings
		want []string
	}{
		{Settings{AllowedDestinations: []string{"10.0.0.1/8"}}, []string{"x.allowedDestinations[0]", "write 10.0.0.0/8"}},
		{Settings{AllowedDestinations: []string{"0.0.0.0/0"}}, []string{"x.allowedDestinations[0]", "turn the destination deny off"}},
		{Settings{AllowedDestinations: []string{"::/0"}}, []string{"x.allowedDestinations[0]", "turn the destination deny off"}},
		{Settings{AllowedDestinations: []string{"10.0.0.0/8", "10.0.0.0/8"}}, []string{"x.allowedDestinations[1]: Duplicate"}},
		{Settings{ConnectPorts: []int32{443, 0}}, []string{"x.connectPorts[1]", "1-65535"}},
		{Settings{ConnectPorts: []int32{443, 443}}, []string{"x.connectPorts[1]: Duplicate"}},
		{Settings{ConnectPorts: []int32{70000}}, []string{"x.connectPorts[0]"}},
		{Settings{EgressIPEcho: "https://checkip.example/"}, []string{"x.egressIPEcho", "must be an http:// URL"}},
		{Settings{EgressIPEcho: "http://echo.example/%41"}, []string{"x.egressIPEcho", "may hold only"}},
	} {
		errs := tc.s.Validate(field.NewPath("x"))
		if len(errs) == 0 {
			t.Errorf("Validate(%+v) accepted", tc.s)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(errs.ToAggregate().Error(), w) {
				t.Errorf("Validate(%+v): %v, want %q", tc.s, errs, w)
			}
		}
	}
	ok := Settings{AllowedDestinations: []string{"10.0.0.0/8", "fd00::/8"}, ConnectPorts: []int32{443, 8443}}
	if errs := ok.Validate(nil); len(errs) > 0 {
		t.Errorf("Validate(%+v): %v", ok, errs)
	}
}

// A name is refused when any of its addresses is refused, whichever comes
// first and whatever else is allowed, and when it has none.
func TestCheckAddrsRefusesMixedAndEmptyAnswers(t *testing.T) {
	p := (&Settings{AllowedDestinations: []string{"10.20.0.0/16"}}).Policy()
	addrs := func(ss ...string) []netip.Addr {
		out := make([]netip.Addr, len(ss))
		for i, s := range ss {
			out[i] = netip.MustParseAddr(s)
		}
		return out
	}
	for _, tc := range []struct {
		addrs []netip.Addr
		class RefusalClass
		ok    bool
	}{
		{addrs("10.20.0.5"), 0, true},
		{addrs("10.20.0.5", "11.0.0.1"), 0, true},
		{addrs("10.20.0.5", "127.0.0.1"), RefusedAddress, false},
		{addrs("127.0.0.1", "10.20.0.5"), RefusedAddress, false},
		{addrs("11.0.0.1", "::1"), RefusedAddress, false},
		{addrs("2a00:1450::1", "::ffff:169.254.169.254"), RefusedAddress, false},
		{nil, RefusedUnresolved, false},
	} {
		err := p.CheckAddrs(tc.addrs)
		var r *Refusal
		switch {
		case tc.ok && err != nil:
			t.Errorf("CheckAddrs(%v): %v, want allowed", tc.addrs, err)
		case !tc.ok && (!errors.As(err, &r) || r.Class != tc.class):
			t.Errorf("CheckAddrs(%v): %v, want a refusal of class %d", tc.addrs, err, tc.class)
		}
	}
}

// With allowNAT64, an address in 64:ff9b::/96 is decided as the IPv4
// address it carries: the admin's exceptions carry over, the refused
// ranges stay refused.
func TestAllowNAT64ChecksTheCarriedAddress(t *testing.T) {
	p := (&Settings{AllowNAT64: true, AllowedDestinations: []string{"10.20.0.0/16"}}).Policy()
	for a, allowed := range map[string]bool{
		"64:ff9b::808:808":   true,  // 8.8.8.8
		"64:ff9b::a14:5":     true,  // 10.20.0.5, allowed by the entry
		"64:ff9b::7f00:1":    false, // 127.0.0.1
		"64:ff9b::a9fe:a9fe": false, // 169.254.169.254
		"64:ff9b::a15:1":     false, // 10.21.0.1
		"64:ff9b::c000:9":    true,  // 192.0.0.9, a reachable row
		"64:ff9b:1::808:808": false, // local-use NAT64 stays refused
		"2002:808:808::1":    false, // 6to4 stays refused
	} {
		if err := p.CheckAddr(netip.MustParseAddr(a)); (err == nil) != allowed {
			t.Errorf("CheckAddr(%s) with allowNAT64: %v, want allowed=%t", a, err, allowed)
		}
	}
	err := p.CheckAddr(netip.MustParseAddr("64:ff9b::7f00:1"))
	if err == nil || !strings.Contains(err.Error(), "NAT64 form of loopback") {
		t.Errorf("refusal %v does not say it carries loopback", err)
	}
}

// The refused set is what both enforcements check, so it must be exact:
// no two ranges overlap (Squid would ignore one), no reachable row and no
// allowed range has an address in it, every refused row is covered but for
// those holes, and no IPv6 range holds an IPv4-mapped address.
func TestRefusedSetIsTheRowsLessTheHoles(t *testing.T) {
	allowed := []string{"10.20.0.0/16", "127.0.0.5/32", "fd00:1::/64"}
	for _, s := range []Settings{{}, {AllowedDestinations: allowed}, {AllowedDestinations: allowed, AllowNAT64: true}} {
		p := s.Policy(Range{netip.MustParsePrefix("::/64"), "an extra range that holds ::ffff:0:0/96"})
		refused := p.Refused()
		for i, a := range refused {
			for _, b := range refused[i+1:] {
				if a.Prefix.Overlaps(b.Prefix) {
					t.Errorf("%+v: refused ranges %s and %s overlap", s, a.Prefix, b.Prefix)
				}
			}
			if a.Prefix.Overlaps(mappedBlock) {
				t.Errorf("%+v: refused range %s holds IPv4-mapped addresses", s, a.Prefix)
			}
		}
		rows, reachable := registryRanges()
		var holes []netip.Prefix
		for _, r := range reachable {
			holes = append(holes, r.Prefix)
		}
		for _, a := range s.AllowedDestinations {
			holes = append(holes, netip.MustParsePrefix(a))
		}
		if s.AllowNAT64 {
			holes = append(holes, nat64Block)
		}
		for _, h := range holes {
			for _, a := range []netip.Addr{h.Addr(), lastAddr(h)} {
				if h != nat64Block && p.CheckAddr(a) != nil {
					t.Errorf("%+v: %s, in the hole %s, is refused", s, a, h)
				}
			}
		}
		for _, r := range rows {
			for _, a := range []netip.Addr{r.Prefix.Addr(), lastAddr(r.Prefix)} {
				inHole := false
				for _, h := range holes {
					inHole = inHole || h.Contains(a)
				}
				if !inHole && p.CheckAddr(a) == nil {
					t.Errorf("%+v: %s, in the refused row %s (%s), is allowed", s, a, r.Prefix, r.Why)
				}
			}
		}
	}
}

// Each row of the registry tables is a canonical CIDR with a reason.
func TestRegistryRowsAreCanonical(t *testing.T) {
	for _, table := range [][]specialRow{ipv4Special, ipv6Special, ipv4Embedding} {
		for _, r := range table {
			if _, err := ParseCanonical(r.block); err != nil || r.name == "" || !strings.HasPrefix(r.rfc, "RFC ") {
				t.Errorf("row %+v: %v", r, err)
			}
		}
	}
}

func TestSubtract(t *testing.T) {
	pfx := netip.MustParsePrefix
	for _, tc := range []struct {
		p, q string
		want string
	}{
		{"10.0.0.0/8", "11.0.0.0/8", "10.0.0.0/8"},
		{"10.0.0.0/8", "10.0.0.0/8", ""},
		{"10.0.0.0/8", "0.0.0.0/0", ""},
		{"10.0.0.0/8", "::/0", "10.0.0.0/8"},
		{"192.0.0.0/24", "192.0.0.9/32", "192.0.0.0/29 192.0.0.8/32 192.0.0.10/31 192.0.0.12/30 192.0.0.16/28 192.0.0.32/27 192.0.0.64/26 192.0.0.128/25"},
		{"10.0.0.0/8", "10.128.0.0/9", "10.0.0.0/9"},
		{"fc00::/7", "fd00::/8", "fc00::/8"},
	} {
		var got []string
		for _, g := range subtract(pfx(tc.p), pfx(tc.q)) {
			got = append(got, g.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("subtract(%s, %s) = %v, want %s", tc.p, tc.q, got, tc.want)
		}
	}
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
