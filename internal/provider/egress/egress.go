// Package egress is the destination policy of every provider's proxy: which
// addresses, ports and schemes a client may reach through it. An egress
// proxy must not be a way into the networks behind it, so the policy refuses
// every range IANA's special-purpose registries mark as not globally
// reachable (loopback, link-local with the cloud metadata endpoints,
// private, shared, documentation, reserved, multicast, ...) and the IPv6
// forms that carry an IPv4 address, lets CONNECT reach port 443 only, and
// opens exceptions only where the operator's admin lists them in the
// providers config. A name is refused when any of its addresses is, or when
// it has none. The local provider calls Decide before every dial; the Squid
// generator (internal/provider/squid) renders the same Policy as ACLs, and a
// differential test (test/policy) runs one corpus through both.
//
// It also holds the one parser of CIDRs for the providers: a range must be
// written in canonical form (no host bits, the canonical spelling), because
// masking 10.0.0.1/8 silently would grant more than the author meant.
package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Range is a refused range and why it is refused, for refusals a reader
// can act on.
type Range struct {
	Prefix netip.Prefix
	Why    string
}

// DefaultConnectPort is the only port CONNECT reaches unless an entry lists
// others: HTTPS. CONNECT to any other port tunnels any protocol (SMTP, SSH)
// through the proxy.
const DefaultConnectPort = 443

// PortRange is an inclusive range of TCP ports.
type PortRange struct{ Lo, Hi uint16 }

func (r PortRange) contains(p uint16) bool { return r.Lo <= p && p <= r.Hi }

func (r PortRange) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// safePorts are the ports a plain (not CONNECT) request may reach: Squid's
// own Safe_ports list, so the local provider and Squid agree. Below 1024 only
// the ports of protocols Squid speaks; this keeps plain HTTP away from SMTP
// (25) and similar services that take HTTP-shaped input.
var safePorts = []PortRange{{80, 80}, {443, 443}, {21, 21}, {70, 70}, {210, 210}, {280, 280},
	{488, 488}, {591, 591}, {777, 777}, {1025, 65535}}

// SafePorts returns the ports plain requests may reach.
func SafePorts() []PortRange { return slices.Clone(safePorts) }

// Settings is the destination block of a provider entry. Each provider type
// embeds it in its config, so its keys sit beside the type's own:
//
//	local:
//	  allowedDestinations: [10.20.0.0/16]
//	  connectPorts: [443, 8443]
//
// It lives in the admin's providers config only, never in a Proxy: a Proxy
// author must not be able to open the networks behind the proxy.
type Settings struct {
	// AllowedDestinations are ranges this entry's proxies may reach although
	// the default denies them, e.g. an internal service at 10.20.30.40/32.
	// Each must be in canonical form; /0 is refused (it would turn the deny
	// off altogether).
	AllowedDestinations []string `json:"allowedDestinations,omitempty"`
	// ConnectPorts are the ports CONNECT may reach; empty means 443 only.
	ConnectPorts []int32 `json:"connectPorts,omitempty"`
	// AllowNAT64 lets proxies reach NAT64's well-known prefix 64:ff9b::/96,
	// for IPv6-only networks whose DNS64 answers with it. Each address in
	// it is then checked as the IPv4 address it carries, so 64:ff9b::7f00:1
	// (127.0.0.1) stays refused.
	AllowNAT64 bool `json:"allowNAT64,omitempty"`
	// EgressIPEcho is an http:// URL that answers with the caller's address
	// as text (a checkip-style service, or one of the site's own). Each
	// instance asks it through its own proxy about once a minute, so
	// status.egressIP is the address destinations see; only the instance
	// itself may reach it past the policy (Echo). Empty: no echo.
	EgressIPEcho string `json:"egressIPEcho,omitempty"`
}

// Validate checks the block; every error names its field under path.
func (s *Settings) Validate(path *field.Path) field.ErrorList {
	p := path.Child("allowedDestinations")
	prefixes, errs := ParseRanges(s.AllowedDestinations, p)
	for i, pfx := range prefixes {
		if pfx.IsValid() && pfx.Bits() == 0 {
			errs = append(errs, field.Invalid(p.Index(i), s.AllowedDestinations[i],
				"a /0 range would turn the destination deny off; list the internal ranges to allow"))
		}
	}
	seen := map[int32]bool{}
	for i, port := range s.ConnectPorts {
		pp := path.Child("connectPorts").Index(i)
		switch {
		case port < 1 || port > 65535:
			errs = append(errs, field.Invalid(pp, port, "must be a TCP port, 1-65535"))
		case seen[port]:
			errs = append(errs, field.Duplicate(pp, port))
		}
		seen[port] = true
	}
	if _, err := ParseEcho(s.EgressIPEcho, path.Child("egressIPEcho")); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// Policy builds the policy the settings describe, with extra refused
// ranges (such as a cluster's Service and Pod ranges) added to the
// registry's. The settings must have passed Validate.
func (s *Settings) Policy(extra ...Range) *Policy {
	rows, reachable := registryRanges()
	rows = append(rows, extra...)
	var holes []netip.Prefix
	for _, r := range reachable {
		holes = append(holes, r.Prefix)
	}
	for _, a := range s.AllowedDestinations {
		if pfx, err := ParseCanonical(a); err == nil {
			holes = append(holes, pfx)
		}
	}
	refused := cutOut(disjoint(rows), holes)
	if s.AllowNAT64 {
		// NAT64 opens, except where it carries a refused IPv4 address.
		refused = cutOut(refused, []netip.Prefix{nat64Block})
		var embedded []Range
		for _, r := range refused {
			if r.Prefix.Addr().Is4() {
				embedded = append(embedded, Range{Prefix: embedNAT64(r.Prefix), Why: "NAT64 form of " + r.Why})
			}
		}
		refused = append(refused, cutOut(embedded, holes)...)
	}
	// An IPv6 range never decides an IPv4-mapped address: both enforcements
	// check those as IPv4.
	refused = cutOut(refused, []netip.Prefix{mappedBlock})
	p := &Policy{refused: refused, rows: rows}
	p.echo, _ = ParseEcho(s.EgressIPEcho, nil)
	for _, port := range s.ConnectPorts {
		p.connectPorts = append(p.connectPorts, uint16(port))
	}
	if len(p.connectPorts) == 0 {
		p.connectPorts = []uint16{DefaultConnectPort}
	}
	return p
}

// Default is the policy of an entry that sets nothing.
func Default() *Policy { return (&Settings{}).Policy() }

// Policy decides where a proxy's clients may go. It is the one description
// both enforcements read: the local provider calls Decide for each request,
// and the Squid generator renders Refused and the ports as ACLs that decide
// the same.
type Policy struct {
	// refused is the set no address of a destination may be in: the
	// registry's refused rows and the extra ranges, less the reachable
	// rows and the admin's allowed ranges. No two ranges overlap.
	refused []Range
	// rows are the refused rows before the cut, for the reason a refusal
	// gives (the narrowest row holding the address).
	rows         []Range
	connectPorts []uint16
	// rules are the Proxy's own destination rules; none: anything the
	// entry allows.
	rules []Rule
	// echo is the entry's egress-IP echo, which only the instance itself
	// may ask (the generated Squid's first allow); zero: none.
	echo Echo
}

// Echo is the entry's egress-IP echo; zero when it names none.
func (p *Policy) Echo() Echo {
	if p == nil {
		return Echo{}
	}
	return p.echo
}

// Narrow returns the policy with a Proxy's destination rules (ParseRules):
// a request must then match one of them too.
func (p *Policy) Narrow(rules []Rule) *Policy {
	n := *p
	n.rules = slices.Clone(rules)
	return &n
}

// Rules are the Proxy's destination rules the policy was narrowed to.
func (p *Policy) Rules() []Rule { return slices.Clone(p.rules) }

// Refused is the refused set: no two ranges overlap, and no address of an
// allowed destination is in any. Squid renders it as one dst ACL.
func (p *Policy) Refused() []Range { return slices.Clone(p.refused) }

// ConnectPorts are the ports CONNECT may reach.
func (p *Policy) ConnectPorts() []uint16 { return slices.Clone(p.connectPorts) }

// Schemes are the URL schemes a plain (not CONNECT) request may use. Squid
// would also speak FTP (logging in as "Squid@") and more; an egress proxy
// forwards the web only.
var Schemes = []string{"http", "https"}

// HiddenRequestHeaders are removed from every request a proxy forwards:
// they would tell the destination about the clients and the networks behind
// the proxy (the proxies add none of their own either).
var HiddenRequestHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Via"}

// Destination is what a proxy knows about where a request goes when it
// decides: the request's form, the target's port and every address the
// target has (an IP literal's own, or all the answers for a name; none when
// the name does not resolve).
type Destination struct {
	Connect bool
	// Scheme is a plain request's URL scheme, lower case; unused for
	// CONNECT.
	Scheme string
	// Host is the target's host as the client wrote it (a name, or an IP
	// literal, bracketed or not), which domain rules match.
	Host  string
	Port  uint16
	Addrs []netip.Addr
}

// Refusal is a destination the policy refuses, with the reason. The reason
// is for the log: it names addresses, so a proxy answers its client with
// Class's fixed text instead.
type Refusal struct {
	Class RefusalClass
	// Addr is the refused address, when one decided.
	Addr   netip.Addr
	Port   uint16
	Reason string
}

// RefusalClass says what about a destination was refused.
type RefusalClass int

const (
	// RefusedPort: the port is not one the request's form may reach.
	RefusedPort RefusalClass = iota
	// RefusedScheme: a plain request for a scheme other than http(s).
	RefusedScheme
	// RefusedAddress: an address of the destination is in the refused set.
	RefusedAddress
	// RefusedUnresolved: the name has no address.
	RefusedUnresolved
	// RefusedByRules: the entry allows it, the Proxy's destination rules
	// do not.
	RefusedByRules
)

func (r *Refusal) Error() string {
	switch {
	case r.Addr.IsValid():
		return fmt.Sprintf("destination %s is refused: %s", r.Addr, r.Reason)
	case r.Class == RefusedPort:
		return fmt.Sprintf("destination port %d is refused: %s", r.Port, r.Reason)
	}
	return "destination is refused: " + r.Reason
}

// Decide is the policy's answer for one request: nil when it may go, a
// *Refusal when not. A name is refused when any of its addresses is
// refused, and when it has none.
func (p *Policy) Decide(d Destination) error {
	if err := p.CheckRequest(d.Connect, d.Scheme, d.Port); err != nil {
		return err
	}
	return p.CheckDestination(d.Host, d.Addrs, d.Port)
}

// CheckDestination is the part of Decide a proxy makes once it has
// resolved the host: every address, then the Proxy's rules.
func (p *Policy) CheckDestination(host string, addrs []netip.Addr, port uint16) error {
	_, err := p.AllowedBy(host, addrs, port)
	return err
}

// AllowedBy is CheckDestination with, for a destination it lets through,
// the access log's rule that did: the first of the Proxy's rules it
// matches (as Squid's first matching allow line), or RuleEntry when the
// Proxy has none.
func (p *Policy) AllowedBy(host string, addrs []netip.Addr, port uint16) (string, error) {
	if err := p.CheckAddrs(addrs); err != nil {
		return "", err
	}
	if len(p.rules) == 0 {
		return RuleEntry, nil
	}
	if i := matchingRule(p.rules, host, addrs, port); i >= 0 {
		return RuleName(i), nil
	}
	return "", &Refusal{Class: RefusedByRules, Port: port, Reason: fmt.Sprintf(
		"%s port %d matches none of this Proxy's destination rules (spec.destinations)", host, port)}
}

// CheckRequest is the part of Decide a proxy can make before it resolves
// the name: the request's form, scheme and port.
func (p *Policy) CheckRequest(connect bool, scheme string, port uint16) error {
	if !connect && !slices.Contains(Schemes, scheme) {
		return &Refusal{Class: RefusedScheme, Port: port, Reason: fmt.Sprintf(
			"scheme %q: this proxy forwards %s only", scheme, strings.Join(Schemes, " and "))}
	}
	return p.CheckPort(port, connect)
}

// CheckPort refuses a port: CONNECT reaches only the connect ports, a plain
// request only the safe ports.
func (p *Policy) CheckPort(port uint16, connect bool) error {
	if connect {
		if slices.Contains(p.connectPorts, port) {
			return nil
		}
		return &Refusal{Class: RefusedPort, Port: port, Reason: fmt.Sprintf(
			"CONNECT reaches only port %s; an admin can add ports with connectPorts in the provider entry", joinPorts(p.connectPorts))}
	}
	for _, r := range safePorts {
		if r.contains(port) {
			return nil
		}
	}
	return &Refusal{Class: RefusedPort, Port: port, Reason: "not one of the ports plain requests may reach (" + joinRanges(safePorts) + ")"}
}

// CheckAddrs refuses a destination with no address, or with any address
// CheckAddr refuses: a name that also resolves to loopback is refused even
// when another of its addresses is allowed, since a client could make the
// proxy connect to either.
func (p *Policy) CheckAddrs(addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return &Refusal{Class: RefusedUnresolved, Reason: "the name does not resolve"}
	}
	for _, a := range addrs {
		if err := p.CheckAddr(a); err != nil {
			return err
		}
	}
	return nil
}

// CheckAddr refuses an address in the refused set. An IPv4-mapped IPv6
// address is checked as its IPv4 address.
func (p *Policy) CheckAddr(addr netip.Addr) error {
	addr = addr.WithZone("").Unmap()
	for _, r := range p.refused {
		if r.Prefix.Contains(addr) {
			why := p.narrowest(addr, r)
			return &Refusal{Class: RefusedAddress, Addr: addr, Reason: fmt.Sprintf(
				"it is in %s, %s, which this proxy refuses; an admin can allow it with allowedDestinations in the provider entry",
				why.Prefix, why.Why)}
		}
	}
	return nil
}

// narrowest is, for the reason a refusal gives, the row the refused range
// holding addr was cut from (a refusal of 127.0.0.1 names 127.0.0.0/8 even
// where an allowed 127.0.0.5 split it), or a narrower row inside it that
// holds addr too (::1 is refused as part of ::/96, IPv4-compatible, but is
// loopback).
func (p *Policy) narrowest(addr netip.Addr, piece Range) Range {
	best := piece
	for _, r := range p.rows {
		if r.Why == piece.Why && r.Prefix.Contains(addr) {
			best = r
			break
		}
	}
	for _, r := range p.rows {
		if r.Prefix.Contains(addr) && r.Prefix.Bits() > best.Prefix.Bits() {
			best = r
		}
	}
	return best
}

func joinPorts(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ", ")
}

func joinRanges(rs []PortRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, " ")
}

// ParseCanonical parses a CIDR written in canonical form: no host bits set,
// the address spelt as netip prints it (lower case, IPv6 compressed), not an
// IPv4-mapped IPv6 range. The error names the form to write instead.
func ParseCanonical(s string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("must be a CIDR such as 10.0.0.0/8 or 2001:db8::/32")
	}
	if pfx.Addr().Is4In6() {
		v4 := netip.PrefixFrom(pfx.Addr().Unmap(), max(pfx.Bits()-96, 0)).Masked()
		return netip.Prefix{}, fmt.Errorf("is an IPv4-mapped IPv6 range: write the IPv4 range %s", v4)
	}
	if m := pfx.Masked(); m != pfx {
		return netip.Prefix{}, fmt.Errorf("has host bits set: write %s for the whole range, or %s for the one host",
			m, netip.PrefixFrom(pfx.Addr(), pfx.Addr().BitLen()))
	}
	if pfx.String() != s {
		return netip.Prefix{}, fmt.Errorf("is not in canonical form: write %s", pfx)
	}
	return pfx, nil
}

// ParseRanges parses a list of canonical CIDRs; each error names its entry
// under path (path[i]). The result holds an invalid Prefix at the index of
// every bad entry, so indices stay aligned with values.
func ParseRanges(values []string, path *field.Path) ([]netip.Prefix, field.ErrorList) {
	var errs field.ErrorList
	out := make([]netip.Prefix, len(values))
	seen := map[netip.Prefix]bool{}
	for i, v := range values {
		pfx, err := ParseCanonical(v)
		if err != nil {
			errs = append(errs, field.Invalid(path.Index(i), v, err.Error()))
			continue
		}
		if seen[pfx] {
			errs = append(errs, field.Duplicate(path.Index(i), v))
		}
		seen[pfx] = true
		out[i] = pfx
	}
	return out, errs
}
