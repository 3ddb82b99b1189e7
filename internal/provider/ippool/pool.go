package ippool

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Sentinels of Allocate, for errors.Is.
var (
	// ErrExhausted: the pool has no free address.
	ErrExhausted = errors.New("address pool exhausted")
	// ErrOutside: the wanted address is not one the pool allocates.
	ErrOutside = errors.New("address not in the pool")
	// ErrHeld: the wanted address is held already.
	ErrHeld = errors.New("address held already")
)

// Pool is a validated address pool (Spec.Pool).
type Pool struct {
	network netip.Prefix
	// ranges are the addresses entries in the order written; no two
	// overlap.
	ranges []entry
	// never are the addresses never allocated (exclude, the gateway, the
	// network and broadcast addresses), sorted, with overlapping and
	// adjacent spans merged, so allocation skips each in one step.
	never   []span
	gateway netip.Addr
	dns     []netip.Addr
}

func newPool(network netip.Prefix, addrs []entry, excludes []span, gateway netip.Addr, dns []netip.Addr) *Pool {
	never := slices.Clone(excludes)
	if gateway.IsValid() {
		never = append(never, span{gateway, gateway})
	}
	for _, a := range reserved(network) {
		never = append(never, span{a, a})
	}
	return &Pool{network: network, ranges: addrs, never: merge(never), gateway: gateway, dns: dns}
}

// reserved are the addresses of network no host may have: the network
// address (IPv6's Subnet-Router anycast) and IPv4's broadcast address.
// Point-to-point networks have neither (RFC 3021's IPv4 /31, RFC 6164's
// IPv6 /127), nor does a single-address network.
func reserved(network netip.Prefix) []netip.Addr {
	if network.Addr().Is4() {
		if network.Bits() <= 30 {
			return []netip.Addr{network.Addr(), lastAddr(network)}
		}
		return nil
	}
	if network.Bits() <= 126 {
		return []netip.Addr{network.Addr()}
	}
	return nil
}

func isReserved(network netip.Prefix, a netip.Addr) bool {
	return slices.Contains(reserved(network), a)
}

// merge sorts spans and joins those that overlap or touch.
func merge(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int { return a.lo.Compare(b.lo) })
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if next := last.hi.Next(); !next.IsValid() || s.lo.Compare(next) <= 0 {
				if s.hi.Compare(last.hi) > 0 {
					last.hi = s.hi
				}
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// Prefix is the on-link prefix length of the instances' NICs.
func (p *Pool) Prefix() int { return p.network.Bits() }

// Network is the pool's on-link network.
func (p *Pool) Network() netip.Prefix { return p.network }

// Gateway is the default route's next hop; invalid when none.
func (p *Pool) Gateway() netip.Addr { return p.gateway }

// DNS are the resolvers the instances use.
func (p *Pool) DNS() []netip.Addr { return slices.Clone(p.dns) }

// firstNever is the index of the first never-span that ends at or after a.
func (p *Pool) firstNever(a netip.Addr) int {
	return sort.Search(len(p.never), func(i int) bool { return p.never[i].hi.Compare(a) >= 0 })
}

func (p *Pool) excluded(a netip.Addr) bool {
	i := p.firstNever(a)
	return i < len(p.never) && p.never[i].lo.Compare(a) <= 0
}

// Contains tells whether the pool may allocate a: in addresses, and not
// excluded, the gateway, or the network's network or broadcast address.
func (p *Pool) Contains(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" || a.Is4() != p.network.Addr().Is4() {
		return false
	}
	for _, r := range p.ranges {
		if r.lo.Compare(a) <= 0 && a.Compare(r.hi) <= 0 {
			return !p.excluded(a)
		}
	}
	return false
}

// sizes are the addresses in the entries, and how many of them are never
// allocated.
func (p *Pool) sizes() (total, never u128) {
	for _, r := range p.ranges {
		total = total.add(r.count())
		for _, n := range p.never {
			lo, hi := maxAddr(r.lo, n.lo), minAddr(r.hi, n.hi)
			if lo.Compare(hi) <= 0 {
				never = never.add(span{lo, hi}.count())
			}
		}
	}
	return total, never
}

// Size is how many addresses the pool may allocate, saturating at
// MaxUint64 (an IPv6 /64 holds more).
func (p *Pool) Size() uint64 {
	total, never := p.sizes()
	return total.sub(never).saturated()
}

// maxShown bounds the entries String names, so a message stays one line.
const maxShown = 2

// String describes the pool for messages: its first entries and counts,
// e.g. "192.0.2.10-192.0.2.20 (11 addresses, 2 excluded)", where excluded
// counts the addresses of the entries never allocated.
func (p *Pool) String() string {
	var b strings.Builder
	for i, r := range p.ranges[:min(len(p.ranges), maxShown)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.text)
	}
	if more := len(p.ranges) - maxShown; more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	total, never := p.sizes()
	noun := "addresses"
	if total == one {
		noun = "address"
	}
	fmt.Fprintf(&b, " (%s %s", total, noun)
	if never != (u128{}) {
		fmt.Fprintf(&b, ", %s excluded", never)
	}
	b.WriteString(")")
	return b.String()
}

// Allocate picks the address for a claim. With want valid it is want, when
// the pool contains it and inUse says it is free (ErrOutside or ErrHeld
// otherwise: a claim that asks for one address must not get another).
// Without, it is the lowest free address in the pool's order: the
// addresses entries in the order written, each ascending. inUse (nil:
// nothing is held) tells whether an address is held already.
//
// It never enumerates the pool: each step either returns, passes one held
// address, or skips a whole excluded span, so a search costs steps in the
// held and excluded addresses and the entries, however large the pool.
func (p *Pool) Allocate(want netip.Addr, inUse func(netip.Addr) bool) (netip.Addr, error) {
	if inUse == nil {
		inUse = func(netip.Addr) bool { return false }
	}
	if want.IsValid() {
		switch {
		case !p.Contains(want):
			return netip.Addr{}, fmt.Errorf("%s: %w %s", want, ErrOutside, p)
		case inUse(want):
			return netip.Addr{}, fmt.Errorf("%s: %w (pool %s)", want, ErrHeld, p)
		}
		return want, nil
	}
	for _, r := range p.ranges {
		if a, ok := p.lowestFree(r.span, inUse); ok {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: every address of %s is held", ErrExhausted, p)
}

// lowestFree is the lowest address of r neither never allocated nor in use.
func (p *Pool) lowestFree(r span, inUse func(netip.Addr) bool) (netip.Addr, bool) {
	cur := r.lo
	i := p.firstNever(cur)
	for {
		// never[i] is the first never-span not wholly below cur.
		if i < len(p.never) && p.never[i].lo.Compare(cur) <= 0 {
			if p.never[i].hi.Compare(r.hi) >= 0 {
				return netip.Addr{}, false
			}
			cur = p.never[i].hi.Next()
			i++
			continue
		}
		if !inUse(cur) {
			return cur, true
		}
		if cur == r.hi {
			return netip.Addr{}, false
		}
		cur = cur.Next()
	}
}

func maxAddr(a, b netip.Addr) netip.Addr {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}

func minAddr(a, b netip.Addr) netip.Addr {
	if a.Compare(b) <= 0 {
		return a
	}
	return b
}
