package libvirt

import (
	"testing"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func TestMapState(t *testing.T) {
	for _, tc := range []struct {
		state libvirt.DomainState
		ip    string
		want  provider.State
	}{
		{libvirt.DomainNostate, "", provider.StateProvisioning},
		{libvirt.DomainNostate, "198.51.100.10", provider.StateProvisioning},
		{libvirt.DomainRunning, "", provider.StateProvisioning},
		{libvirt.DomainRunning, "198.51.100.10", provider.StateRunning},
		{libvirt.DomainBlocked, "", provider.StateProvisioning},
		{libvirt.DomainBlocked, "198.51.100.10", provider.StateRunning},
		{libvirt.DomainPaused, "198.51.100.10", provider.StateStopped},
		{libvirt.DomainShutdown, "198.51.100.10", provider.StateStopped},
		{libvirt.DomainShutoff, "", provider.StateStopped},
		{libvirt.DomainCrashed, "", provider.StateStopped},
		{libvirt.DomainPmsuspended, "198.51.100.10", provider.StateStopped},
		{libvirt.DomainState(42), "198.51.100.10", provider.StateStopped},
	} {
		if got := mapState(tc.state, tc.ip); got != tc.want {
			t.Errorf("mapState(%s, %q) = %s, want %s", tc.state, tc.ip, got, tc.want)
		}
	}
}

func addr(typ libvirt.IPAddrType, a string) libvirt.DomainIPAddr {
	return libvirt.DomainIPAddr{Type: int32(typ), Addr: a, Prefix: 24}
}

func TestFirstRoutableIPv4(t *testing.T) {
	const mac = "52:54:00:aa:bb:cc"
	v4, v6 := libvirt.IPAddrTypeIpv4, libvirt.IPAddrTypeIpv6
	lo := libvirt.DomainInterface{Name: "lo", Hwaddr: libvirt.OptString{"00:00:00:00:00:00"}, Addrs: []libvirt.DomainIPAddr{addr(v4, "127.0.0.1")}}
	for _, tc := range []struct {
		name   string
		ifaces []libvirt.DomainInterface
		mac    string
		want   string
	}{
		{"agent answer with lo first", []libvirt.DomainInterface{lo,
			{Name: "ens2", Hwaddr: libvirt.OptString{mac}, Addrs: []libvirt.DomainIPAddr{addr(v6, "fe80::1"), addr(v4, "198.51.100.10")}}}, mac, "198.51.100.10"},
		{"MAC matched case-insensitively", []libvirt.DomainInterface{
			{Name: "ens2", Hwaddr: libvirt.OptString{"52:54:00:AA:BB:CC"}, Addrs: []libvirt.DomainIPAddr{addr(v4, "198.51.100.10")}}}, mac, "198.51.100.10"},
		{"other NIC skipped", []libvirt.DomainInterface{
			{Name: "docker0", Hwaddr: libvirt.OptString{"02:42:00:00:00:01"}, Addrs: []libvirt.DomainIPAddr{addr(v4, "172.17.0.1")}},
			{Name: "ens2", Hwaddr: libvirt.OptString{mac}, Addrs: []libvirt.DomainIPAddr{addr(v4, "198.51.100.11")}}}, mac, "198.51.100.11"},
		{"no MAC known: any NIC", []libvirt.DomainInterface{lo,
			{Name: "ens2", Addrs: []libvirt.DomainIPAddr{addr(v4, "198.51.100.12")}}}, "", "198.51.100.12"},
		{"source without hwaddr cannot match", []libvirt.DomainInterface{
			{Name: "vnet0", Addrs: []libvirt.DomainIPAddr{addr(v4, "198.51.100.13")}}}, mac, ""},
		{"link-local, unspecified, multicast, broadcast dropped", []libvirt.DomainInterface{
			{Name: "ens2", Hwaddr: libvirt.OptString{mac}, Addrs: []libvirt.DomainIPAddr{
				addr(v4, "169.254.3.4"), addr(v4, "0.0.0.0"), addr(v4, "224.0.0.1"), addr(v4, "255.255.255.255"), addr(v4, "198.51.100.14")}}}, mac, "198.51.100.14"},
		{"type and literal disagree", []libvirt.DomainInterface{
			{Name: "ens2", Hwaddr: libvirt.OptString{mac}, Addrs: []libvirt.DomainIPAddr{addr(v4, "2001:db8::1"), addr(v6, "198.51.100.15"), addr(v4, "not-an-ip")}}}, mac, ""},
		{"only IPv6", []libvirt.DomainInterface{
			{Name: "ens2", Hwaddr: libvirt.OptString{mac}, Addrs: []libvirt.DomainIPAddr{addr(v6, "2001:db8::2")}}}, mac, ""},
		{"nothing", nil, mac, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstRoutableIPv4(tc.ifaces, tc.mac); got != tc.want {
				t.Fatalf("= %q, want %q", got, tc.want)
			}
		})
	}
}
