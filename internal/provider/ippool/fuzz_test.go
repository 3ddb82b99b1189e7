package ippool

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
)

// fuzzPool builds a spec from fuzz bytes: entries and excludes are triples
// (form, offset, width) placed on the network, counted from its bottom, or
// from its top when the form's high bit is set, so both ends of the
// address space are reached.
type fuzzPool struct {
	network netip.Prefix
}

func (f fuzzPool) at(offset uint16, fromTop bool) netip.Addr {
	if !fromTop {
		return fromAddr(f.network.Addr()).add(u128{0, uint64(offset)}).addr(f.network.Addr())
	}
	return fromAddr(lastAddr(f.network)).sub(u128{0, uint64(offset)}).addr(f.network.Addr())
}

func (f fuzzPool) entries(b []byte) []string {
	var out []string
	for ; len(b) >= 5; b = b[5:] {
		form, fromTop := b[0]%3, b[0]&0x80 != 0
		a := f.at(uint16(b[1])<<8|uint16(b[2]), fromTop)
		switch form {
		case 0:
			out = append(out, a.String())
		case 1:
			z := f.at(uint16(b[1])<<8|uint16(b[2])+uint16(b[3])<<8|uint16(b[4]), fromTop)
			if z.Less(a) {
				a, z = z, a
			}
			out = append(out, a.String()+"-"+z.String())
		case 2:
			bits := a.BitLen() - int(b[3]%17)
			out = append(out, netip.PrefixFrom(a, bits).Masked().String())
		}
	}
	return out
}

// FuzzAllocate: whatever Allocate returns is in the pool and not in use;
// a wanted address is returned exactly when the pool contains it and it
// is free; exhaustion only when every address is held; each search asks
// inUse at most once per held address plus once; and for pools small
// enough to enumerate, the address is the first free one in the pool's
// order.
func FuzzAllocate(f *testing.F) {
	f.Add(false, uint8(24), []byte{1, 0, 10, 0, 10}, []byte{0, 0, 15}, uint8(1), []byte{0, 10, 0, 11}, false, uint16(0))
	f.Add(false, uint8(30), []byte{2, 0, 0, 2, 0}, []byte{}, uint8(0), []byte{0, 1}, true, uint16(2))
	f.Add(true, uint8(64), []byte{2, 0, 0, 64, 0}, []byte{2, 0, 0, 8, 0}, uint8(1), []byte{1, 0, 1, 1, 1, 2}, false, uint16(0))
	f.Add(true, uint8(120), []byte{0x81, 0, 0, 0, 5, 0, 0, 7, 0, 0}, []byte{0x80, 0, 1}, uint8(0), []byte{0xff, 0xff}, true, uint16(7))
	f.Add(false, uint8(31), []byte{2, 0, 0, 1, 0}, []byte{}, uint8(0), []byte{0, 0}, false, uint16(0))
	f.Fuzz(func(t *testing.T, v6 bool, prefix uint8, entries, excludes []byte, gateway uint8, heldOffsets []byte, wantSet bool, wantOffset uint16) {
		network := netip.MustParsePrefix("10.20.0.0/16")
		bits := 16 + int(prefix)%17
		if v6 {
			network = netip.MustParsePrefix("2001:db8:0:1::/64")
			bits = 64 + int(prefix)%65
		}
		fp := fuzzPool{netip.PrefixFrom(network.Addr(), bits).Masked()}
		spec := Spec{Addresses: fp.entries(entries), Exclude: fp.entries(excludes), Prefix: bits}
		if gateway != 0 {
			spec.Gateway = fp.at(uint16(gateway), false).String()
		}
		p, err := spec.Pool()
		if err != nil {
			return // not a valid spec; Validate's own tests judge those
		}
		held := map[netip.Addr]bool{}
		for b := heldOffsets; len(b) >= 2; b = b[2:] {
			held[fp.at(uint16(b[0]&0x7f)<<8|uint16(b[1]), b[0]&0x80 != 0)] = true
		}
		calls := 0
		inUse := func(a netip.Addr) bool { calls++; return held[a] }
		var want netip.Addr
		if wantSet {
			want = fp.at(wantOffset, false)
		}

		got, err := p.Allocate(want, inUse)
		// desc is for failures only: formatting a large held set on every
		// run would slow the fuzzer down.
		desc := func() string { return fmt.Sprintf("pool %+v (%s), held %v, want %s", spec, p, held, want) }
		switch {
		case err == nil:
			if !p.Contains(got) || held[got] {
				t.Fatalf("Allocate = %s, not a free address of %s", got, desc())
			}
			if want.IsValid() && got != want {
				t.Fatalf("Allocate = %s, not the wanted address of %s", got, desc())
			}
		case want.IsValid() && !p.Contains(want):
			if !errors.Is(err, ErrOutside) {
				t.Fatalf("Allocate: %v, want ErrOutside, %s", err, desc())
			}
		case want.IsValid():
			if !errors.Is(err, ErrHeld) || !held[want] {
				t.Fatalf("Allocate: %v, %s", err, desc())
			}
		default:
			inPool := 0
			for a := range held {
				if p.Contains(a) {
					inPool++
				}
			}
			if !errors.Is(err, ErrExhausted) || p.Size() > uint64(inPool) {
				t.Fatalf("Allocate: %v with %d of %d addresses held, %s", err, inPool, p.Size(), desc())
			}
		}
		if !want.IsValid() && calls > len(held)+1 {
			t.Fatalf("Allocate asked inUse %d times with %d held, %s", calls, len(held), desc())
		}

		// The oracle: walk small pools address by address.
		total, _ := p.sizes()
		if want.IsValid() || total.hi != 0 || total.lo > 1<<16 {
			return
		}
		var first netip.Addr
	walk:
		for _, r := range p.ranges {
			for a := r.lo; ; a = a.Next() {
				if p.Contains(a) && !held[a] {
					first = a
					break walk
				}
				if a == r.hi {
					break
				}
			}
		}
		if first.IsValid() != (err == nil) || (err == nil && got != first) {
			t.Fatalf("Allocate = %s, %v; the first free address is %s, %s", got, err, first, desc())
		}
	})
}
