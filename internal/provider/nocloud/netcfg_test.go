package nocloud

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// networkConfigCase is one static address as a provider passes it, and the
// network config it must give.
type networkConfigCase struct {
	name string
	addr provider.StaticAddress
	mac  string
	want string
}

func staticAddr(prefix, gateway string, dns ...string) provider.StaticAddress {
	a := provider.StaticAddress{Address: netip.MustParsePrefix(prefix)}
	if gateway != "" {
		a.Gateway = netip.MustParseAddr(gateway)
	}
	for _, d := range dns {
		a.DNS = append(a.DNS, netip.MustParseAddr(d))
	}
	return a
}

// networkConfigCases are the shapes the providers produce; the real
// cloud-init reads each (netcfg_cloudinit_test.go).
var networkConfigCases = []networkConfigCase{
	{
		name: "by MAC, gateway and two resolvers",
		addr: staticAddr("192.0.2.77/24", "192.0.2.1", "192.0.2.53", "2001:db8::53"),
		mac:  "52:54:00:ab:cd:ef",
		want: `ethernets:
  eth0:
    addresses:
    - 192.0.2.77/24
    dhcp4: false
    dhcp6: false
    match:
      macaddress: 52:54:00:ab:cd:ef
    nameservers:
      addresses:
      - 192.0.2.53
      - 2001:db8::53
    routes:
    - to: 0.0.0.0/0
      via: 192.0.2.1
    set-name: eth0
version: 2
`,
	},
	{
		// All digits and colons: YAML 1.1 (PyYAML, cloud-init's) reads it
		// unquoted as a base-60 integer, and cloud-init then fails.
		name: "by a MAC YAML 1.1 would read as a number, upper case",
		addr: staticAddr("198.51.100.9/28", "198.51.100.14"),
		mac:  "52:54:00:12:34:56",
		want: `ethernets:
  eth0:
    addresses:
    - 198.51.100.9/28
    dhcp4: false
    dhcp6: false
    match:
      macaddress: "52:54:00:12:34:56"
    routes:
    - to: 0.0.0.0/0
      via: 198.51.100.14
    set-name: eth0
version: 2
`,
	},
	{
		name: "by MAC in upper case, no gateway, no resolvers",
		addr: staticAddr("203.0.113.5/24", ""),
		mac:  "BC:24:11:2E:C5:4A",
		want: `ethernets:
  eth0:
    addresses:
    - 203.0.113.5/24
    dhcp4: false
    dhcp6: false
    match:
      macaddress: bc:24:11:2e:c5:4a
    set-name: eth0
version: 2
`,
	},
	{
		name: "by name, gateway and a resolver",
		addr: staticAddr("192.0.2.77/24", "192.0.2.1", "192.0.2.53"),
		want: `ethernets:
  e*:
    addresses:
    - 192.0.2.77/24
    dhcp4: false
    dhcp6: false
    match:
      name: e*
    nameservers:
      addresses:
      - 192.0.2.53
    routes:
    - to: 0.0.0.0/0
      via: 192.0.2.1
version: 2
`,
	},
	{
		name: "IPv6 by MAC: the gateway as gateway6",
		addr: staticAddr("2001:db8:0:1::77/64", "2001:db8:0:1::1", "2001:db8::53"),
		mac:  "52:54:00:ab:cd:ef",
		want: `ethernets:
  eth0:
    addresses:
    - 2001:db8:0:1::77/64
    dhcp4: false
    dhcp6: false
    gateway6: 2001:db8:0:1::1
    match:
      macaddress: 52:54:00:ab:cd:ef
    nameservers:
      addresses:
      - 2001:db8::53
    set-name: eth0
version: 2
`,
	},
}

func TestNetworkConfig(t *testing.T) {
	for _, tc := range networkConfigCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NetworkConfig(tc.addr, tc.mac)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("NetworkConfig =\n%s\nwant\n%s", got, tc.want)
			}
			// The fakes read it back as the guest's cloud-init would.
			addr, match, err := ParseNetworkConfig(got)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(addr, tc.addr) {
				t.Errorf("read back %+v, want %+v", addr, tc.addr)
			}
			if want := (NICMatch{MAC: strings.ToLower(tc.mac)}); tc.mac != "" && match != want {
				t.Errorf("read back match %+v, want %+v", match, want)
			}
			if tc.mac == "" && match != (NICMatch{Name: "e*"}) {
				t.Errorf("read back match %+v, want the name glob e*", match)
			}
		})
	}
}

func TestNetworkConfigRefuses(t *testing.T) {
	good := staticAddr("192.0.2.77/24", "192.0.2.1", "192.0.2.53")
	for _, tc := range []struct {
		name   string
		change func(*provider.StaticAddress)
		mac    string
		want   string
	}{
		{"no address", func(a *provider.StaticAddress) { a.Address = netip.Prefix{} }, "", "staticAddress.address: not an address"},
		{"loopback", func(a *provider.StaticAddress) {
			a.Address = netip.MustParsePrefix("127.0.0.5/8")
			a.Gateway = netip.Addr{}
		}, "", "staticAddress.address 127.0.0.5/8: not a unicast"},
		{"link-local", func(a *provider.StaticAddress) {
			a.Address = netip.MustParsePrefix("169.254.1.2/16")
			a.Gateway = netip.Addr{}
		}, "", "staticAddress.address 169.254.1.2/16: not a unicast"},
		{"multicast", func(a *provider.StaticAddress) {
			a.Address = netip.MustParsePrefix("224.0.0.5/24")
			a.Gateway = netip.Addr{}
		}, "", "staticAddress.address 224.0.0.5/24: not a unicast"},
		{"IPv4-mapped", func(a *provider.StaticAddress) {
			a.Address = netip.MustParsePrefix("::ffff:192.0.2.77/120")
			a.Gateway = netip.Addr{}
		}, "", "staticAddress.address ::ffff:192.0.2.77/120: a zone or an IPv4-mapped"},
		{"gateway of the other family", func(a *provider.StaticAddress) { a.Gateway = netip.MustParseAddr("2001:db8::1") }, "", "staticAddress.gateway 2001:db8::1: not of the address 192.0.2.77/24's family"},
		{"gateway off the network", func(a *provider.StaticAddress) { a.Gateway = netip.MustParseAddr("192.0.3.1") }, "", "staticAddress.gateway 192.0.3.1: not another address in 192.0.2.0/24"},
		{"gateway is the address", func(a *provider.StaticAddress) { a.Gateway = a.Address.Addr() }, "", "staticAddress.gateway 192.0.2.77: not another address"},
		{"unspecified resolver", func(a *provider.StaticAddress) { a.DNS = append(a.DNS, netip.IPv4Unspecified()) }, "", "staticAddress.dns[1] 0.0.0.0: not a resolver's address"},
		{"invalid resolver", func(a *provider.StaticAddress) { a.DNS = []netip.Addr{{}} }, "", "staticAddress.dns[0] invalid IP: not a resolver's address"},
		{"malformed MAC", func(*provider.StaticAddress) {}, "52:54:00:zz:00:01", `MAC "52:54:00:zz:00:01" is not a unicast Ethernet address`},
		{"MAC of 8 bytes", func(*provider.StaticAddress) {}, "02:00:5e:10:00:00:00:01", `MAC "02:00:5e:10:00:00:00:01" is not a unicast`},
		{"multicast MAC", func(*provider.StaticAddress) {}, "01:00:5e:00:00:01", `MAC "01:00:5e:00:00:01" is not a unicast`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := good
			a.DNS = append([]netip.Addr(nil), good.DNS...)
			tc.change(&a)
			out, err := NetworkConfig(a, tc.mac)
			if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NetworkConfig(%v, %q) = %q, %v; want ErrPermanent containing %q", a, tc.mac, out, err, tc.want)
			}
		})
	}
}

func TestNICMatch(t *testing.T) {
	for _, tc := range []struct {
		m         NICMatch
		name, mac string
		want      bool
	}{
		{NICMatch{MAC: "52:54:00:ab:cd:ef"}, "ens3", "52:54:00:AB:CD:EF", true},
		{NICMatch{MAC: "52:54:00:ab:cd:ef"}, "eth0", "52:54:00:ab:cd:e0", false},
		{NICMatch{Name: "e*"}, "enp1s0", "52:54:00:00:00:01", true},
		{NICMatch{Name: "e*"}, "lo", "00:00:00:00:00:00", false},
	} {
		if got := tc.m.Matches(tc.name, tc.mac); got != tc.want {
			t.Errorf("%+v.Matches(%q, %q) = %t, want %t", tc.m, tc.name, tc.mac, got, tc.want)
		}
	}
}

func TestParseNetworkConfigRefusesOtherShapes(t *testing.T) {
	for name, text := range map[string]string{
		"DHCP":               "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n    match: {name: e*}\n",
		"version 1":          "version: 1\nconfig: []\n",
		"two ethernets":      "version: 2\nethernets:\n  a: {addresses: [192.0.2.1/24], match: {name: a}}\n  b: {addresses: [192.0.2.2/24], match: {name: b}}\n",
		"no match":           "version: 2\nethernets:\n  eth0:\n    addresses: [192.0.2.1/24]\n",
		"an unknown key":     "version: 2\nethernets:\n  eth0:\n    addresses: [192.0.2.1/24]\n    match: {name: e*}\n    mtu: 1400\n",
		"a malformed prefix": "version: 2\nethernets:\n  eth0:\n    addresses: [192.0.2.1]\n    match: {name: e*}\n",
	} {
		if a, m, err := ParseNetworkConfig([]byte(text)); err == nil {
			t.Errorf("%s: read as %+v %+v, want an error", name, a, m)
		}
	}
}

// The network-config a provider puts in its seed is there, byte for byte,
// when the fakes read the image as the guest does; a seed without one has
// none.
func TestReadFileFindsTheNetworkConfig(t *testing.T) {
	netcfg, err := NetworkConfig(staticAddr("192.0.2.77/24", "192.0.2.1"), "52:54:00:ab:cd:ef")
	if err != nil {
		t.Fatal(err)
	}
	s := fullSeed()
	s.NetworkConfig = provider.Sensitive(netcfg)
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadFile(img, FileNetworkConfig)
	if err != nil || !ok || got.Reveal() != string(netcfg) {
		t.Fatalf("ReadFile(network-config) = %q, %t, %v; want %q", got.Reveal(), ok, err, netcfg)
	}
	if got, ok, err := ReadFile(img, FileUserData); err != nil || !ok || got != s.UserData {
		t.Fatalf("ReadFile(user-data): %t, %v, or the content differs", ok, err)
	}

	s.NetworkConfig = ""
	if img, err = Build(s); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadFile(img, FileNetworkConfig); err != nil || ok {
		t.Fatalf("ReadFile(network-config) of a seed without one: %t, %v", ok, err)
	}
	if _, _, err := ReadFile([]byte("not an image"), FileNetworkConfig); err == nil {
		t.Fatal("ReadFile of garbage: no error")
	}
}
