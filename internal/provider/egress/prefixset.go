package egress

import "net/netip"

// Prefix arithmetic for the refused set: a destination is refused when any
// of its addresses lies in a denied range and in no allowed one, so the
// allowed ranges are cut out of the denied ones once, here, and both
// enforcements check "in the refused set" only. Squid's dst ACL matches
// when any address of a name matches, so "denied and not allowed" written
// as two ACLs would let a name with one allowed and one denied address
// through; one ACL of the difference cannot.

// subtract returns p without q, as the fewest prefixes, in address order.
func subtract(p, q netip.Prefix) []netip.Prefix {
	switch {
	case !p.Overlaps(q):
		return []netip.Prefix{p}
	case q.Bits() <= p.Bits(): // q holds p
		return nil
	}
	lo, hi := halves(p)
	if lo.Contains(q.Addr()) {
		return append(subtract(lo, q), hi)
	}
	return append([]netip.Prefix{lo}, subtract(hi, q)...)
}

// halves splits p into its two prefixes one bit longer.
func halves(p netip.Prefix) (lo, hi netip.Prefix) {
	bits := p.Bits()
	lo = netip.PrefixFrom(p.Addr(), bits+1)
	if p.Addr().Is4() {
		b := p.Addr().As4()
		b[bits/8] |= 0x80 >> (bits % 8)
		return lo, netip.PrefixFrom(netip.AddrFrom4(b), bits+1)
	}
	b := p.Addr().As16()
	b[bits/8] |= 0x80 >> (bits % 8)
	return lo, netip.PrefixFrom(netip.AddrFrom16(b), bits+1)
}

// cutOut removes every range of holes from each range of rs; each piece
// keeps the reason of the range it came from.
func cutOut(rs []Range, holes []netip.Prefix) []Range {
	for _, h := range holes {
		var out []Range
		for _, r := range rs {
			for _, piece := range subtract(r.Prefix, h) {
				out = append(out, Range{Prefix: piece, Why: r.Why})
			}
		}
		rs = out
	}
	return rs
}

// Disjoint returns ps without the prefixes another prefix of ps holds, in
// their order: the rows of one Squid ACL (see disjoint).
func Disjoint(ps []netip.Prefix) []netip.Prefix {
	rs := make([]Range, len(ps))
	for i, p := range ps {
		rs[i] = Range{Prefix: p}
	}
	out := make([]netip.Prefix, 0, len(ps))
	for _, r := range disjoint(rs) {
		out = append(out, r.Prefix)
	}
	return out
}

// disjoint drops every range another range of rs holds (the wider one, or
// the earlier of two equal ones, stays), so no address is in two ranges:
// Squid warns about, and ignores one of, two ranges of an ACL that nest.
func disjoint(rs []Range) []Range {
	var out []Range
	for i, r := range rs {
		held := false
		for j, o := range rs {
			if i != j && o.Prefix.Bits() <= r.Prefix.Bits() && o.Prefix.Contains(r.Prefix.Addr()) &&
				(o.Prefix.Bits() < r.Prefix.Bits() || j < i) {
				held = true
				break
			}
		}
		if !held {
			out = append(out, r)
		}
	}
	return out
}
