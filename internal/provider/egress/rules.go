package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DestinationRule is one of a Proxy's destination rules
// (spec.destinations[i]) as the providers receive it: a request matches
// when its host matches one of Domains, or every address of its host is in
// CIDRs, and its port is one of Ports (empty: any port the entry allows).
type DestinationRule struct {
	Domains []string `json:"domains,omitempty"`
	CIDRs   []string `json:"cidrs,omitempty"`
	Ports   []int32  `json:"ports,omitempty"`
}

// Rule is a DestinationRule parsed.
type Rule struct {
	// Names match exactly; Suffixes match the name and every name under
	// it (".example.com" is "example.com" here); Under matches every name
	// under it, not the name itself ("*.example.com" is "example.com").
	Names, Suffixes, Under []string
	CIDRs                  []netip.Prefix
	Ports                  []uint16
}

// ParseRules parses a Proxy's rules against the entry's policy; every error
// names its field under path (path[i].domains[j], ...). The API server
// refuses malformed rules already; this repeats the checks that matter for
// the decision, and adds the one only the entry can answer: a CIDR the
// entry refuses would widen its policy, so it is refused here.
func (p *Policy) ParseRules(rules []DestinationRule, path *field.Path) ([]Rule, field.ErrorList) {
	var errs field.ErrorList
	out := make([]Rule, 0, len(rules))
	for i, r := range rules {
		rp := path.Index(i)
		var rule Rule
		if len(r.Domains) == 0 && len(r.CIDRs) == 0 {
			errs = append(errs, field.Required(rp, "a rule needs domains or cidrs"))
		}
		for j, d := range r.Domains {
			name, form, err := parseDomain(d)
			if err != nil {
				errs = append(errs, field.Invalid(rp.Child("domains").Index(j), d, err.Error()))
				continue
			}
			switch form {
			case '=':
				rule.Names = append(rule.Names, name)
			case '.':
				rule.Suffixes = append(rule.Suffixes, name)
			case '*':
				rule.Under = append(rule.Under, name)
			}
		}
		prefixes, cerrs := ParseRanges(r.CIDRs, rp.Child("cidrs"))
		errs = append(errs, cerrs...)
		for j, pfx := range prefixes {
			if !pfx.IsValid() {
				continue
			}
			for _, refused := range p.refused {
				if refused.Prefix.Overlaps(pfx) {
					errs = append(errs, field.Invalid(rp.Child("cidrs").Index(j), r.CIDRs[j], fmt.Sprintf(
						"overlaps %s (%s), which the provider entry refuses: a Proxy narrows the entry's policy, never widens it",
						refused.Prefix, refused.Why)))
					break
				}
			}
			rule.CIDRs = append(rule.CIDRs, pfx)
		}
		for j, port := range r.Ports {
			if port < 1 || port > 65535 {
				errs = append(errs, field.Invalid(rp.Child("ports").Index(j), port, "must be a TCP port, 1-65535"))
				continue
			}
			rule.Ports = append(rule.Ports, uint16(port))
		}
		out = append(out, rule)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// parseDomain returns a domain rule's name and its form: '=' exact, '.'
// the name and every name under it, '*' every name under it.
func parseDomain(d string) (string, byte, error) {
	form, name := byte('='), d
	if rest, ok := strings.CutPrefix(d, "*."); ok {
		form, name = '*', rest
	} else if rest, ok := strings.CutPrefix(d, "."); ok {
		form, name = '.', rest
	}
	if len(name) > 253 {
		return "", 0, fmt.Errorf("a name is at most 253 characters")
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return "", 0, fmt.Errorf("must be a name with at least two labels, such as example.com")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' ||
			strings.IndexFunc(l, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') }) >= 0 {
			return "", 0, fmt.Errorf("each label is 1-63 of a-z, 0-9 and '-', not at either end (lower case; punycode xn--... for other scripts); a wildcard only as a leading \"*.\"")
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", 0, fmt.Errorf("the last label is all digits: an IP address is not a name (use cidrs)")
	}
	return name, form, nil
}

// matchingRule is the index of the first of rules that a request for host
// (as the client wrote it) on port, whose addresses are addrs, matches; -1
// for none.
func matchingRule(rules []Rule, host string, addrs []netip.Addr, port uint16) int {
	name, isName := hostName(host)
	for i, r := range rules {
		if len(r.Ports) > 0 && !slices.Contains(r.Ports, port) {
			continue
		}
		if isName && r.matchesName(name) {
			return i
		}
		if len(r.CIDRs) > 0 && len(addrs) > 0 && allIn(addrs, r.CIDRs) {
			return i
		}
	}
	return -1
}

func (r Rule) matchesName(name string) bool {
	if slices.Contains(r.Names, name) {
		return true
	}
	for _, s := range r.Suffixes {
		if name == s || strings.HasSuffix(name, "."+s) {
			return true
		}
	}
	for _, u := range r.Under {
		if strings.HasSuffix(name, "."+u) {
			return true
		}
	}
	return false
}

// hostName is host as a rule compares it (lower case, no trailing dot, as
// Squid reads a URL's host), and false for an IP literal, which never
// matches a domain.
func hostName(host string) (string, bool) {
	h := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	if _, err := netip.ParseAddr(h); err == nil {
		return "", false
	}
	return strings.ToLower(h), true
}

func allIn(addrs []netip.Addr, cidrs []netip.Prefix) bool {
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		if !slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return false
		}
	}
	return true
}

// outside is the complement of cidrs: every address no range of cidrs
// holds, in each family, leaving out the IPv4-mapped block, which both
// enforcements read as IPv4. Squid renders "every address is in cidrs" as
// "no address is in outside", since its dst ACL matches any address.
func outside(cidrs []netip.Prefix) []netip.Prefix {
	all := []Range{{Prefix: netip.MustParsePrefix("0.0.0.0/0")}, {Prefix: netip.MustParsePrefix("::/0")}}
	rest := cutOut(cutOut(all, []netip.Prefix{mappedBlock}), cidrs)
	out := make([]netip.Prefix, len(rest))
	for i, r := range rest {
		out[i] = r.Prefix
	}
	return out
}

// Outside is the complement of a rule's CIDRs, for the Squid generator.
func (r Rule) Outside() []netip.Prefix { return outside(r.CIDRs) }

// ParseClients parses a Proxy's allowedSourceRanges: canonical ranges (each
// error names allowedSourceRanges[i]), and not a set that together admits
// every IPv4 or every IPv6 address, which is an open proxy as much as a /0
// is (the API server refuses a /0; only the union tells the rest).
func ParseClients(ranges []string) ([]netip.Prefix, field.ErrorList) {
	path := field.NewPath("allowedSourceRanges")
	prefixes, errs := ParseRanges(ranges, path)
	if len(errs) > 0 {
		return nil, errs
	}
	for _, family := range []string{"0.0.0.0/0", "::/0"} {
		whole := netip.MustParsePrefix(family)
		left := cutOut([]Range{{Prefix: whole}}, prefixes)
		left = cutOut(left, []netip.Prefix{mappedBlock})
		if len(left) == 0 {
			which := "IPv4"
			if whole.Addr().Is6() {
				which = "IPv6"
			}
			return nil, field.ErrorList{field.Invalid(path, strings.Join(ranges, ","), fmt.Sprintf(
				"together these ranges admit every %s address, which makes an open proxy as a /0 would; list the ranges that may use it", which))}
		}
	}
	return prefixes, nil
}

// ForRequest is what one Proxy makes of its entry's policy: the client
// ranges it admits (ParseClients) and the policy narrowed to its
// destination rules (ParseRules). Every provider calls it, so a Proxy is
// refused the same way on each; the errors name the Proxy's fields.
func (p *Policy) ForRequest(sourceRanges []string, rules []DestinationRule) ([]netip.Prefix, *Policy, field.ErrorList) {
	clients, errs := ParseClients(sourceRanges)
	parsed, rerrs := p.ParseRules(rules, field.NewPath("destinations"))
	errs = append(errs, rerrs...)
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return clients, p.Narrow(parsed), nil
}
