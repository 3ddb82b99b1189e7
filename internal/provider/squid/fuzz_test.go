package squid

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
)

// directives are every squid.conf directive Config writes.
var directives = []string{"http_port", "acl", "http_access", "cache", "cache_mem", "logformat", "access_log", "cache_log",
	"cache_store_log", "netdb_filename", "pinger_enable", "logfile_rotate", "pid_filename", "coredump_dir",
	"cache_effective_user", "forwarded_for", "shutdown_lifetime", "httpd_suppress_version_string",
	"visible_hostname", "reply_header_access", "request_header_access"}

// wantAccess are the http_access rules, in order, whatever the inputs.
var wantAccess = []string{"http_access deny !allowed_clients decided_client_ranges",
	"http_access deny !CONNECT !web_protos decided_scheme", "http_access deny CONNECT !connect_ports decided_port",
	"http_access deny !CONNECT !safe_ports decided_port", "http_access deny manager decided_manager",
	"http_access deny !resolved_destinations decided_unresolved", "http_access deny refused_destinations decided_address",
	"http_access allow allowed_clients decided_entry", "http_access deny all decided_destinations"}

// FuzzConfig renders squid.conf from what reaches it from outside: a
// Proxy's port and client ranges, an entry's allowedDestinations,
// connectPorts and (kubernetes) clusterCIDRs, each list comma-separated and
// parsed and validated as the providers do. Whatever they hold, every line
// is a comment, blank or one of Config's own directives (no input breaks a
// directive across lines), the client ranges and the policy's refused set
// are written as asked, nothing ever says "http_access allow all", and the
// access rules are the fixed sequence ending in "http_access deny all"
// (each line annotated with what it decides, for the access log),
// before the trailing settings.
func FuzzConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, port int32, clientList, allowedList, connectList, clusterList string) {
		clients := parsed(clientList)
		settings, ok := fuzzSettings(allowedList, connectList, false)
		if !ok {
			return // the registry refuses such an entry
		}
		policy := settings.Policy(clusterRanges(clusterList)...)
		conf := Config(Params{Port: port, Clients: clients, Destinations: policy, PidFile: "/run/squid.pid", CoredumpDir: "/var/spool/squid"})

		if !strings.HasSuffix(conf, "\n") {
			t.Fatalf("squid.conf does not end in a newline:\n%s", conf)
		}
		lines := strings.Split(strings.TrimSuffix(conf, "\n"), "\n")
		var access, srcs, refused []string
		var connect string
		lastAccess, firstTrailing := -1, -1
		for i, l := range lines {
			if l == "" || strings.HasPrefix(l, "# ") {
				continue
			}
			word, rest, _ := strings.Cut(l, " ")
			if !slices.Contains(directives, word) {
				t.Fatalf("line %d %q is no directive Config writes:\n%s", i+1, l, conf)
			}
			switch {
			case word == "http_access":
				access = append(access, l)
				lastAccess = i
			case word != "acl" && word != "http_port" && firstTrailing < 0:
				firstTrailing = i
			}
			if v, ok := strings.CutPrefix(rest, "allowed_clients src "); ok {
				srcs = append(srcs, v)
			}
			if v, ok := strings.CutPrefix(rest, "refused_destinations dst "); ok {
				refused = append(refused, strings.Fields(v)...)
			}
			if v, ok := strings.CutPrefix(rest, "connect_ports port "); ok {
				connect = v
			}
		}
		if !slices.Equal(access, wantAccess) {
			t.Fatalf("http_access rules %q, want %q:\n%s", access, wantAccess, conf)
		}
		if firstTrailing < lastAccess {
			t.Fatalf("a setting (line %d) comes before the last http_access (line %d):\n%s", firstTrailing+1, lastAccess+1, conf)
		}
		wantSrcs := strs(clients)
		if len(clients) == 0 {
			wantSrcs = []string{"127.0.0.1/32", "::1/128"}
		}
		if err := sameRanges(srcs, wantSrcs); err != nil {
			t.Fatalf("allowed_clients %q for %q: %v", srcs, wantSrcs, err)
		}
		var wantRefused []string
		for _, r := range policy.Refused() {
			wantRefused = append(wantRefused, r.Prefix.String())
		}
		slices.Sort(refused)
		slices.Sort(wantRefused)
		if !slices.Equal(refused, wantRefused) {
			t.Fatalf("refused_destinations %q, want the policy's refused set %q", refused, wantRefused)
		}
		var wantConnect []string
		for _, p := range policy.ConnectPorts() {
			if p == 0 {
				t.Fatalf("connect port 0 from %q", connectList)
			}
			wantConnect = append(wantConnect, fmt.Sprint(p))
		}
		if connect != strings.Join(wantConnect, " ") {
			t.Fatalf("connect_ports %q, want %q", connect, wantConnect)
		}
	})
}

// FuzzDecisionsAgree feeds one policy and one request to both decision
// functions: the Go policy the local provider calls (egress.Policy.Decide)
// and the generated squid.conf's http_access rules, evaluated by the model
// of Squid (squidtest.Access) that the differential test in test/policy
// checks against the real Squid. The request's addresses come from the
// bytes of addrs, four or sixteen at a time (a first byte below 0x80 takes
// four), so IPv4, IPv6, mapped and NAT64 forms all occur; an empty list is
// a name that does not resolve.
func FuzzDecisionsAgree(f *testing.F) {
	f.Add("10.20.0.0/16", "443,8443", true, true, "", "mixed.example", "", "", "", uint16(443), []byte{0x0a, 0x14, 0, 5, 0x7f, 0, 0, 1})
	f.Add("", "", false, false, "http", "gone.example", "", "", "", uint16(80), []byte{})
	f.Add("127.0.0.5/32", "", false, false, "http", "127.0.0.5", "", "", "", uint16(8080), []byte{0x7f, 0, 0, 5})
	f.Add("", "", true, false, "http", "n64.example", "", "", "", uint16(80), append([]byte{0xff}, netip.MustParseAddr("64:ff9b::7f00:1").AsSlice()...))
	f.Add("fd00:1::/64", "", false, true, "", "m.example", "", "", "", uint16(443), append([]byte{0xff}, netip.MustParseAddr("::ffff:127.0.0.1").AsSlice()...))
	f.Add("", "", false, false, "ftp", "f.example", "", "", "", uint16(21), []byte{0x0b, 0, 0, 1})
	f.Add("", "", false, true, "", "api.partner.example", "api.partner.example", "", "443", uint16(443), []byte{0x0b, 0, 0, 1})
	f.Add("", "", false, true, "", "API.Partner.Example.", ".partner.example,*.cdn.example", "", "443", uint16(443), []byte{0x0b, 0, 0, 1})
	f.Add("", "", false, false, "http", "x.cdn.example", "*.cdn.example", "11.0.0.0/8", "80,8080", uint16(8080), []byte{0x0b, 0, 0, 1, 0x0c, 0, 0, 1})
	f.Add("", "", false, true, "", "11.2.3.4", "partner.example", "11.0.0.0/8", "", uint16(443), []byte{0x0b, 2, 3, 4})
	f.Add("", "", false, true, "", "2a00:1450::1", "", "2a00:1450::/32", "443", uint16(443), append([]byte{0xff}, netip.MustParseAddr("2a00:1450::1").AsSlice()...))
	f.Fuzz(func(t *testing.T, allowedList, connectList string, nat64, connect bool, scheme, host, domainList, cidrList, rulePortList string, port uint16, addrs []byte) {
		settings, ok := fuzzSettings(allowedList, connectList, nat64)
		if !ok {
			return
		}
		entry := settings.Policy(clusterRanges("10.96.0.0/12")...)
		var rules []egress.DestinationRule
		if domainList != "" || cidrList != "" {
			rule := egress.DestinationRule{Domains: split(domainList), CIDRs: split(cidrList)}
			for _, s := range split(rulePortList) {
				if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32); err == nil {
					rule.Ports = append(rule.Ports, int32(n))
				}
			}
			rules = append(rules, rule)
		}
		parsedRules, errs := entry.ParseRules(rules, field.NewPath("destinations"))
		if len(errs) > 0 {
			return // the API server or the provider refuses such a Proxy
		}
		policy := entry.Narrow(parsedRules)
		client := netip.MustParseAddr("127.0.0.2")
		conf := Config(Params{Port: 3128, Clients: []netip.Prefix{netip.PrefixFrom(client, 32)}, Destinations: policy,
			PidFile: "/run/squid.pid", CoredumpDir: "/var/spool/squid"})
		access, err := squidtest.ParseAccess(conf)
		if err != nil {
			t.Fatalf("the model cannot read the generated config: %v\n%s", err, conf)
		}
		// Schemes reach the policy lower-cased, as both proxies parse them.
		scheme = strings.ToLower(scheme)
		dst := egress.Destination{Connect: connect, Scheme: scheme, Host: host, Port: port, Addrs: addrsFrom(addrs)}
		if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			dst.Addrs = []netip.Addr{a} // an IP literal is its own address
		}
		goSays := policy.Decide(dst)
		squidSays, notes := access.Decide(squidtest.Request{Client: client, Connect: connect, Scheme: scheme, Host: host, Port: port, Addrs: dst.Addrs})
		if (goSays == nil) != squidSays {
			t.Fatalf("%+v with %+v and rules %+v: the Go policy says %v, Squid's rules say allowed=%t", dst, settings, rules, goSays, squidSays)
		}
		// What decided, as each access log writes it.
		if decision, rule := policy.Verdict(dst); notes["decision"] != decision || notes["rule"] != rule {
			t.Fatalf("%+v with %+v and rules %+v: the Go policy logs %s by %s, Squid's annotations %s by %s",
				dst, settings, rules, decision, rule, notes["decision"], notes["rule"])
		}
		// A client outside allowed_clients is refused whatever it asks.
		if access.Allows(squidtest.Request{Client: netip.MustParseAddr("127.0.0.3"), Connect: connect, Scheme: scheme, Host: host, Port: port, Addrs: dst.Addrs}) {
			t.Fatalf("%+v: Squid's rules let a client outside allowed_clients through", dst)
		}
	})
}

// fuzzSettings is an entry's destination block from comma-separated lists,
// and whether Validate accepts it.
func fuzzSettings(allowedList, connectList string, nat64 bool) (egress.Settings, bool) {
	var ports []int32
	for _, s := range split(connectList) {
		if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32); err == nil {
			ports = append(ports, int32(n))
		}
	}
	settings := egress.Settings{AllowedDestinations: split(allowedList), ConnectPorts: ports, AllowNAT64: nat64}
	return settings, len(settings.Validate(field.NewPath("x"))) == 0
}

func clusterRanges(list string) []egress.Range {
	var extra []egress.Range
	for _, p := range parsed(list) {
		extra = append(extra, egress.Range{Prefix: p, Why: "the cluster's Service or Pod range (clusterCIDRs)"})
	}
	return extra
}

// addrsFrom reads addresses from b: a first byte below 0x80 starts an IPv4
// address (those four bytes), any other starts an IPv6 one (the sixteen
// after it). A short tail is dropped.
func addrsFrom(b []byte) []netip.Addr {
	var out []netip.Addr
	for len(b) > 0 {
		if b[0] < 0x80 {
			if len(b) < 4 {
				break
			}
			out = append(out, netip.AddrFrom4([4]byte(b[:4])))
			b = b[4:]
			continue
		}
		if len(b) < 17 {
			break
		}
		out = append(out, netip.AddrFrom16([16]byte(b[1:17])))
		b = b[17:]
	}
	return out
}

// sameRanges checks an ACL's written ranges against the ones asked for:
// written in the order asked, each one asked for, every asked range
// inside a written one (the ACL matches the same addresses), and none
// inside another written one (Squid would warn and ignore one of them).
func sameRanges(written, asked []string) error {
	var ws []netip.Prefix
	last := -1
	for _, w := range written {
		i := slices.Index(asked, w)
		if i < 0 {
			return fmt.Errorf("%s was not asked for", w)
		}
		if i < last {
			return fmt.Errorf("%s is out of the asked order", w)
		}
		last = i
		ws = append(ws, netip.MustParsePrefix(w))
	}
	for _, a := range asked {
		p := netip.MustParsePrefix(a)
		if !slices.ContainsFunc(ws, func(w netip.Prefix) bool { return w.Bits() <= p.Bits() && w.Contains(p.Addr()) }) {
			return fmt.Errorf("%s is inside no written range", a)
		}
	}
	for i, p := range ws {
		for j, q := range ws {
			if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
				return fmt.Errorf("%s is inside %s, both written", p, q)
			}
		}
	}
	return nil
}

func split(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// parsed are the canonical ranges in list, as the providers admit them.
func parsed(list string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range split(list) {
		if p, err := egress.ParseCanonical(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func strs(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}
