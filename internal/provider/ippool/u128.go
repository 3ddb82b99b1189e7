package ippool

import (
	"math/big"
	"math/bits"
	"net/netip"
)

// u128 is an address as a number, for counting and stepping through IPv6
// ranges that no uint64 holds. IPv4 addresses take their IPv4-mapped form;
// only same-family values are ever combined.
type u128 struct{ hi, lo uint64 }

func fromAddr(a netip.Addr) u128 {
	b := a.As16()
	var x u128
	for i := range 8 {
		x.hi = x.hi<<8 | uint64(b[i])
		x.lo = x.lo<<8 | uint64(b[8+i])
	}
	return x
}

// addr is x as an address of the family of like.
func (x u128) addr(like netip.Addr) netip.Addr {
	if like.Is4() {
		v := uint32(x.lo)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	var b [16]byte
	for i := range 8 {
		b[7-i] = byte(x.hi >> (8 * i))
		b[15-i] = byte(x.lo >> (8 * i))
	}
	return netip.AddrFrom16(b)
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

var one = u128{0, 1}

// saturated is x, or MaxUint64 when it does not fit.
func (x u128) saturated() uint64 {
	if x.hi != 0 {
		return ^uint64(0)
	}
	return x.lo
}

func (x u128) String() string {
	n := new(big.Int).SetUint64(x.hi)
	n.Lsh(n, 64)
	return n.Or(n, new(big.Int).SetUint64(x.lo)).String()
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	p = p.Masked()
	host := p.Addr().BitLen() - p.Bits()
	x := fromAddr(p.Addr())
	switch {
	case host >= 64:
		x.lo = ^uint64(0)
		x.hi |= ^uint64(0) >> (128 - host)
	case host > 0:
		x.lo |= ^uint64(0) >> (64 - host)
	}
	return x.addr(p.Addr())
}
