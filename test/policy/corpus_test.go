package policy

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// The namespace's addresses. The entry policies below allow 198.51.100.0/24
// and 2001:db8:1::/48 (documentation ranges, refused by default, opened as
// an admin's exception would open an internal service); everything else
// here is refused.
const (
	nameserver = "127.0.0.53"

	allowed4     = "198.51.100.5"
	allowed4Dead = "198.51.100.6" // allowed, nothing listens: connections are refused
	allowed6     = "2001:db8:1::5"
	loop4        = "127.0.0.7"
	doc4         = "192.0.2.7"
	loop6        = "::1"
	doc6         = "2001:db8:2::7"
	nat64Allowed = "64:ff9b::c633:6405" // carries 198.51.100.5
	nat64Loop    = "64:ff9b::7f00:7"    // carries 127.0.0.7

	plainPort   = 8080
	connectPort = 8443
)

// onLoopback are put on the namespace's lo (127.0.0.0/8 and ::1 are there).
var onLoopback = []string{allowed4 + "/32", allowed4Dead + "/32", allowed6 + "/128", doc4 + "/32", doc6 + "/128",
	nat64Allowed + "/128", nat64Loop + "/128"}

// catchAddrs have a catch server on the plain and the connect port.
var catchAddrs = []string{allowed4, allowed6, loop4, doc4, loop6, doc6, nat64Allowed, nat64Loop}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// names are what the test's DNS server answers; a name not here is
// NXDOMAIN. localhost comes from the hosts file, as 127.0.0.1 and ::1.
var names = map[string][]netip.Addr{
	"a.test":              addrs(allowed4),
	"a6.test":             addrs(allowed6),
	"both.test":           addrs(allowed4, allowed6),
	"dead.test":           addrs(allowed4Dead),
	"loop.test":           addrs(loop4),
	"doc.test":            addrs(doc4),
	"doc6.test":           addrs(doc6),
	"mixed.test":          addrs(allowed4, loop4),
	"mixed-refusing.test": addrs(allowed4Dead, loop4), // the allowed address refuses: a proxy that falls back reaches loopback
	"mixed6.test":         addrs(allowed4, loop6),
	"mixed-doc.test":      addrs(allowed6, doc4),
	"n64.test":            addrs(nat64Allowed),
	"n64-loop.test":       addrs(nat64Loop),
	"mapped.test":         addrs("::ffff:" + loop4),
	"empty.test":          nil, // the name exists, with no address
	"sub.test":            addrs(allowed4),
	"x.sub.test":          addrs(allowed4),
	"x.both.test":         addrs(allowed4, allowed6),
}

// answers is what a proxy learns of host's addresses: an IP literal's own,
// the hosts file's or the DNS server's answers; none for a name that does
// not resolve.
func answers(host string) []netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}
	}
	if host == "localhost" {
		return addrs("127.0.0.1", "::1")
	}
	return names[strings.TrimSuffix(strings.ToLower(host), ".")]
}

// targets are the hosts the corpus asks for: IPv4, IPv6, IPv4-mapped,
// NAT64 and IPv4-compatible literals, and names with single, mixed, empty
// and no answers.
var targets = []string{
	allowed4, allowed6, loop4, doc4, loop6, doc6, "::ffff:" + loop4, "::ffff:" + allowed4, nat64Allowed, nat64Loop,
	"::7f00:7", "0.0.0.0",
	"a.test", "A.Test", "a6.test", "both.test", "dead.test", "loop.test", "doc.test", "doc6.test",
	"mixed.test", "mixed-refusing.test", "mixed6.test", "mixed-doc.test",
	"n64.test", "n64-loop.test", "mapped.test", "empty.test", "nx.test", "localhost",
	"a.test.", "sub.test", "x.sub.test", "X.Sub.Test", "x.both.test",
}

// probe is one request of the corpus.
type probe struct {
	connect bool
	scheme  string // plain requests
	host    string
	port    uint16
}

func (p probe) String() string {
	if p.connect {
		return "CONNECT " + net.JoinHostPort(p.host, fmt.Sprint(p.port))
	}
	return fmt.Sprintf("GET %s://%s/", p.scheme, net.JoinHostPort(p.host, fmt.Sprint(p.port)))
}

// corpus is every target in both forms on its port, and the port and
// scheme cases on an allowed name.
func corpus() []probe {
	var out []probe
	for _, h := range targets {
		out = append(out, probe{scheme: "http", host: h, port: plainPort}, probe{connect: true, host: h, port: connectPort})
	}
	return append(out,
		probe{scheme: "http", host: "a.test", port: 25},
		probe{scheme: "http", host: "a.test", port: 22},
		probe{scheme: "http", host: "a.test", port: 1024},
		probe{connect: true, host: "a.test", port: plainPort},
		probe{connect: true, host: "a.test", port: 22},
		probe{scheme: "ftp", host: "a.test", port: plainPort},
		probe{scheme: "gopher", host: "a.test", port: plainPort},
	)
}

// policies are the entry policies the corpus runs under, the last narrowed
// by a Proxy's destination rules.
var policies = []struct {
	name     string
	settings egress.Settings
	rules    []egress.DestinationRule
}{
	{"exceptions", egress.Settings{AllowedDestinations: []string{"198.51.100.0/24", "2001:db8:1::/48"}, ConnectPorts: []int32{443, connectPort}}, nil},
	{"exceptions and NAT64", egress.Settings{AllowedDestinations: []string{"198.51.100.0/24", "2001:db8:1::/48"}, ConnectPorts: []int32{443, connectPort}, AllowNAT64: true}, nil},
	{"nothing allowed", egress.Settings{ConnectPorts: []int32{connectPort}}, nil},
	{"exceptions, narrowed by a Proxy's rules", egress.Settings{AllowedDestinations: []string{"198.51.100.0/24", "2001:db8:1::/48"}, ConnectPorts: []int32{443, connectPort}},
		[]egress.DestinationRule{
			{Domains: []string{"a.test", ".both.test", "*.sub.test"}, Ports: []int32{plainPort, connectPort}},
			{CIDRs: []string{allowed4 + "/32"}, Ports: []int32{connectPort}},
			{Domains: []string{"a6.test"}, CIDRs: []string{"2001:db8:1::/64"}, Ports: []int32{plainPort}},
		}},
}
