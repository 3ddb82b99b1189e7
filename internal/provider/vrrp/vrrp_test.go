package vrrp

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	include := "    include " + PeersPath + "\n"
	for _, tc := range []struct {
		name    string
		m       Member
		want    []string
		notWant []string
	}{{
		name: "IPv4: the peers included, the address on the NIC, the check tracked",
		m:    member(),
		want: []string{
			"    state BACKUP\n    nopreempt\n",
			"    interface eth0\n",
			"    virtual_router_id 7\n",
			"    priority 254\n",
			"    advert_int 1\n",
			include,
			"    virtual_ipaddress {\n        192.0.2.100/24 dev eth0\n    }\n",
			"    script \"" + CheckPath + " 3128\"\n",
			"    track_script {\n        egress_proxy_serving\n    }\n",
			"    script_user nobody\n    enable_script_security\n",
		},
		// The peers live in PeersPath only: a change of members must not
		// change this file (that would replace the member).
		notWant: []string{"version", "authentication", "state MASTER", "mcast", "unicast", "192.0.2.11", "192.0.2.12"},
	}, {
		name:    "IPv6 needs VRRP version 3",
		m:       v6,
		want:    []string{"    version 3\n", include, "        2001:db8::100/64 dev eth0\n"},
		notWant: []string{"192.0.2", "unicast", "2001:db8::11"},
	}, {
		name:    "a group of one includes the (then empty) peers too",
		m:       Member{Interface: "eth0", Self: member().Self, Virtual: member().Virtual, RouterID: 7, Priority: 254, Port: 3128},
		want:    []string{include, "    virtual_ipaddress {\n        192.0.2.100/24 dev eth0\n    }\n"},
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

// TestConfigIgnoresThePeers: the members' lists are the one thing a
// change of the group changes, and keepalived.conf does not depend on
// them, so a member whose peers change keeps its configuration.
func TestConfigIgnoresThePeers(t *testing.T) {
	m := member()
	with, err := Config("test", m)
	if err != nil {
		t.Fatal(err)
	}
	m.Peers = []netip.Addr{netip.MustParseAddr("192.0.2.13")}
	other, err := Config("test", m)
	if err != nil {
		t.Fatal(err)
	}
	m.Peers = nil
	none, err := Config("test", m)
	if err != nil {
		t.Fatal(err)
	}
	if with != other || with != none {
		t.Errorf("the configuration follows the peers:\n%s\n---\n%s\n---\n%s", with, other, none)
	}
}

func TestPeers(t *testing.T) {
	const comment = "# The group's other members, written by egress-proxies-operator; rewritten in place when they change.\n"
	v4 := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	self := netip.MustParseAddr("192.0.2.10")
	for _, tc := range []struct {
		name    string
		self    netip.Addr
		peers   []netip.Addr
		want    string // the whole file
		wantErr string
	}{{
		name:  "IPv4: unicast from self to each peer",
		self:  self,
		peers: v4("192.0.2.11", "192.0.2.12"),
		want:  comment + "unicast_src_ip 192.0.2.10\nunicast_peer {\n    192.0.2.11\n    192.0.2.12\n}\n",
	}, {
		name:  "IPv6",
		self:  netip.MustParseAddr("2001:db8::10"),
		peers: v4("2001:db8::11"),
		want:  comment + "unicast_src_ip 2001:db8::10\nunicast_peer {\n    2001:db8::11\n}\n",
	}, {
		// keepalived reads an empty unicast_peer block as multicast
		// anyway; the comment keeps the file from being empty and says
		// who writes it.
		name: "a group of one: no unicast block",
		self: self,
		want: comment,
	}, {
		name:    "no self",
		peers:   v4("192.0.2.11"),
		wantErr: "self: no address",
	}, {
		name:    "self among the peers",
		self:    self,
		peers:   v4("192.0.2.11", "192.0.2.10"),
		wantErr: "peers[1]: 192.0.2.10 is the member's own address",
	}, {
		name:    "a peer of another family",
		self:    self,
		peers:   v4("2001:db8::1"),
		wantErr: "peers[0]: 2001:db8::1 is not of self's family",
	}, {
		name:    "a peer twice",
		self:    self,
		peers:   v4("192.0.2.11", "192.0.2.11"),
		wantErr: "peers[1]: 192.0.2.11 is listed twice",
	}, {
		name:    "no peer address",
		self:    self,
		peers:   []netip.Addr{{}, netip.MustParseAddr("192.0.2.11")},
		wantErr: "peers[0]: no address",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Peers(tc.self, tc.peers)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v (content %q), want one naming %q", err, got, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
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
	if Priority(0) != 254 || Priority(-1) == 0 || Priority(1000) == 0 {
		t.Errorf("priorities: %d %d %d", Priority(0), Priority(-1), Priority(1000))
	}
	// Every member of the largest group (8) takes over at least 100 ms
	// before the next: VRRP's skew is (256-priority)/256 s.
	skew := func(i int) time.Duration { return time.Duration(256-int(Priority(i))) * time.Second / 256 }
	for i := 0; i < 7; i++ {
		if d := skew(i+1) - skew(i); d < 100*time.Millisecond {
			t.Errorf("members %d and %d (priorities %d, %d): skews %s apart, want 100ms or more", i, i+1, Priority(i), Priority(i+1), d)
		}
	}
	if Priority(7) < 1 || Priority(7) > 254 {
		t.Errorf("member 7's priority %d is outside 1-254", Priority(7))
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

func TestSysctlCommandFollowsTheFamily(t *testing.T) {
	if got := SysctlCommand(netip.MustParseAddr("192.0.2.1")); got != "sysctl -w net.ipv4.ip_nonlocal_bind=1" {
		t.Errorf("IPv4: %q", got)
	}
	if got := SysctlCommand(netip.MustParseAddr("2001:db8::1")); got != "sysctl -w net.ipv6.ip_nonlocal_bind=1" {
		t.Errorf("IPv6: %q", got)
	}
}

// TestApplyPeers runs ApplyPeers' command with PeersPath moved into a
// temporary directory and a systemctl that records what it was asked and
// what the file held then: the file is replaced by another (a rename, so
// a reload never reads half of it) and keepalived reloaded after.
func TestApplyPeers(t *testing.T) {
	cmd := ApplyPeers()
	script := cmd[len(cmd)-1]
	for _, w := range []string{PeersPath, Service, "mv -f ", "try-reload-or-restart"} {
		if !strings.Contains(script, w) {
			t.Errorf("%q does not mention %q", script, w)
		}
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh to run it")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "peers.conf")
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := "#!/bin/sh\necho \"$*\" > " + filepath.Join(dir, "args") + "\ncat " + path + " > " + filepath.Join(dir, "seen") + "\n"
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	content, err := Peers(netip.MustParseAddr("192.0.2.10"), []netip.Addr{netip.MustParseAddr("192.0.2.11")})
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(cmd[0], append(cmd[1:len(cmd)-1], strings.ReplaceAll(script, PeersPath, path))...)
	c.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin")
	c.Stdin = strings.NewReader(content)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Errorf("%s was written in place, not replaced", path)
	}
	for name, want := range map[string]string{"peers.conf": content, "seen": content, "args": "try-reload-or-restart " + Service + "\n"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s holds %q, want %q", name, got, want)
		}
	}
	if _, err := os.Stat(path + ".new"); !os.IsNotExist(err) {
		t.Errorf("%s.new is left behind (%v)", path, err)
	}
}
