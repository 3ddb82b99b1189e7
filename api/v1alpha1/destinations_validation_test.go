package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"
)

// destinationsSpec is a Proxy spec with these destination rules.
func destinationsSpec(rules ...map[string]any) map[string]any {
	list := make([]any, len(rules))
	for i, r := range rules {
		list[i] = r
	}
	return map[string]any{"provider": "local", "destinations": list}
}

func domainsRule(domains ...string) map[string]any {
	return map[string]any{"domains": anys(domains)}
}

func cidrsRule(cidrs ...string) map[string]any {
	return map[string]any{"cidrs": anys(cidrs)}
}

func anys[T any](in []T) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

// longName is a valid name of exactly n characters (n >= 5), with labels
// of at most 63; tag makes names of one length differ.
func longName(n int, tag byte) string {
	var b strings.Builder
	for b.Len() < n {
		left := n - b.Len()
		if b.Len() > 0 {
			b.WriteByte('.')
			left--
		}
		size := min(63, left)
		if left-size == 1 { // a one-character rest would be a lone dot
			size--
		}
		label := strings.Repeat("a", size)
		if b.Len() == 0 {
			label = string(tag) + label[1:]
		}
		b.WriteString(label)
	}
	return b.String()
}

func TestDestinationsValidation(t *testing.T) {
	ns := newNamespace(t)
	tooManyRules := make([]map[string]any, 17)
	for i := range tooManyRules {
		tooManyRules[i] = domainsRule(fmt.Sprintf("r%d.example.com", i))
	}
	tooManyDomains := make([]string, 33)
	for i := range tooManyDomains {
		tooManyDomains[i] = fmt.Sprintf("d%d.example.com", i)
	}
	tooManyCIDRs := make([]string, 17)
	for i := range tooManyCIDRs {
		tooManyCIDRs[i] = fmt.Sprintf("203.0.113.%d/32", i)
	}
	tooManyPorts := make([]int, 17)
	for i := range tooManyPorts {
		tooManyPorts[i] = 8000 + i
	}
	label64 := strings.Repeat("a", 64) + ".example.com"

	const (
		needsDomainsOrCIDRs = "a rule needs domains or cidrs"
		wildcard            = "a wildcard is allowed only as a leading *."
		emptyLabel          = "has an empty label"
		singleLabel         = "needs at least two labels"
		hyphen              = "starts or ends with -"
		charset             = "may hold only a-z, 0-9, - and ."
		public              = "must be a public range: it overlaps"
	)
	d0 := "spec.destinations[0].domains[0]"
	c0 := "spec.destinations[0].cidrs[0]"
	tests := []struct {
		name string
		spec map[string]any
		want invalid
	}{
		// The rule and the list.
		{"rule with ports only", destinationsSpec(map[string]any{"ports": []any{443}}), invalid{"spec.destinations[0]", needsDomainsOrCIDRs}},
		{"empty rule", destinationsSpec(map[string]any{}), invalid{"spec.destinations[0]", needsDomainsOrCIDRs}},
		{"rule with empty lists", destinationsSpec(map[string]any{"domains": []any{}, "cidrs": []any{}, "ports": []any{443}}), invalid{"spec.destinations[0]", needsDomainsOrCIDRs}},
		{"second rule with ports only", destinationsSpec(domainsRule("api.example.com"), map[string]any{"ports": []any{443}}), invalid{"spec.destinations[1]", needsDomainsOrCIDRs}},
		{"17 rules", destinationsSpec(tooManyRules...), invalid{"spec.destinations", "Too many: 17: must have at most 16 items"}},

		// domains
		{"33 domains", destinationsSpec(domainsRule(tooManyDomains...)), invalid{"spec.destinations[0].domains", "Too many: 33: must have at most 32 items"}},
		{"duplicate domain", destinationsSpec(domainsRule("api.example.com", "api.example.com")), invalid{"spec.destinations[0].domains[1]", "Duplicate value"}},
		{"wildcard inside", destinationsSpec(domainsRule("api.*.example.com")), invalid{d0, wildcard}},
		{"wildcard without dot", destinationsSpec(domainsRule("*example.com")), invalid{d0, wildcard}},
		{"double wildcard", destinationsSpec(domainsRule("**.x.com")), invalid{d0, wildcard}},
		{"wildcard alone", destinationsSpec(domainsRule("*")), invalid{d0, wildcard}},
		{"wildcard after leading dot", destinationsSpec(domainsRule(".*.example.com")), invalid{d0, wildcard}},
		{"wildcard at index 2", destinationsSpec(domainsRule("a.example.com", "b.example.com", "*.*.example.com")), invalid{"spec.destinations[0].domains[2]", wildcard}},
		{"two dots in a row", destinationsSpec(domainsRule("a..b")), invalid{d0, emptyLabel}},
		{"a lone dot", destinationsSpec(domainsRule(".")), invalid{d0, emptyLabel}},
		{"two leading dots", destinationsSpec(domainsRule("..x")), invalid{d0, emptyLabel}},
		{"trailing dot", destinationsSpec(domainsRule("x.")), invalid{d0, emptyLabel}},
		{"absolute name", destinationsSpec(domainsRule("api.example.com.")), invalid{d0, emptyLabel}},
		{"wildcard of nothing", destinationsSpec(domainsRule("*.")), invalid{d0, emptyLabel}},
		{"label of 64", destinationsSpec(domainsRule(label64)), invalid{d0, "has a label longer than 63 characters"}},
		{"name of 254", destinationsSpec(domainsRule(longName(254, 'n'))), invalid{d0, "at most 253 characters"}},
		{"wildcard over 253", destinationsSpec(domainsRule("*." + longName(252, 'n'))), invalid{d0, "at most 253 characters"}},
		{"item of 255", destinationsSpec(domainsRule("." + longName(254, 'n'))), invalid{d0, "Too long: may not be more than 254"}},
		{"upper case", destinationsSpec(domainsRule("Example.com")), invalid{d0, "must be lower case: write example.com"}},
		{"non-ASCII", destinationsSpec(domainsRule("bücher.de")), invalid{d0, "must be ASCII: write an internationalised name in its punycode form"}},
		{"leading hyphen", destinationsSpec(domainsRule("-a.example.com")), invalid{d0, hyphen}},
		{"trailing hyphen", destinationsSpec(domainsRule("a-.example.com")), invalid{d0, hyphen}},
		{"hyphen after the prefix", destinationsSpec(domainsRule("*.-a.example.com")), invalid{d0, hyphen}},
		{"hyphen ends the name", destinationsSpec(domainsRule(".example.com-")), invalid{d0, hyphen}},
		{"underscore", destinationsSpec(domainsRule("a_b.example.com")), invalid{d0, charset}},
		{"space", destinationsSpec(domainsRule("a b.example.com")), invalid{d0, charset}},
		{"URL", destinationsSpec(domainsRule("https://api.example.com/")), invalid{d0, charset}},
		{"host and port", destinationsSpec(domainsRule("api.example.com:443")), invalid{d0, charset}},
		{"IPv6 literal", destinationsSpec(domainsRule("2001:db8::1")), invalid{d0, "is an IP address, which never matches a domain: list it in cidrs as 2001:db8::1/128"}},
		{"single label", destinationsSpec(domainsRule("localhost")), invalid{d0, singleLabel}},
		{"top-level domain", destinationsSpec(domainsRule(".com")), invalid{d0, singleLabel}},
		{"wildcard top-level domain", destinationsSpec(domainsRule("*.com")), invalid{d0, singleLabel}},
		{"IPv4 literal", destinationsSpec(domainsRule("1.2.3.4")), invalid{d0, "is an IP address, which never matches a domain: list it in cidrs as 1.2.3.4/32"}},
		{"all-digit last label", destinationsSpec(domainsRule("x.123")), invalid{d0, "ends in an all-digit label"}},
		{"all-digit last label under a wildcard", destinationsSpec(domainsRule("*.example.123")), invalid{d0, "ends in an all-digit label"}},
		{"domain in the second rule", destinationsSpec(cidrsRule("203.0.113.0/24"), domainsRule("ok.example.com", "Bad.example.com")), invalid{"spec.destinations[1].domains[1]", "write bad.example.com"}},

		// cidrs
		{"17 cidrs", destinationsSpec(cidrsRule(tooManyCIDRs...)), invalid{"spec.destinations[0].cidrs", "Too many: 17: must have at most 16 items"}},
		{"duplicate cidr", destinationsSpec(cidrsRule("203.0.113.0/24", "203.0.113.0/24")), invalid{"spec.destinations[0].cidrs[1]", "Duplicate value"}},
		{"not a CIDR", destinationsSpec(cidrsRule("203.0.113.0/24", "not-a-cidr")), invalid{"spec.destinations[0].cidrs[1]", "must be a CIDR"}},
		{"address without prefix", destinationsSpec(cidrsRule("203.0.113.7")), invalid{c0, "must be a CIDR"}},
		{"IPv4-mapped IPv6", destinationsSpec(cidrsRule("::ffff:0:0/96")), invalid{c0, "must be a CIDR"}},
		{"cidr of 44 chars", destinationsSpec(cidrsRule("2001:0db8:0000:0000:0000:0000:0000:0000/1280")), invalid{c0, "Too long"}},
		{"IPv4 /0", destinationsSpec(cidrsRule("0.0.0.0/0")), invalid{c0, "a /0 range is every address"}},
		{"IPv6 /0", destinationsSpec(cidrsRule("::/0")), invalid{c0, "a /0 range is every address"}},
		{"host bits set", destinationsSpec(cidrsRule("203.0.113.7/24")), invalid{c0, "write 203.0.113.0/24 for the whole range, or 203.0.113.7/32 for one host"}},
		{"IPv6 not lower case", destinationsSpec(cidrsRule("2001:DB8::/32")), invalid{c0, "write 2001:db8::/32"}},
		{"IPv6 not compressed", destinationsSpec(cidrsRule("2001:db8:0:0:0:0:0:0/32")), invalid{c0, "write 2001:db8::/32"}},
		{"this network", destinationsSpec(cidrsRule("0.0.0.0/8")), invalid{c0, public + " 0.0.0.0/8 (private, loopback, link-local, metadata or multicast); a provider entry's allowedDestinations opens internal ranges"}},
		{"private range", destinationsSpec(cidrsRule("10.0.0.0/8")), invalid{c0, public + " 10.0.0.0/8"}},
		{"inside a private range", destinationsSpec(cidrsRule("10.20.30.0/24")), invalid{c0, public + " 10.0.0.0/8"}},
		{"around a private range", destinationsSpec(cidrsRule("8.0.0.0/6")), invalid{c0, public + " 10.0.0.0/8"}},
		{"shared address space", destinationsSpec(cidrsRule("100.100.0.0/16")), invalid{c0, public + " 100.64.0.0/10"}},
		{"loopback", destinationsSpec(cidrsRule("127.0.0.1/32")), invalid{c0, public + " 127.0.0.0/8"}},
		{"metadata", destinationsSpec(cidrsRule("169.254.169.254/32")), invalid{c0, public + " 169.254.0.0/16"}},
		{"172.16/12 in part", destinationsSpec(cidrsRule("172.20.0.0/16")), invalid{c0, public + " 172.16.0.0/12"}},
		{"192.168/16", destinationsSpec(cidrsRule("192.168.1.0/24")), invalid{c0, public + " 192.168.0.0/16"}},
		{"multicast", destinationsSpec(cidrsRule("239.255.255.250/32")), invalid{c0, public + " 224.0.0.0/4"}},
		{"reserved", destinationsSpec(cidrsRule("255.255.255.255/32")), invalid{c0, public + " 240.0.0.0/4"}},
		{"upper half of IPv4", destinationsSpec(cidrsRule("128.0.0.0/1")), invalid{c0, public + " 169.254.0.0/16"}},
		{"IPv6 loopback", destinationsSpec(cidrsRule("::1/128")), invalid{c0, public + " ::1/128"}},
		{"IPv4-compatible", destinationsSpec(cidrsRule("::808:808/128")), invalid{c0, public + " ::/96"}},
		{"around IPv4-compatible", destinationsSpec(cidrsRule("::/64")), invalid{c0, public}},
		{"around IPv4-mapped", destinationsSpec(cidrsRule("::ff80:0:0/89")), invalid{c0, public + " ::ffff:0:0/96"}},
		{"IPv4-mapped's parent", destinationsSpec(cidrsRule("::fffe:0:0/95")), invalid{c0, public + " ::ffff:0:0/96"}},
		{"unique local (metadata)", destinationsSpec(cidrsRule("fd00:ec2::254/128")), invalid{c0, public + " fc00::/7"}},
		{"IPv6 link-local", destinationsSpec(cidrsRule("fe80::/64")), invalid{c0, public + " fe80::/10"}},
		{"IPv6 multicast", destinationsSpec(cidrsRule("ff02::1/128")), invalid{c0, public + " ff00::/8"}},
		{"IPv6 upper half", destinationsSpec(cidrsRule("2001:db8::/32", "8000::/1")), invalid{"spec.destinations[0].cidrs[1]", public + " fc00::/7"}},

		// ports
		{"port 0", destinationsSpec(map[string]any{"domains": []any{"api.example.com"}, "ports": []any{0}}), invalid{"spec.destinations[0].ports[0]", "greater than or equal to 1"}},
		{"port 65536", destinationsSpec(map[string]any{"domains": []any{"api.example.com"}, "ports": []any{443, 65536}}), invalid{"spec.destinations[0].ports[1]", "less than or equal to 65535"}},
		{"duplicate port", destinationsSpec(map[string]any{"domains": []any{"api.example.com"}, "ports": []any{443, 443}}), invalid{"spec.destinations[0].ports[1]", "Duplicate value"}},
		{"17 ports", destinationsSpec(map[string]any{"domains": []any{"api.example.com"}, "ports": anys(tooManyPorts)}), invalid{"spec.destinations[0].ports", "Too many: 17: must have at most 16 items"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := env.Client.Create(t.Context(), proxyObject(ns, fmt.Sprintf("bad-%02d", i), tt.spec))
			checkInvalid(t, err, tt.want)
		})
	}
}

func TestDestinationsAccepted(t *testing.T) {
	ns := newNamespace(t)
	sixteenRules := make([]map[string]any, 16)
	for i := range sixteenRules {
		sixteenRules[i] = domainsRule(fmt.Sprintf("r%d.example.com", i))
	}
	// The largest object the schema admits: every rule, domain, CIDR and
	// port at its limit, each domain at its longest. Accepted means the
	// rules stay within the API server's runtime cost budget too.
	largest := make([]map[string]any, 16)
	for r := range largest {
		domains := make([]string, 32)
		for d := range domains {
			domains[d] = "." + longName(253, byte('a'+d%26)) // 254 characters
			if d >= 26 {
				domains[d] = "." + longName(253, byte('0'+d-26))
			}
		}
		cidrs := make([]string, 16)
		for c := range cidrs {
			cidrs[c] = fmt.Sprintf("2606:4700:1234:5678:9abc:def0:%04x:%04x/128", 0x1000+r, 0x1000+c) // 43 characters
		}
		ports := make([]int, 16)
		for p := range ports {
			ports[p] = 60000 + p
		}
		largest[r] = map[string]any{"domains": anys(domains), "cidrs": anys(cidrs), "ports": anys(ports)}
	}

	tests := []struct {
		name string
		spec map[string]any
	}{
		{"exact name", destinationsSpec(domainsRule("api.partner.example"))},
		{"leading dot", destinationsSpec(domainsRule(".example.com"))},
		{"wildcard", destinationsSpec(domainsRule("*.example.com"))},
		{"punycode", destinationsSpec(domainsRule("xn--bcher-kva.de", "*.xn--bcher-kva.de"))},
		{"hyphens and digits inside", destinationsSpec(domainsRule("a-1.example.com", "1a.example.c0m", "x.123a"))},
		{"label of 63", destinationsSpec(domainsRule(strings.Repeat("a", 63) + ".example.com"))},
		{"name of 253, and under a leading dot", destinationsSpec(domainsRule(longName(253, 'a'), "."+longName(253, 'b'), "*."+longName(251, 'c')))},
		{"public IPv4 and IPv6", destinationsSpec(cidrsRule("203.0.113.0/24", "8.8.8.8/32", "2001:db8::/32", "2606:4700::/32"))},
		{"neighbours of refused ranges", destinationsSpec(cidrsRule("11.0.0.0/8", "100.128.0.0/9", "172.32.0.0/11", "223.255.255.0/24", "::1:0:0:0/80", "::fffe:0:0/96", "fe00::/9"))},
		{"ports 443 and 8443", destinationsSpec(map[string]any{"domains": []any{"api.example.com"}, "ports": []any{443, 8443}})},
		{"ports 1 and 65535", destinationsSpec(map[string]any{"cidrs": []any{"203.0.113.0/24"}, "ports": []any{1, 65535}})},
		{"only cidrs", destinationsSpec(cidrsRule("203.0.113.0/24"))},
		{"only domains", destinationsSpec(domainsRule("api.example.com"))},
		{"domains and cidrs", destinationsSpec(map[string]any{"domains": []any{"api.example.com"}, "cidrs": []any{"203.0.113.0/24"}, "ports": []any{443}})},
		{"16 rules", destinationsSpec(sixteenRules...)},
		{"largest", destinationsSpec(largest...)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := env.Client.Create(t.Context(), proxyObject(ns, fmt.Sprintf("good-%02d", i), tt.spec)); err != nil {
				t.Fatalf("refused: %s", shorten(err.Error()))
			}
		})
	}
}
