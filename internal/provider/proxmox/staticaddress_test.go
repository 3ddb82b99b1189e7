package proxmox

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
)

func docStatic() *provider.StaticAddress {
	return &provider.StaticAddress{Address: netip.MustParsePrefix("192.0.2.77/24"), Gateway: netip.MustParseAddr("192.0.2.1"),
		DNS: []netip.Addr{netip.MustParseAddr("192.0.2.53")}}
}

// vmConfigValue is key's value in VM vmid's config on the fake.
func (e *env) vmConfigValue(t *testing.T, vmid int, key string) string {
	t.Helper()
	vm, ok := e.fake.VM(vmid)
	if !ok {
		t.Fatalf("no VM %d", vmid)
	}
	for _, kv := range vm.Config {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// A Create with a static address puts it in the seed's network-config,
// matched by the MAC the VM's net0 has: the one the provider writes on the
// configured bridge, or the clone's when the template's net0 stays. The
// guest (the fake's, as cloud-init would) takes it and Get reports it.
// Without one, the seed has no network-config and net0 is written as
// before.
func TestCreateStaticAddress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bridge string
		static *provider.StaticAddress
		// wantNet0 is net0 as the VM has it after the create; empty: the
		// template's, with the MAC the clone gave it.
		wantNet0 func(name string) string
	}{
		{"on the bridge", "vmbr1", docStatic(), func(name string) string { return "virtio=" + vmMAC(name) + ",bridge=vmbr1" }},
		{"the template's NIC", "", docStatic(), nil},
		// PVE generates a MAC for a net0 written without one.
		{"DHCP on the bridge", "vmbr1", nil, func(string) string { return "virtio=<generated>,bridge=vmbr1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.Bridge = tc.bridge
			p := e.newProvider(t, testInstallation)
			req := request("proxy-static", "31111111-2222-3333-4444-555555555555")
			req.StaticAddress = tc.static
			in, err := p.Create(context.Background(), req)
			must(t, err)
			got := waitRunning(t, p, in.ID)
			vmid, _, err := parseID(in.ID)
			must(t, err)

			net0 := e.vmConfigValue(t, vmid, "net0")
			mac := macOfNet(net0)
			if tc.wantNet0 != nil {
				if want := tc.wantNet0(req.Name); strings.Replace(want, "<generated>", mac, 1) != net0 || mac == "" {
					t.Errorf("net0 = %q, want %q", net0, want)
				}
			}
			if tc.static == nil && mac == vmMAC(req.Name) {
				t.Errorf("net0 %q has the static address's MAC without one", net0)
			}
			if tc.static == nil {
				var iso []byte
				for _, v := range e.fake.Volumes("pve1", "local") {
					if sv, ok := parseSeedName(strings.TrimPrefix(v.Name, "iso/")); ok && sv.Instance == req.Name {
						iso = v.Data
					}
				}
				if netcfg, found, err := nocloud.ReadFile(iso, nocloud.FileNetworkConfig); err != nil || found {
					t.Errorf("a seed without a static address holds a network-config (%v): %s", err, netcfg.Reveal())
				}
				if strings.HasPrefix(got.IP, "192.0.2.77") {
					t.Errorf("Get reports %s without a static address", got.IP)
				}
				return
			}
			static, match, err := nocloud.ParseNetworkConfig([]byte(seedISOFile(t, e.fake, "pve1", req.Name, nocloud.FileNetworkConfig)))
			must(t, err)
			if !reflect.DeepEqual(static, *tc.static) || match.MAC == "" || match.MAC != strings.ToLower(mac) {
				t.Errorf("the seed configures %+v on %+v; want %+v on net0's MAC (%s)", static, match, *tc.static, net0)
			}
			if got.IP != tc.static.Address.Addr().String() {
				t.Errorf("Get reports %q, want the static address %s", got.IP, tc.static.Address.Addr())
			}
		})
	}
}

// A static address that cannot take effect is refused before any request.
func TestCreateRefusesStaticAddress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		static provider.StaticAddress
		want   string
	}{
		{"IPv6", provider.StaticAddress{Address: netip.MustParsePrefix("2001:db8::77/64")}, "staticAddress.address 2001:db8::77/64: not IPv4"},
		{"gateway off the network", provider.StaticAddress{Address: netip.MustParsePrefix("192.0.2.77/24"), Gateway: netip.MustParseAddr("198.51.100.1")},
			"staticAddress.gateway 198.51.100.1: not another address in 192.0.2.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			req := request("proxy-static", "31111111-2222-3333-4444-555555555555")
			req.StaticAddress = &tc.static
			_, err := e.p.Create(context.Background(), req)
			if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create: %v; want Permanent containing %q", err, tc.want)
			}
			if ids := e.fake.VMIDs(); len(ids) != 1 {
				t.Errorf("a refused Create left VMs %v beside the template", ids)
			}
		})
	}
}

func TestMACOfNet(t *testing.T) {
	for in, want := range map[string]string{
		"virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1":    "BC:24:11:2E:C5:4A",
		"model=virtio,macaddr=52:54:00:12:34:56,bridge=vmbr0": "52:54:00:12:34:56",
		"virtio,bridge=vmbr0":                                 "",
		"":                                                    "",
	} {
		if got := macOfNet(in); got != want {
			t.Errorf("macOfNet(%q) = %q, want %q", in, got, want)
		}
	}
}
