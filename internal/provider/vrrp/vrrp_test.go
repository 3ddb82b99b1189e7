package vrrp

import (
	"net/netip"
	"strings"
	"testing"
)

func member() Member {
	return Member{
		Interface: "eth0",
		Self:      netip.MustParseAddr("192.0.2.10"),
		Peers:     []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")},
		Virtual:   netip.MustParsePrefix("192.0.2.100/24"),
		RouterID:  7,
		Priority:  254,
		Port:      3128,
	}
}

func TestConfig(t *testing.T) {
	v6 := member()
	v6.Self = netip.MustParseAddr("2001:db8::10")
	v6.Peers = []netip.Addr{netip.MustParseAddr("2001:db8::11")}
	v6.Virtual = netip.MustParsePrefix("2001:db8::100/64")
	for _, tc := range []struct {
		name    string
		m       Member
		want    []string
		notWant []string
	}{{
		name: "IPv4: unicast from self to each peer, the address on the NIC, the check tracked",
		m:    member(),
		want: []string{
			"    state BACKUP\n    nopreempt\n",
			"    interface eth0\n",
			"    virtual_router_id 7\n",
			"    priority 254\n",
			"    advert_int 1\n",
			"    unicast_src_ip 192.0.2.10\n",
			"    unicast_peer {\n        192.0.2.11\n        192.0.2.12\n    }\n",
			"    virtual_ipaddress {\n        192.0.2.100/24 dev eth0\n    }\n",
			"    script \"" + CheckPath + " 3128\"\n",
			"    track_script {\n        egress_proxy_serving\n    }\n",
			"    script_user nobody\n    enable_script_security\n",
		},
		notWant: []string{"version", "authentication", "state MASTER", "mcast"},
	}, {
		name:    "IPv6 needs VRRP version 3",
		m:       v6,
		want:    []string{"    version 3\n", "    unicast_src_ip 2001:db8::10\n", "        2001:db8::100/64 dev eth0\n"},
		notWant: []string{"192.0.2"},
	}, {
		name:    "a group of one: no unicast block (keepalived would read an empty one as multicast anyway)",
		m:       Member{Interface: "eth0", Self: member().Self, Virtual: member().Virtual, RouterID: 7, Priority: 254, Port: 3128},
		want:    []string{"    virtual_ipaddress {\n        192.0.2.100/24 dev eth0\n    }\n"},
		notWant: []string{"unicast"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Config("test", tc.m)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("holds %q:\n%s", w, got)
				}
			}
			if strings.Count(got, "{") != strings.Count(got, "}") {
				t.Errorf("unbalanced braces:\n%s", got)
			}
		})
	}
}

func TestConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Member)
		want string
	}{
		{"no interface", func(m *Member) { m.Interface = "" }, `interface "" is not an interface name`},
		{"an interface that would break the file", func(m *Member) { m.Interface = "eth0 }" }, `interface "eth0 }"`},
		{"no self", func(m *Member) { m.Self = netip.Addr{} }, "self: no address"},
		{"no virtual", func(m *Member) { m.Virtual = netip.Prefix{} }, "virtual: no address"},
		{"families differ", func(m *Member) { m.Virtual = netip.MustParsePrefix("2001:db8::1/64") }, "virtual 2001:db8::1 and self 192.0.2.10 are of different families"},
		{"virtual is self", func(m *Member) { m.Virtual = netip.MustParsePrefix("192.0.2.10/24") }, "virtual 192.0.2.10 is the member's own address"},
		{"self among peers", func(m *Member) { m.Peers[1] = m.Self }, "peers[1]: 192.0.2.10 is the member's own address"},
		{"virtual among peers", func(m *Member) { m.Peers[0] = m.Virtual.Addr() }, "peers[0]: 192.0.2.100 is the virtual address"},
		{"peer twice", func(m *Member) { m.Peers[1] = m.Peers[0] }, "peers[1]: 192.0.2.11 is listed twice"},
		{"peer of another family", func(m *Member) { m.Peers[0] = netip.MustParseAddr("2001:db8::1") }, "peers[0]: 2001:db8::1 is not of self's family"},
		{"router ID 0", func(m *Member) { m.RouterID = 0 }, "routerID: 0"},
		{"owner priority", func(m *Member) { m.Priority = 255 }, "priority: 255 is reserved"},
		{"port", func(m *Member) { m.Port = 0 }, "port 0 is outside 1-65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := member()
			m.Peers = append([]netip.Addr(nil), m.Peers...)
			tc.edit(&m)
			_, err := Config("test", m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestRouterIDAndPriority(t *testing.T) {
	seen := map[uint8]bool{}
	for _, g := range []string{"a", "b", "c", "8f0c3a4e-1b2d-4c5e-9f60-7a8b9c0d1e2f", ""} {
		id := RouterID(g)
		if id == 0 {
			t.Errorf("RouterID(%q) = 0", g)
		}
		if RouterID(g) != id {
			t.Errorf("RouterID(%q) is not stable", g)
		}
		seen[id] = true
	}
	if len(seen) < 4 {
		t.Errorf("5 groups drew only %d router IDs", len(seen))
	}
	if Priority(0) <= Priority(1) || Priority(0) == 255 || Priority(-1) == 0 || Priority(1000) == 0 {
		t.Errorf("priorities: %d %d %d %d", Priority(0), Priority(1), Priority(-1), Priority(1000))
	}
}

func TestSysctlFollowsTheFamily(t *testing.T) {
	if got := Sysctl(netip.MustParseAddr("192.0.2.1")); got != "net.ipv4.ip_nonlocal_bind = 1\n" {
		t.Errorf("IPv4: %q", got)
	}
	if got := Sysctl(netip.MustParseAddr("2001:db8::1")); got != "net.ipv6.ip_nonlocal_bind = 1\n" {
		t.Errorf("IPv6: %q", got)
	}
}
