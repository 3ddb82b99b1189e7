package egress

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParseEcho(t *testing.T) {
	for _, tc := range []struct {
		in       string
		want     Echo
		hostPort string
	}{
		{"http://checkip.example/", Echo{Host: "checkip.example", Port: 80, Path: "/"}, "checkip.example"},
		{"http://checkip.example", Echo{Host: "checkip.example", Port: 80, Path: "/"}, "checkip.example"},
		{"http://192.0.2.1:8080/ip?format=text", Echo{Host: "192.0.2.1", Addr: netip.MustParseAddr("192.0.2.1"), Port: 8080, Path: "/ip?format=text"}, "192.0.2.1:8080"},
		{"http://[2001:db8::1]/", Echo{Host: "2001:db8::1", Addr: netip.MustParseAddr("2001:db8::1"), Port: 80, Path: "/"}, "[2001:db8::1]"},
		{"http://[2001:db8::1]:81/a", Echo{Host: "2001:db8::1", Addr: netip.MustParseAddr("2001:db8::1"), Port: 81, Path: "/a"}, "[2001:db8::1]:81"},
	} {
		got, err := ParseEcho(tc.in, field.NewPath("egressIPEcho"))
		if err != nil {
			t.Errorf("ParseEcho(%q): %v", tc.in, err)
			continue
		}
		tc.want.URL = tc.in
		if got != tc.want {
			t.Errorf("ParseEcho(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if hp := got.HostPort(); hp != tc.hostPort {
			t.Errorf("ParseEcho(%q).HostPort() = %q, want %q", tc.in, hp, tc.hostPort)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"https://checkip.example/", "must be an http:// URL"},
		{"ftp://checkip.example/", "must be an http:// URL"},
		{"http://user:pw@checkip.example/", "may hold only"},
		{"http://checkip.example/ x", "may hold only"},
		{"http://checkip.example/'", "may hold only"},
		{"http://checkip.example/$(id)", "may hold only"},
		{"http://checkip.example/a#b", "may hold only"},
		{"http:///path", "names no host"},
		{"http://checkip.example:0/", "port must be 1-65535"},
		{"http://checkip.example:70000/", "port must be 1-65535"},
		{"http://" + strings.Repeat("a", 200) + "/", "longer than 200"},
		{"checkip.example", "must be an http:// URL"},
	} {
		_, err := ParseEcho(tc.in, field.NewPath("egressIPEcho"))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "egressIPEcho") {
			t.Errorf("ParseEcho(%q) = %v, want an error naming egressIPEcho that says %q", tc.in, err, tc.want)
		}
	}
	if e, err := ParseEcho("", nil); err != nil || !e.IsZero() {
		t.Errorf(`ParseEcho("") = %+v, %v; want no echo`, e, err)
	}
	p := (&Settings{EgressIPEcho: "http://192.0.2.1:8080/"}).Policy()
	if p.Echo().Port != 8080 || p.Narrow(nil).Echo().Port != 8080 {
		t.Errorf("Policy.Echo() = %+v, and narrowed %+v: want the entry's echo", p.Echo(), p.Narrow(nil).Echo())
	}
}
