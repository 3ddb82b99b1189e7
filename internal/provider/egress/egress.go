// Package egress is the destination policy of every provider's proxy: which
// addresses and ports a client may reach through it. An egress proxy must not
// be a way into the networks behind it, so the policy denies loopback,
// link-local (cloud metadata), private and shared address space by default,
// lets CONNECT reach port 443 only, and opens exceptions only where the
// operator's admin lists them in the providers config. The local provider
// checks it before every dial; the Squid generator (internal/provider/squid)
// renders the same policy as ACLs, so the two cannot drift apart.
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

// Range is a denied range and why it is denied, for refusals a reader can
// act on.
type Range struct {
	Prefix netip.Prefix
	Why    string
}

// defaultDenied are the ranges no proxy reaches unless an entry allows them.
// 0.0.0.0/8 and :: are in because connecting to 0.0.0.0 or [::] reaches the
// host itself on Linux. IPv4-mapped IPv6 addresses (::ffff:10.0.0.1) are
// checked as the IPv4 address they carry.
var defaultDenied = []Range{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network" (0.0.0.0 reaches the proxy's own host)`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata at 169.254.169.254)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (RFC 6598, carrier-grade NAT and some clusters)"},
	{netip.MustParsePrefix("::/128"), "unspecified ([::] reaches the proxy's own host)"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (RFC 4193; cloud metadata at fd00:ec2::254)"},
}

// DefaultDenied returns the ranges denied by default, in a fixed order.
func DefaultDenied() []Range { return slices.Clone(defaultDenied) }

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
	return errs
}

// Policy builds the policy the settings describe, with extra denied ranges
// (such as a cluster's Service and Pod ranges) added to the defaults. The
// settings must have passed Validate.
func (s *Settings) Policy(extra ...Range) *Policy {
	p := &Policy{denied: append(DefaultDenied(), extra...)}
	for _, r := range s.AllowedDestinations {
		if pfx, err := ParseCanonical(r); err == nil {
			p.allowed = append(p.allowed, pfx)
		}
	}
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

// Policy decides which destinations a proxy may reach. A destination is
// refused when any denied range holds it and no allowed range does: an
// allowed range is an exception the admin chose, so it wins.
type Policy struct {
	denied       []Range
	allowed      []netip.Prefix
	connectPorts []uint16
}

// Denied are the denied ranges, defaults first.
func (p *Policy) Denied() []Range { return slices.Clone(p.denied) }

// Allowed are the admin's exceptions.
func (p *Policy) Allowed() []netip.Prefix { return slices.Clone(p.allowed) }

// ConnectPorts are the ports CONNECT may reach.
func (p *Policy) ConnectPorts() []uint16 { return slices.Clone(p.connectPorts) }

// Refusal is a destination the policy refuses, with the reason.
type Refusal struct {
	// Addr is the refused address; invalid when the port alone decided.
	Addr   netip.Addr
	Port   uint16
	Reason string
}

func (r *Refusal) Error() string {
	if r.Addr.IsValid() {
		return fmt.Sprintf("destination %s is refused: %s", r.Addr, r.Reason)
	}
	return fmt.Sprintf("destination port %d is refused: %s", r.Port, r.Reason)
}

// CheckPort refuses a port: CONNECT reaches only the connect ports, a plain
// request only the safe ports.
func (p *Policy) CheckPort(port uint16, connect bool) error {
	if connect {
		if slices.Contains(p.connectPorts, port) {
			return nil
		}
		return &Refusal{Port: port, Reason: fmt.Sprintf(
			"CONNECT reaches only port %s; an admin can add ports with connectPorts in the provider entry", joinPorts(p.connectPorts))}
	}
	for _, r := range safePorts {
		if r.contains(port) {
			return nil
		}
	}
	return &Refusal{Port: port, Reason: "not one of the ports plain requests may reach (" + joinRanges(safePorts) + ")"}
}

// CheckAddr refuses an address in a denied range that no allowed range
// holds. An IPv4-mapped IPv6 address is checked as its IPv4 address.
func (p *Policy) CheckAddr(addr netip.Addr) error {
	addr = addr.WithZone("").Unmap()
	for _, a := range p.allowed {
		if a.Contains(addr) {
			return nil
		}
	}
	for _, d := range p.denied {
		if d.Prefix.Contains(addr) {
			return &Refusal{Addr: addr, Reason: fmt.Sprintf(
				"it is in %s, %s, which this proxy denies; an admin can allow it with allowedDestinations in the provider entry",
				d.Prefix, d.Why)}
		}
	}
	return nil
}

// Check is CheckPort and then CheckAddr for one destination.
func (p *Policy) Check(dst netip.AddrPort, connect bool) error {
	if err := p.CheckPort(dst.Port(), connect); err != nil {
		return err
	}
	return p.CheckAddr(dst.Addr())
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
