package libvirt

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

// docStatic is a static address from the documentation range, on the fake
// hosts' bridge.
func docStatic() *provider.StaticAddress {
	return &provider.StaticAddress{Address: netip.MustParsePrefix("192.0.2.77/24"), Gateway: netip.MustParseAddr("192.0.2.1"),
		DNS: []netip.Addr{netip.MustParseAddr("192.0.2.53")}}
}

// seedNetworkConfig is the network-config of the seed volume of the
// instance name that p created on h, and whether the seed has one.
func seedNetworkConfig(t *testing.T, p *Provider, h *fakeHost, req provider.CreateRequest) (string, bool) {
	t.Helper()
	h.mu.Lock()
	vol, ok := h.pools[DefaultPool].vols[seedName(req.Name, p.opts.InstallationID, req.UID)]
	h.mu.Unlock()
	if !ok {
		t.Fatalf("no seed volume of %s in %v", req.Name, poolVolumeNames(h))
	}
	netcfg, found, err := nocloud.ReadFile(vol.data, nocloud.FileNetworkConfig)
	if err != nil {
		t.Fatal(err)
	}
	return netcfg.Reveal(), found
}

// A Create with a static address puts it in the seed's network-config,
// matched by the MAC the domain's NIC has; the guest takes it (its agent
// reports it) and Get reports it as the instance's address. Without one
// the seed has no network-config and the guest asks DHCP.
func TestCreateStaticAddress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		static *provider.StaticAddress
		wantIP string
	}{
		{"static address", docStatic(), "192.0.2.77"},
		{"static address, no gateway or resolvers", &provider.StaticAddress{Address: netip.MustParsePrefix("198.51.100.9/28")}, "198.51.100.9"},
		{"DHCP", nil, dhcpAddress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newImageServer(t)
			h := newFakeHost("h1")
			p := newLifecycleProvider(t, srv, h)
			ctx := context.Background()
			req := testRequest("proxy-team-a-egress-0123456789")
			req.StaticAddress = tc.static
			inst, err := p.Create(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			waitSteps(t, p)

			netcfg, found := seedNetworkConfig(t, p, h, req)
			if found != (tc.static != nil) {
				t.Fatalf("the seed has a network-config: %t, want %t:\n%s", found, tc.static != nil, netcfg)
			}
			if tc.static != nil {
				got, match, err := nocloud.ParseNetworkConfig([]byte(netcfg))
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, *tc.static) || match.MAC != domainMAC(req.Name) {
					t.Errorf("the seed configures %+v on %+v, want %+v on MAC %s", got, match, *tc.static, domainMAC(req.Name))
				}
			}

			if err := h.bootGuest(req.Name); err != nil {
				t.Fatal(err)
			}
			got, err := p.Get(ctx, inst.ID)
			if err != nil || got.State != provider.StateRunning || got.IP != tc.wantIP {
				t.Fatalf("Get after the guest booted: %+v, %v; want Running at %s", got, err, tc.wantIP)
			}
		})
	}
}

// A static address that cannot take effect is refused before any dial,
// Permanent and naming what is wrong: on a host with QEMU's user-mode
// network, an IPv6 one (Get reports IPv4), one nocloud cannot render.
func TestCreateRefusesStaticAddress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		userNet bool
		static  provider.StaticAddress
		want    string
	}{
		{"user-mode network", true, *docStatic(), "host h1 has userNetworking"},
		{"IPv6", false, provider.StaticAddress{Address: netip.MustParsePrefix("2001:db8::77/64")}, "staticAddress.address 2001:db8::77/64: not IPv4"},
		{"gateway off the network", false, provider.StaticAddress{Address: netip.MustParsePrefix("192.0.2.77/24"), Gateway: netip.MustParseAddr("198.51.100.1")},
			"staticAddress.gateway 198.51.100.1: not another address in 192.0.2.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost("h1")
			p := newLifecycleProvider(t, newImageServer(t), h)
			if tc.userNet {
				p.hosts[0].Bridge, p.hosts[0].UserNetworking = "", true
			}
			req := testRequest("proxy-team-a-egress-0123456789")
			req.StaticAddress = &tc.static
			_, err := provider.WithBoundary("vms", TypeKVM2, p).Provider.Create(context.Background(), req)
			if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create: %v; want Permanent containing %q", err, tc.want)
			}
			if dials, _ := h.counts(); dials != 0 {
				t.Errorf("a refused Create dialled the host %d times", dials)
			}
		})
	}
}
