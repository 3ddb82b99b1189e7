package ippool

import (
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"
)

func mustPool(t testing.TB, s Spec) *Pool {
	t.Helper()
	p, err := s.Pool()
	if err != nil {
		t.Fatalf("Pool(%+v): %v", s, err)
	}
	return p
}

var ip = netip.MustParseAddr

func TestPoolContainsSize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   Spec
		in     []string
		out    []string
		size   uint64
		String string
	}{
		{
			name: "v4 range with excludes and gateway",
			spec: Spec{Addresses: []string{"192.0.2.10-192.0.2.20"}, Prefix: 24, Gateway: "192.0.2.20", Exclude: []string{"192.0.2.15"}},
			in:   []string{"192.0.2.10", "192.0.2.14", "192.0.2.16", "192.0.2.19"},
			out:  []string{"192.0.2.9", "192.0.2.15", "192.0.2.20", "192.0.2.21", "2001:db8::10", "::ffff:192.0.2.10"},
			size: 9, String: "192.0.2.10-192.0.2.20 (11 addresses, 2 excluded)",
		},
		{
			name: "v4 whole /24: network and broadcast",
			spec: Spec{Addresses: []string{"192.0.2.0/24"}, Prefix: 24, Gateway: "192.0.2.1"},
			in:   []string{"192.0.2.2", "192.0.2.254"},
			out:  []string{"192.0.2.0", "192.0.2.1", "192.0.2.255"},
			size: 253, String: "192.0.2.0/24 (256 addresses, 3 excluded)",
		},
		{
			name: "v4 /31 has no network or broadcast",
			spec: Spec{Addresses: []string{"192.0.2.0/31"}, Prefix: 31},
			in:   []string{"192.0.2.0", "192.0.2.1"},
			size: 2, String: "192.0.2.0/31 (2 addresses)",
		},
		{
			name: "v4 several entries, exclude ranges across them",
			spec: Spec{Addresses: []string{"10.1.0.0/30", "10.1.2.5", "10.1.1.250-10.1.2.3"}, Prefix: 16,
				Exclude: []string{"10.1.1.254-10.1.2.1", "10.1.0.2/31"}},
			in:   []string{"10.1.0.1", "10.1.2.5", "10.1.1.253", "10.1.2.2", "10.1.2.3"},
			out:  []string{"10.1.0.0", "10.1.0.2", "10.1.0.3", "10.1.1.255", "10.1.2.0", "10.1.2.4"},
			size: 1 + 1 + 4 + 2, String: "10.1.0.0/30, 10.1.2.5 and 1 more (15 addresses, 7 excluded)",
		},
		{
			name: "v6 /64 with gateway",
			spec: Spec{Addresses: []string{"2001:db8:0:1::/64"}, Prefix: 64, Gateway: "2001:db8:0:1::1"},
			in:   []string{"2001:db8:0:1::2", "2001:db8:0:1:ffff:ffff:ffff:ffff"},
			out:  []string{"2001:db8:0:1::", "2001:db8:0:1::1", "2001:db8:0:2::", "192.0.2.1", "fe80::2"},
			size: math.MaxUint64 - 1, String: "2001:db8:0:1::/64 (18446744073709551616 addresses, 2 excluded)",
		},
		{
			name: "v6 /56 saturates",
			spec: Spec{Addresses: []string{"2001:db8:0:100::/56"}, Prefix: 56},
			in:   []string{"2001:db8:0:1ff::1"},
			out:  []string{"2001:db8:0:100::"},
			size: math.MaxUint64,
		},
		{
			name: "v6 range, excluded cidr",
			spec: Spec{Addresses: []string{"2001:db8::10-2001:db8::1f"}, Prefix: 64, Exclude: []string{"2001:db8::18/125"}},
			in:   []string{"2001:db8::10", "2001:db8::17"},
			out:  []string{"2001:db8::18", "2001:db8::1f", "2001:db8::20"},
			size: 8, String: "2001:db8::10-2001:db8::1f (16 addresses, 8 excluded)",
		},
		{
			name: "single address",
			spec: Spec{Addresses: []string{"192.0.2.7"}, Prefix: 24},
			in:   []string{"192.0.2.7"},
			size: 1, String: "192.0.2.7 (1 address)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, tc.spec)
			for _, a := range tc.in {
				if !p.Contains(ip(a)) {
					t.Errorf("Contains(%s) = false, want true", a)
				}
			}
			for _, a := range tc.out {
				if p.Contains(ip(a)) {
					t.Errorf("Contains(%s) = true, want false", a)
				}
			}
			if p.Contains(netip.Addr{}) {
				t.Errorf("Contains(invalid) = true")
			}
			if got := p.Size(); got != tc.size {
				t.Errorf("Size() = %d, want %d", got, tc.size)
			}
			if tc.String != "" && p.String() != tc.String {
				t.Errorf("String() = %q, want %q", p.String(), tc.String)
			}
		})
	}
}

func TestPoolAccessors(t *testing.T) {
	p := mustPool(t, Spec{Addresses: []string{"192.0.2.10"}, Prefix: 24, Gateway: "192.0.2.1", DNSServers: []string{"192.0.2.53", "192.0.2.54"}})
	if p.Prefix() != 24 || p.Gateway() != ip("192.0.2.1") || p.Network() != netip.MustParsePrefix("192.0.2.0/24") {
		t.Errorf("Prefix, Gateway, Network = %d, %s, %s", p.Prefix(), p.Gateway(), p.Network())
	}
	dns := p.DNS()
	if len(dns) != 2 || dns[0] != ip("192.0.2.53") || dns[1] != ip("192.0.2.54") {
		t.Errorf("DNS() = %v", dns)
	}
	dns[0] = ip("198.51.100.1")
	if p.DNS()[0] != ip("192.0.2.53") {
		t.Errorf("DNS() shares the pool's slice")
	}
	if g := mustPool(t, Spec{Addresses: []string{"192.0.2.10"}, Prefix: 24}).Gateway(); g.IsValid() {
		t.Errorf("Gateway() of a pool without one = %s", g)
	}
}

// held is an inUse over a set, counting its calls.
type held struct {
	set   map[netip.Addr]bool
	calls int
}

func heldOf(addrs ...string) *held {
	h := &held{set: map[netip.Addr]bool{}}
	for _, a := range addrs {
		h.set[ip(a)] = true
	}
	return h
}

func (h *held) inUse(a netip.Addr) bool { h.calls++; return h.set[a] }

func TestAllocate(t *testing.T) {
	v4 := Spec{Addresses: []string{"192.0.2.10-192.0.2.20"}, Prefix: 24, Gateway: "192.0.2.12", Exclude: []string{"192.0.2.14-192.0.2.15"}}
	for _, tc := range []struct {
		name string
		spec Spec
		want string
		held []string
		got  string
		err  error
	}{
		{name: "lowest", spec: v4, got: "192.0.2.10"},
		{name: "skips held, gateway, excluded", spec: v4, held: []string{"192.0.2.10", "192.0.2.11", "192.0.2.13"}, got: "192.0.2.16"},
		{name: "want free", spec: v4, want: "192.0.2.18", held: []string{"192.0.2.10"}, got: "192.0.2.18"},
		{name: "want held", spec: v4, want: "192.0.2.18", held: []string{"192.0.2.18"}, err: ErrHeld},
		{name: "want outside", spec: v4, want: "192.0.2.30", err: ErrOutside},
		{name: "want excluded", spec: v4, want: "192.0.2.14", err: ErrOutside},
		{name: "want gateway", spec: v4, want: "192.0.2.12", err: ErrOutside},
		{name: "want other family", spec: v4, want: "2001:db8::10", err: ErrOutside},
		{name: "exhausted", spec: v4, held: []string{"192.0.2.10", "192.0.2.11", "192.0.2.13", "192.0.2.16", "192.0.2.17", "192.0.2.18", "192.0.2.19", "192.0.2.20"}, err: ErrExhausted},
		{name: "order written, not ascending",
			spec: Spec{Addresses: []string{"192.0.2.200-192.0.2.201", "192.0.2.5"}, Prefix: 24}, held: []string{"192.0.2.200"}, got: "192.0.2.201"},
		{name: "next entry when the first is full",
			spec: Spec{Addresses: []string{"192.0.2.200-192.0.2.201", "192.0.2.5"}, Prefix: 24}, held: []string{"192.0.2.200", "192.0.2.201"}, got: "192.0.2.5"},
		{name: "entry wholly excluded",
			spec: Spec{Addresses: []string{"192.0.2.64/30", "192.0.2.9"}, Prefix: 24, Exclude: []string{"192.0.2.60-192.0.2.70"}}, got: "192.0.2.9"},
		{name: "network address skipped", spec: Spec{Addresses: []string{"192.0.2.0/24"}, Prefix: 24}, got: "192.0.2.1"},
		{name: "broadcast not allocated",
			spec: Spec{Addresses: []string{"192.0.2.252/30"}, Prefix: 24}, held: []string{"192.0.2.252", "192.0.2.253", "192.0.2.254"}, err: ErrExhausted},
		{name: "top of the v6 space",
			spec: Spec{Addresses: []string{"2001:db8::ffff-2001:db8::1:0"}, Prefix: 64}, held: []string{"2001:db8::ffff"}, got: "2001:db8::1:0"},
		{name: "last v6 address of a /64",
			spec: Spec{Addresses: []string{"2001:db8::ffff:ffff:ffff:fffe/127"}, Prefix: 64}, held: []string{"2001:db8::ffff:ffff:ffff:fffe"}, got: "2001:db8::ffff:ffff:ffff:ffff"},
		{name: "invalid want means lowest", spec: v4, held: []string{"192.0.2.10"}, got: "192.0.2.11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, tc.spec)
			var want netip.Addr
			if tc.want != "" {
				want = ip(tc.want)
			}
			h := heldOf(tc.held...)
			got, err := p.Allocate(want, h.inUse)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Allocate = %v, %v; want %v", got, err, tc.err)
				}
				if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, p.String()) {
					t.Errorf("error %q is not one line describing the pool %q", msg, p)
				}
				return
			}
			if err != nil || got != ip(tc.got) {
				t.Fatalf("Allocate = %v, %v; want %s", got, err, tc.got)
			}
		})
	}
}

func TestAllocateNilInUse(t *testing.T) {
	p := mustPool(t, Spec{Addresses: []string{"192.0.2.10-192.0.2.20"}, Prefix: 24})
	if got, err := p.Allocate(netip.Addr{}, nil); err != nil || got != ip("192.0.2.10") {
		t.Errorf("Allocate(nil inUse) = %v, %v", got, err)
	}
}

// TestAllocateHugePoolBounded: a /64 whose low addresses are excluded
// or held, in blocks of millions and thousands, is searched in steps
// proportional to what is held, not to the pool.
func TestAllocateHugePoolBounded(t *testing.T) {
	// Excluded: the lowest 2^24 (gateway within), and after 5000 held a
	// block of about 2^32; then 1000 more held.
	const heldFirst, heldThen = 5000, 1000
	start := ip("2001:db8:0:1::100:0")
	gapLo := start
	for range heldFirst {
		gapLo = gapLo.Next()
	}
	gapHi := ip("2001:db8:0:1::1:0:0")
	p := mustPool(t, Spec{Addresses: []string{"2001:db8:0:1::/64"}, Prefix: 64, Gateway: "2001:db8:0:1::1",
		Exclude: []string{"2001:db8:0:1::/104", gapLo.String() + "-" + gapHi.String()}})
	h := &held{set: map[netip.Addr]bool{}}
	for a := start; a != gapLo; a = a.Next() {
		h.set[a] = true
	}
	want := gapHi.Next()
	for range heldThen {
		h.set[want] = true
		want = want.Next()
	}
	got, err := p.Allocate(netip.Addr{}, h.inUse)
	if err != nil || got != want {
		t.Fatalf("Allocate = %v, %v; want %s", got, err, want)
	}
	if h.calls > len(h.set)+1 {
		t.Errorf("Allocate asked inUse %d times for %d held addresses", h.calls, len(h.set))
	}
	// 2^64 less the low 2^24 and the gap ::100:1388-::1:0:0.
	const gap = 0x1_0000_0000 - (0x100_0000 + heldFirst) + 1
	if n, want := p.Size(), uint64(math.MaxUint64)-(1<<24)-gap+1; n != want {
		t.Errorf("Size() = %d, want %d", n, want)
	}
}
