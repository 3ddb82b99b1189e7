package ippool

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxEntries bounds each list of a pool (addresses, exclude, dnsServers):
// a pool is a handful of ranges, and validation compares entries pairwise.
const MaxEntries = 64

// Spec is an entry's addressPool block in the providers config:
//
//	addressPool:
//	  addresses: [192.0.2.10-192.0.2.20, 192.0.2.64/28]
//	  prefix: 24
//	  gateway: 192.0.2.1
//	  dnsServers: [192.0.2.53]
//	  exclude: [192.0.2.15]
//
// or, for a pool another Cluster API IPAM provider serves:
//
//	addressPool:
//	  ipamPoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: proxies}
type Spec struct {
	// Addresses are single addresses ("192.0.2.7"), CIDRs in canonical
	// form ("192.0.2.64/28") or inclusive ranges ("192.0.2.10-192.0.2.20"),
	// all of one family and on one on-link network. Allocation takes them
	// in the order written, each ascending.
	Addresses []string `json:"addresses,omitempty"`
	// Prefix is the on-link prefix length the instance's NIC gets (e.g. 24).
	Prefix int `json:"prefix,omitempty"`
	// Gateway is the default route's next hop; empty: no default route. It
	// must be on the addresses' network and is never allocated.
	Gateway string `json:"gateway,omitempty"`
	// DNSServers are the resolvers the instance uses.
	DNSServers []string `json:"dnsServers,omitempty"`
	// Exclude are addresses never allocated, in the forms of Addresses.
	Exclude []string `json:"exclude,omitempty"`
	// IPAMPoolRef names a pool another Cluster API IPAM provider serves
	// (in-cluster, NetBox, Infoblox). Its IPAddress then carries the
	// address, prefix and gateway, so Addresses, Exclude, Prefix and
	// Gateway must be empty; DNSServers may be set.
	IPAMPoolRef *PoolRef `json:"ipamPoolRef,omitempty"`
}

// PoolRef names an IPAM provider's pool object, as an IPAddressClaim's
// spec.poolRef does.
type PoolRef struct {
	APIGroup string `json:"apiGroup"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
}

// Validate checks the block; every error names its field under path.
func (s *Spec) Validate(path *field.Path) field.ErrorList {
	_, errs := s.parse(path)
	return errs
}

// Pool is the parsed pool of a spec that passed Validate; it returns an
// error for one that did not, and for one with ipamPoolRef (whose
// addresses another IPAM provider allocates).
func (s Spec) Pool() (*Pool, error) {
	p, errs := s.parse(field.NewPath("addressPool"))
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	if p == nil {
		return nil, errors.New("addressPool.ipamPoolRef is set: another IPAM provider allocates this pool's addresses")
	}
	return p, nil
}

// DNS is the spec's resolvers, parsed; for a spec with ipamPoolRef, whose
// Pool is not the operator's. Entries that do not parse are left out, so
// call it after Validate.
func (s Spec) DNS() []netip.Addr {
	var out []netip.Addr
	for _, v := range s.DNSServers {
		if a, err := parseAddr(v); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// span is an inclusive range of addresses of one family, lo <= hi.
type span struct{ lo, hi netip.Addr }

func (s span) overlaps(o span) bool {
	return s.lo.Is4() == o.lo.Is4() && s.lo.Compare(o.hi) <= 0 && o.lo.Compare(s.hi) <= 0
}

func (s span) within(p netip.Prefix) bool { return p.Contains(s.lo) && p.Contains(s.hi) }

func (s span) count() u128 { return fromAddr(s.hi).sub(fromAddr(s.lo)).add(one) }

// entry is one parsed item of addresses or exclude, with its canonical text
// for messages.
type entry struct {
	span
	text string
}

func (s *Spec) parse(path *field.Path) (*Pool, field.ErrorList) {
	var errs field.ErrorList
	dns := s.parseDNS(path.Child("dnsServers"), &errs)
	if s.IPAMPoolRef != nil {
		errs = append(errs, s.IPAMPoolRef.validate(path.Child("ipamPoolRef"))...)
		const why = "must be empty when ipamPoolRef is set: the IPAM provider's IPAddress carries it"
		if len(s.Addresses) > 0 {
			errs = append(errs, field.Forbidden(path.Child("addresses"), why))
		}
		if len(s.Exclude) > 0 {
			errs = append(errs, field.Forbidden(path.Child("exclude"), why))
		}
		if s.Prefix != 0 {
			errs = append(errs, field.Forbidden(path.Child("prefix"), why))
		}
		if s.Gateway != "" {
			errs = append(errs, field.Forbidden(path.Child("gateway"), why))
		}
		return nil, errs
	}
	ap := path.Child("addresses")
	if len(s.Addresses) == 0 {
		return nil, append(errs, field.Required(ap,
			"the pool's addresses (with prefix), or ipamPoolRef for a pool another IPAM provider serves"))
	}
	if len(s.Addresses) > MaxEntries {
		return nil, append(errs, field.TooMany(ap, len(s.Addresses), MaxEntries))
	}

	// The first good entry decides the family and, with the prefix, the
	// network; the others are judged against them.
	addrs := make([]entry, len(s.Addresses))
	ok := make([]bool, len(s.Addresses))
	first := -1
	for i, v := range s.Addresses {
		e, err := parseEntry(v)
		if err == nil {
			err = usable(e.span)
		}
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(ap.Index(i), v, err.Error()))
			continue
		case first < 0:
			first = i
		case e.lo.Is4() != addrs[first].lo.Is4():
			errs = append(errs, field.Invalid(ap.Index(i), v,
				fmt.Sprintf("is %s but %s is %s: a pool is of one family", family(e.lo), ap.Index(first), family(addrs[first].lo))))
			continue
		}
		addrs[i], ok[i] = e, true
	}

	pp := path.Child("prefix")
	maxBits := 128
	if first >= 0 {
		maxBits = addrs[first].lo.BitLen()
	}
	var network netip.Prefix
	switch {
	case s.Prefix == 0:
		errs = append(errs, field.Required(pp, "the on-link prefix length the instance's NIC gets, e.g. 24"))
	case s.Prefix < 1 || s.Prefix > maxBits:
		errs = append(errs, field.Invalid(pp, s.Prefix, fmt.Sprintf("must be 1-%d", maxBits)))
	case first >= 0:
		network = netip.PrefixFrom(addrs[first].lo, s.Prefix).Masked()
	}

	if network.IsValid() {
		for i, e := range addrs {
			if ok[i] && !e.within(network) {
				errs = append(errs, field.Invalid(ap.Index(i), s.Addresses[i], fmt.Sprintf(
					"is not on the on-link network %s (%s at prefix %d): a pool's addresses share one network",
					network, ap.Index(first), s.Prefix)))
			}
		}
	}
	for j := range addrs {
		for i := range j {
			if ok[i] && ok[j] && addrs[i].overlaps(addrs[j].span) {
				errs = append(errs, field.Invalid(ap.Index(j), s.Addresses[j],
					fmt.Sprintf("overlaps %s (%s): list each address once", ap.Index(i), s.Addresses[i])))
				break
			}
		}
	}

	excludes := s.parseExclude(path.Child("exclude"), first, addrs, network, &errs)
	gateway := s.parseGateway(path.Child("gateway"), first, addrs, network, &errs)
	if len(errs) > 0 {
		return nil, errs
	}

	p := newPool(network, addrs, excludes, gateway, dns)
	if p.Size() == 0 {
		errs = append(errs, field.Invalid(ap, s.Addresses,
			"the pool has no address to allocate: every one is excluded, the gateway, or the network's network or broadcast address"))
		return nil, errs
	}
	return p, errs
}

// parseExclude parses the excluded entries: the forms of addresses, of the
// pool's family and on its network (anywhere else they exclude nothing,
// which is a mistake).
func (s *Spec) parseExclude(path *field.Path, first int, addrs []entry, network netip.Prefix, errs *field.ErrorList) []span {
	if len(s.Exclude) > MaxEntries {
		*errs = append(*errs, field.TooMany(path, len(s.Exclude), MaxEntries))
		return nil
	}
	var out []span
	seen := map[span]bool{}
	for i, v := range s.Exclude {
		e, err := parseEntry(v)
		switch {
		case err != nil:
			*errs = append(*errs, field.Invalid(path.Index(i), v, err.Error()))
		case first >= 0 && e.lo.Is4() != addrs[first].lo.Is4():
			*errs = append(*errs, field.Invalid(path.Index(i), v,
				fmt.Sprintf("is %s but the pool's addresses are %s", family(e.lo), family(addrs[first].lo))))
		case network.IsValid() && !e.within(network):
			*errs = append(*errs, field.Invalid(path.Index(i), v,
				fmt.Sprintf("is not on the pool's network %s, so it excludes nothing", network)))
		case seen[e.span]:
			*errs = append(*errs, field.Duplicate(path.Index(i), v))
		default:
			seen[e.span] = true
			out = append(out, e.span)
		}
	}
	return out
}

// parseGateway parses the gateway: an address of the pool's network the
// instance can route through (not the network or broadcast address).
func (s *Spec) parseGateway(path *field.Path, first int, addrs []entry, network netip.Prefix, errs *field.ErrorList) netip.Addr {
	if s.Gateway == "" {
		return netip.Addr{}
	}
	g, err := parseAddr(s.Gateway)
	if err == nil {
		err = usable(span{g, g})
	}
	switch {
	case err != nil:
		*errs = append(*errs, field.Invalid(path, s.Gateway, err.Error()))
	case first >= 0 && g.Is4() != addrs[first].lo.Is4():
		*errs = append(*errs, field.Invalid(path, s.Gateway,
			fmt.Sprintf("is %s but the pool's addresses are %s", family(g), family(addrs[first].lo))))
	case !network.IsValid():
		// Prefix or addresses are wrong already; the gateway cannot be
		// judged against a network.
	case !network.Contains(g):
		*errs = append(*errs, field.Invalid(path, s.Gateway,
			fmt.Sprintf("is not on the pool's on-link network %s, so the instance could not reach it", network)))
	case isReserved(network, g):
		*errs = append(*errs, field.Invalid(path, s.Gateway,
			fmt.Sprintf("is the network or broadcast address of %s, which no host has", network)))
	default:
		return g
	}
	return netip.Addr{}
}

func (s *Spec) parseDNS(path *field.Path, errs *field.ErrorList) []netip.Addr {
	if len(s.DNSServers) > MaxEntries {
		*errs = append(*errs, field.TooMany(path, len(s.DNSServers), MaxEntries))
		return nil
	}
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for i, v := range s.DNSServers {
		a, err := parseAddr(v)
		switch {
		case err != nil:
			*errs = append(*errs, field.Invalid(path.Index(i), v, err.Error()))
		case a.IsUnspecified() || a.IsMulticast():
			*errs = append(*errs, field.Invalid(path.Index(i), v, "must be a resolver's unicast address"))
		case seen[a]:
			*errs = append(*errs, field.Duplicate(path.Index(i), v))
		default:
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

var (
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	kindPattern      = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
)

func (r *PoolRef) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	subdomain := func(p *field.Path, v, what string) {
		switch {
		case v == "":
			errs = append(errs, field.Required(p, what))
		case len(v) > 253 || !dns1123Subdomain.MatchString(v):
			errs = append(errs, field.Invalid(p, v,
				"must be a DNS subdomain: lower-case letters, digits, '-' and '.', at most 253 characters, starting and ending with a letter or digit"))
		}
	}
	subdomain(path.Child("apiGroup"), r.APIGroup, "the pool's API group, e.g. ipam.cluster.x-k8s.io")
	switch kp := path.Child("kind"); {
	case r.Kind == "":
		errs = append(errs, field.Required(kp, "the pool's kind, e.g. InClusterIPPool"))
	// A CRD's kind must be a DNS label when lower-cased, hence 63.
	case len(r.Kind) > 63 || !kindPattern.MatchString(r.Kind):
		errs = append(errs, field.Invalid(kp, r.Kind,
			"must be a kind: a CamelCase identifier of letters and digits starting with an upper-case letter, at most 63 characters"))
	}
	subdomain(path.Child("name"), r.Name, "the pool object's name")
	return errs
}

const forms = "must be an address (192.0.2.7), a CIDR (192.0.2.64/28) or an inclusive range (192.0.2.10-192.0.2.20)"

// parseEntry reads one item of addresses or exclude. A CIDR must be in
// canonical form: masking 192.0.2.1/24 silently would give more addresses
// than the author meant.
func parseEntry(s string) (entry, error) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			return entry{}, errors.New(forms)
		case pfx.Addr().Is4In6():
			return entry{}, fmt.Errorf("is an IPv4-mapped IPv6 range: write the IPv4 range %s",
				netip.PrefixFrom(pfx.Addr().Unmap(), max(pfx.Bits()-96, 0)).Masked())
		case pfx.Masked() != pfx:
			return entry{}, fmt.Errorf("has host bits set: write %s for the whole range, or %s for the one address",
				pfx.Masked(), pfx.Addr())
		case pfx.String() != s:
			return entry{}, fmt.Errorf("is not in canonical form: write %s", pfx)
		}
		return entry{span{pfx.Addr(), lastAddr(pfx)}, s}, nil
	}
	if a, b, ok := strings.Cut(s, "-"); ok {
		lo, err := parseAddr(strings.TrimSpace(a))
		if err != nil {
			return entry{}, fmt.Errorf("the range's first address %s", err)
		}
		hi, err := parseAddr(strings.TrimSpace(b))
		if err != nil {
			return entry{}, fmt.Errorf("the range's last address %s", err)
		}
		switch {
		case lo.Is4() != hi.Is4():
			return entry{}, errors.New("mixes an IPv4 and an IPv6 address: a range is of one family")
		case hi.Less(lo):
			return entry{}, fmt.Errorf("starts after it ends: write %s-%s", hi, lo)
		}
		return entry{span{lo, hi}, lo.String() + "-" + hi.String()}, nil
	}
	if _, err := netip.ParseAddr(s); err != nil {
		return entry{}, errors.New(forms)
	}
	a, err := parseAddr(s)
	if err != nil {
		return entry{}, err
	}
	return entry{span{a, a}, a.String()}, nil
}

// parseAddr reads an address a NIC can be given: no zone, and IPv4 in its
// own form (an IPv4-mapped IPv6 address would land in the wrong family).
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, errors.New("must be an IP address")
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("must not carry a zone: write %s", a.WithZone(""))
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("is an IPv4-mapped IPv6 address: write %s", a.Unmap())
	}
	return a, nil
}

// notHosts are ranges no NIC's address may be in.
var notHosts = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/32"), "the unspecified address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback addresses"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast addresses"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the limited broadcast address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback addresses"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped addresses"},
	{netip.MustParsePrefix("ff00::/8"), "multicast addresses"},
}

// usable refuses a span that holds an address no host can have.
func usable(s span) error {
	for _, n := range notHosts {
		if s.overlaps(span{n.prefix.Addr(), lastAddr(n.prefix)}) {
			return fmt.Errorf("holds %s (%s), which no instance can have", n.why, n.prefix)
		}
	}
	return nil
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}
