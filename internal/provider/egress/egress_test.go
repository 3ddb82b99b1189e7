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
	} {
		err := p.CheckAddr(netip.MustParseAddr(a))
		var r *Refusal
		if !errors.As(err, &r) || !strings.Contains(err.Error(), "allowedDestinations") {
			t.Errorf("CheckAddr(%s): %v, want a Refusal pointing at allowedDestinations", a, err)
		}
	}
	for _, a := range []string{"192.0.2.1", "198.51.100.7", "172.32.0.1", "100.128.0.1", "11.0.0.1", "2001:db8::1", "fe00::1"} {
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
	extra := Range{netip.MustParsePrefix("203.0.113.0/24"), "the cluster's Service range"}
	p := s.Policy(extra)
	for a, allowed := range map[string]bool{
		"127.0.0.5": true, "127.0.0.6": false, "127.0.0.1": false,
		"10.20.1.1": true, "10.21.0.1": false, "::ffff:10.20.1.1": true,
		"203.0.113.9": false, "198.51.100.1": true,
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
	if err := def.Check(netip.MustParseAddrPort("10.0.0.1:22"), true); err == nil || !strings.Contains(err.Error(), "connectPorts") {
		t.Errorf("Check of CONNECT 10.0.0.1:22: %v, want the port refusal naming connectPorts", err)
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
