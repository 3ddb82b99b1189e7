package squid

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
)

// echoAllow is the one http_access line the echo adds.
const echoAllow = "http_access allow serving_probe_client egress_echo_method egress_echo_proto egress_echo_port egress_echo_path egress_echo_host decided_egress_echo"

// TestConfig_EgressEcho: with ServingProbe, the echo's ACLs are written as
// its host (an address as itself, a name as written), port and exact path
// (a POSIX ERE, specials escaped), its allow line comes right after the
// serving probe's deny, and the real `squid -k parse` accepts each config
// without a warning. Without ServingProbe (a Pod) or without an echo,
// nothing of it is written.
func TestConfig_EgressEcho(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		want      []string
	}{
		{"IPv4 address host", "http://192.0.2.10:8080/ip?format=text", []string{
			"acl egress_echo_host dst -n 192.0.2.10/32", "acl egress_echo_port port 8080",
			`acl egress_echo_path urlpath_regex ^/ip\?format=text$`}},
		{"IPv6 address host", "http://[2001:db8::10]/ip", []string{
			"acl egress_echo_host dst -n 2001:db8::10/128", "acl egress_echo_port port 80",
			`acl egress_echo_path urlpath_regex ^/ip$`}},
		{"name host", "http://Echo.Example./", []string{
			"acl egress_echo_host dstdomain -n echo.example", "acl egress_echo_port port 80",
			`acl egress_echo_path urlpath_regex ^/$`}},
		{"path with a query", "http://echo.example:8081/v1.2/ip+x?f=[a],b~c&d=e:f", []string{
			"acl egress_echo_host dstdomain -n echo.example", "acl egress_echo_port port 8081",
			`acl egress_echo_path urlpath_regex ^/v1\.2/ip\+x\?f=\[a],b~c&d=e:f$`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := (&egress.Settings{EgressIPEcho: tc.url}).Policy()
			if dest.Echo().IsZero() {
				t.Fatalf("%s: no echo in the policy", tc.url)
			}
			sp := Params{Port: 3128, Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Destinations: dest,
				PidFile: "/tmp/p", CoredumpDir: "/tmp", ServingProbe: true}
			conf := Config(sp)
			lines := strings.Split(conf, "\n")
			for _, w := range append(tc.want, "acl egress_echo_method method GET", "acl egress_echo_proto proto HTTP",
				"acl decided_egress_echo annotate_transaction decision=allowed rule=egress-echo") {
				if !slices.Contains(lines, w) {
					t.Errorf("squid.conf lacks %q:\n%s", w, conf)
				}
			}
			if got := echoLines(conf); len(got) != len(tc.want)+3 {
				t.Errorf("echo ACLs %q, want one host, port, path, method, proto and annotation each", got)
			}
			rules := httpAccess(conf)
			if len(rules) < 3 || !strings.HasPrefix(rules[0], "http_access deny serving_probe_client serving_probe_host ") ||
				rules[1] != echoAllow || !strings.HasPrefix(rules[2], "http_access deny !allowed_clients ") {
				t.Errorf("http_access rules\n%s\nwant the echo's allow right after the serving probe's deny, before the clients' rule", strings.Join(rules, "\n"))
			}
			out, err := squidtest.Parse(t, conf)
			if err != nil {
				t.Fatalf("squid -k parse refused the config: %v\n%s", err, out)
			}
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "WARNING") || strings.Contains(l, "ERROR") {
					t.Errorf("squid -k parse: %s", l)
				}
			}
			// A Pod has no reporter; without an echo there is nothing to ask.
			sp.ServingProbe = false
			if conf := Config(sp); strings.Contains(conf, "egress_echo") {
				t.Errorf("without ServingProbe, the echo's ACLs:\n%s", conf)
			}
			sp.ServingProbe, sp.Destinations = true, egress.Default()
			if conf := Config(sp); strings.Contains(conf, "egress_echo") {
				t.Errorf("without an echo, the echo's ACLs:\n%s", conf)
			}
		})
	}
}

// echoLines are conf's acl lines for the echo.
func echoLines(conf string) []string {
	var out []string
	for _, l := range strings.Split(conf, "\n") {
		if strings.HasPrefix(l, "acl ") && strings.Contains(l, "egress_echo") {
			out = append(out, l)
		}
	}
	return out
}

// TestAccessModel_EgressEcho: the model of Squid reads a VM's config with
// an echo and decides the reporter's ask allowed by egress-echo, while a
// request that differs in its client, path, port, method, scheme or host
// is decided as without the echo, by the ordinary rules: refused, as the
// Go policy refuses the address. Loopback and 10.0.0.0/8 are admitted
// clients here, so those rules are reached.
func TestAccessModel_EgressEcho(t *testing.T) {
	loopback := netip.MustParseAddr("127.0.0.1")
	clients := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8")}
	for _, tc := range []struct {
		url   string
		addrs []netip.Addr // of the echo's host
	}{
		{"http://192.0.2.10:8080/ip?format=text", []netip.Addr{netip.MustParseAddr("192.0.2.10")}},
		{"http://[2001:db8::10]/ip", []netip.Addr{netip.MustParseAddr("2001:db8::10")}},
		{"http://echo.example:8081/ip?format=text", []netip.Addr{netip.MustParseAddr("10.9.9.9")}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			dest := (&egress.Settings{EgressIPEcho: tc.url}).Policy()
			e := dest.Echo()
			config := func(dest *egress.Policy) *squidtest.Access {
				a, err := squidtest.ParseAccess(Config(Params{Port: 3128, Clients: clients, Destinations: dest, ServingProbe: true}))
				if err != nil {
					t.Fatalf("the model cannot read the config: %v", err)
				}
				return a
			}
			with, without := config(dest), config(egress.Default())
			host := e.Host
			if e.Addr.Is6() {
				host = "[" + host + "]"
			}
			ask := squidtest.Request{Client: loopback, Method: "GET", Scheme: "http", Host: host, Port: e.Port, Path: e.Path, Addrs: tc.addrs}
			if allowed, notes := with.Decide(ask); !allowed || notes["decision"] != egress.DecisionAllowed || notes["rule"] != ruleEgressEcho {
				t.Errorf("the reporter's ask: allowed %v, notes %v; want allowed by %s", allowed, notes, ruleEgressEcho)
			}
			if allowed, notes := without.Decide(ask); allowed || notes["rule"] != egress.RuleAddress {
				t.Errorf("the reporter's ask without the echo: allowed %v, notes %v; want refused by %s", allowed, notes, egress.RuleAddress)
			}
			other := map[string]func(*squidtest.Request){
				"another client":   func(r *squidtest.Request) { r.Client = netip.MustParseAddr("10.1.2.3") },
				"loopback's other": func(r *squidtest.Request) { r.Client = netip.MustParseAddr("127.0.0.2") },
				"another path":     func(r *squidtest.Request) { r.Path = "/other" },
				"a longer path":    func(r *squidtest.Request) { r.Path = e.Path + "&x=1" },
				"the path inside":  func(r *squidtest.Request) { r.Path = "/x" + e.Path },
				"in capitals":      func(r *squidtest.Request) { r.Path = strings.ToUpper(e.Path) },
				"another port":     func(r *squidtest.Request) { r.Port = e.Port + 1 },
				"POST":             func(r *squidtest.Request) { r.Method = "POST" },
				"https":            func(r *squidtest.Request) { r.Scheme = "https" },
				"CONNECT":          func(r *squidtest.Request) { r.Connect, r.Scheme, r.Path, r.Method = true, "", "", "" },
				"another host":     func(r *squidtest.Request) { r.Host = "other.example" },
			}
			for _, name := range slices.Sorted(maps.Keys(other)) {
				r := ask
				other[name](&r)
				allowed, notes := with.Decide(r)
				wantAllowed, wantNotes := without.Decide(r)
				if allowed != wantAllowed || !maps.Equal(notes, wantNotes) {
					t.Errorf("%s: allowed %v by %v, without the echo %v by %v", name, allowed, notes, wantAllowed, wantNotes)
				}
				d := egress.Destination{Connect: r.Connect, Scheme: r.Scheme, Host: r.Host, Port: r.Port, Addrs: r.Addrs}
				if decision, rule := dest.Verdict(d); allowed || notes["decision"] != decision || notes["rule"] != rule {
					t.Errorf("%s: allowed %v by %v, the Go policy: %s by %s", name, allowed, notes, decision, rule)
				}
			}
		})
	}
}
