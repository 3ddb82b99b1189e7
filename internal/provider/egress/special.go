package egress

import "net/netip"

// The ranges a proxy refuses by default are the rows of IANA's two
// special-purpose address registries whose "Globally Reachable" column is
// False (or N/A, for deprecated and transition blocks), plus multicast and
// the IPv6 forms that carry an IPv4 address. Rows marked True that lie inside
// a refused row (the anycast addresses inside 192.0.0.0/24 and 2001::/23)
// are exceptions carved out of it, as the registry says.
//
// Sources, as of their 2025 revisions:
//   - IPv4: https://www.iana.org/assignments/iana-ipv4-special-registry
//   - IPv6: https://www.iana.org/assignments/iana-ipv6-special-registry
//   - multicast: RFC 5771 (IPv4 224.0.0.0/4), RFC 4291 section 2.7 (ff00::/8)
//
// One table: the Squid generator renders what Policy computes from it, and
// the local provider checks against the same computation.

// specialRow is one row of a registry: its block, its name in the registry,
// the RFC that assigned it and whether the registry marks it globally
// reachable.
type specialRow struct {
	block     string
	name      string
	rfc       string
	reachable bool
}

var ipv4Special = []specialRow{
	{"0.0.0.0/8", `"This network" (0.0.0.0 reaches the proxy's own host)`, "RFC 791", false},
	{"0.0.0.0/32", `"This host on this network"`, "RFC 1122", false},
	{"10.0.0.0/8", "private-use", "RFC 1918", false},
	{"100.64.0.0/10", "shared address space (carrier-grade NAT and some clusters)", "RFC 6598", false},
	{"127.0.0.0/8", "loopback", "RFC 1122", false},
	{"169.254.0.0/16", "link-local (cloud metadata at 169.254.169.254)", "RFC 3927", false},
	{"172.16.0.0/12", "private-use", "RFC 1918", false},
	{"192.0.0.0/24", "IETF protocol assignments", "RFC 6890", false},
	{"192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335", false},
	{"192.0.0.8/32", "IPv4 dummy address", "RFC 7600", false},
	{"192.0.0.9/32", "Port Control Protocol anycast", "RFC 7723", true},
	{"192.0.0.10/32", "TURN anycast", "RFC 8155", true},
	{"192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 8880", false},
	{"192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 8880", false},
	{"192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737", false},
	{"192.31.196.0/24", "AS112-v4", "RFC 7535", true},
	{"192.52.193.0/24", "AMT", "RFC 7450", true},
	{"192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526", false},
	{"192.168.0.0/16", "private-use", "RFC 1918", false},
	{"192.175.48.0/24", "direct delegation AS112 service", "RFC 7534", true},
	{"198.18.0.0/15", "benchmarking", "RFC 2544", false},
	{"198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737", false},
	{"203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737", false},
	{"240.0.0.0/4", "reserved", "RFC 1112", false},
	{"255.255.255.255/32", "limited broadcast", "RFC 919", false},
	// Not in the special-purpose registry: multicast has its own.
	{"224.0.0.0/4", "multicast", "RFC 5771", false},
}

// The IPv6 registry's ::ffff:0:0/96 (IPv4-mapped) is left out on purpose:
// both enforcements check a mapped address as the IPv4 address it carries
// (Squid keeps every IPv4 address in that form, so a rule on the /96 would
// refuse all of IPv4). 64:ff9b::/96 (NAT64, globally reachable) is listed
// under ipv4Embedding instead.
var ipv6Special = []specialRow{
	{"::1/128", "loopback", "RFC 4291", false},
	{"::/128", "unspecified ([::] reaches the proxy's own host)", "RFC 4291", false},
	{"64:ff9b:1::/48", "local-use IPv4/IPv6 translation", "RFC 8215", false},
	{"100::/64", "discard-only", "RFC 6666", false},
	{"100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780", false},
	{"2001::/23", "IETF protocol assignments", "RFC 2928", false},
	{"2001:1::1/128", "Port Control Protocol anycast", "RFC 7723", true},
	{"2001:1::2/128", "TURN anycast", "RFC 8155", true},
	{"2001:1::3/128", "DNS-SD service registration protocol anycast", "RFC 9665", true},
	{"2001:2::/48", "benchmarking", "RFC 5180", false},
	{"2001:3::/32", "AMT", "RFC 7450", true},
	{"2001:4:112::/48", "AS112-v6", "RFC 7535", true},
	{"2001:10::/28", "deprecated ORCHID", "RFC 4843", false},
	{"2001:20::/28", "ORCHIDv2", "RFC 7343", true},
	{"2001:30::/28", "drone remote ID entity tags", "RFC 9374", true},
	{"2001:db8::/32", "documentation", "RFC 3849", false},
	{"2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534", true},
	{"3fff::/20", "documentation", "RFC 9637", false},
	{"5f00::/16", "segment routing (SRv6) SIDs", "RFC 9602", false},
	{"fc00::/7", "unique local (cloud metadata at fd00:ec2::254)", "RFC 4193", false},
	{"fe80::/10", "link-local", "RFC 4291", false},
	{"ff00::/8", "multicast", "RFC 4291", false},
}

// ipv4Embedding are the IPv6 blocks whose addresses carry an IPv4 address:
// a proxy connecting to one may reach that IPv4 address through a
// translator, so each is refused whole by default (2001::/32, Teredo, lies
// inside 2001::/23 above and is refused with it). NAT64's well-known
// prefix can be opened per entry (Settings.AllowNAT64), and then each of
// its addresses is checked as the IPv4 address it carries.
var ipv4Embedding = []specialRow{
	{"::/96", "IPv4-compatible IPv6 (deprecated; carries an IPv4 address)", "RFC 4291", false},
	{"::ffff:0:0:0/96", "IPv4-translated IPv6 (carries an IPv4 address)", "RFC 2765", false},
	{"2002::/16", "6to4 (carries an IPv4 address)", "RFC 3056", false},
	// The registry marks it globally reachable; it is refused here because
	// a translator turns it into any IPv4 address, internal ones included.
	{nat64Block.String(), "NAT64 (carries an IPv4 address; an entry may allow it with allowNAT64)", "RFC 6052", false},
}

// nat64Block is NAT64's well-known prefix; an address in it ends with the
// IPv4 address it translates to.
var nat64Block = netip.MustParsePrefix("64:ff9b::/96")

// mappedBlock holds the IPv4-mapped IPv6 addresses, checked as IPv4.
var mappedBlock = netip.MustParsePrefix("::ffff:0:0/96")

// registryRanges are the refused rows and the reachable rows (exceptions)
// of the tables, parsed. A reachable row is an exception only where a
// refused row holds it; elsewhere it is simply not refused.
func registryRanges() (refused, reachable []Range) {
	for _, table := range [][]specialRow{ipv4Special, ipv6Special, ipv4Embedding} {
		for _, r := range table {
			rg := Range{Prefix: netip.MustParsePrefix(r.block), Why: r.name + ", " + r.rfc}
			if r.reachable {
				reachable = append(reachable, rg)
			} else {
				refused = append(refused, rg)
			}
		}
	}
	return refused, reachable
}

// embedNAT64 is the NAT64 form of an IPv4 prefix: the prefix's address in
// the last 32 bits of 64:ff9b::/96.
func embedNAT64(p netip.Prefix) netip.Prefix {
	b := nat64Block.Addr().As16()
	v4 := p.Addr().As4()
	copy(b[12:], v4[:])
	return netip.PrefixFrom(netip.AddrFrom16(b), 96+p.Bits())
}
