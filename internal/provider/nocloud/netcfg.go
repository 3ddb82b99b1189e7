package nocloud

import (
	"fmt"
	"net"
	"net/netip"
	"path"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The ethernet's IDs in the network config, and the name a NIC matched by
// MAC is renamed to.
//
// Matched by MAC, the NIC is renamed to eth0 (set-name): cloud-init renames
// it itself before it renders, so every renderer (netplan, networkd, ENI)
// configures it under that name.
//
// Matched by name, the ID is the glob itself: cloud-init up to at least
// 22.4 (Debian 12) hands match: {name: ...} on to netplan only; its
// networkd renderer writes the ID as the [Match] Name=, which
// systemd-networkd reads as a glob too, so "e*" finds the NIC under
// whatever name udev gave it (ens3, enp1s0, eth0). Its ENI renderer
// (ifupdown) knows no globs: a guest rendering ENI needs the MAC.
const (
	// MACMatchedName is also what the guest's other configuration may
	// name the NIC by (a group member's keepalived).
	MACMatchedName = "eth0"
	nameGlob       = "e*"
)

// netConfigV2 is cloud-init's network config version 2 (netplan's format,
// without its top-level network: key), as much as NetworkConfig writes.
type netConfigV2 struct {
	Version   int                   `json:"version"`
	Ethernets map[string]ethernetV2 `json:"ethernets"`
}

type ethernetV2 struct {
	Match       matchV2        `json:"match"`
	SetName     string         `json:"set-name,omitempty"`
	DHCP4       bool           `json:"dhcp4"`
	DHCP6       bool           `json:"dhcp6"`
	Addresses   []string       `json:"addresses"`
	Routes      []routeV2      `json:"routes,omitempty"`
	Gateway6    string         `json:"gateway6,omitempty"`
	Nameservers *nameserversV2 `json:"nameservers,omitempty"`
}

type matchV2 struct {
	MACAddress string `json:"macaddress,omitempty"`
	Name       string `json:"name,omitempty"`
}

type routeV2 struct {
	To  string `json:"to"`
	Via string `json:"via"`
}

type nameserversV2 struct {
	Addresses []string `json:"addresses"`
}

// NetworkConfig renders a as the seed's network-config: cloud-init network
// config version 2 for one ethernet, DHCP off, a.Address on it, a default
// route via a.Gateway when it is valid, a.DNS as its resolvers when given.
// The NIC is matched by mac when it is given (and renamed to eth0), else by
// the name glob e* (see nameGlob for which renderers honour that).
//
// The default route is written as cloud-init 22.4 (Debian 12's) renders it
// right with every renderer (netplan, networkd, ENI), checked with its
// net-convert: for IPv4 a route to 0.0.0.0/0, not to "default", on which it
// fails the whole network config (it parses "to" as a network; only netplan
// and later cloud-init read "default"); for IPv6 gateway6, because it
// renders a route to ::/0 as one to ::/64. gateway6 is deprecated in
// netplan in favour of routes, and still read by netplan and cloud-init.
//
// A value that cannot be configured as given is ErrPermanent, naming the
// field of the request (staticAddress.address, .gateway, .dns[i]) or the
// MAC: an address that is not unicast, a gateway of the other family or
// outside the address's prefix (it would need an on-link route), a DNS
// address that is not valid.
func NetworkConfig(a provider.StaticAddress, mac string) ([]byte, error) {
	addr := a.Address.Addr()
	switch {
	case !a.Address.IsValid():
		return nil, provider.Errorf(provider.ErrPermanent, "staticAddress.address: not an address with a prefix length")
	case addr.Zone() != "" || addr.Is4In6():
		return nil, provider.Errorf(provider.ErrPermanent, "staticAddress.address %s: a zone or an IPv4-mapped IPv6 address cannot be configured", a.Address)
	case !addr.IsGlobalUnicast():
		return nil, provider.Errorf(provider.ErrPermanent, "staticAddress.address %s: not a unicast address a NIC can take (loopback, link-local, multicast or unspecified)", a.Address)
	}
	eth := ethernetV2{Addresses: []string{a.Address.String()}}
	if g := a.Gateway; g.IsValid() {
		switch {
		case g.Zone() != "" || g.Is4In6():
			return nil, provider.Errorf(provider.ErrPermanent, "staticAddress.gateway %s: a zone or an IPv4-mapped IPv6 address cannot be configured", g)
		case g.Is4() != addr.Is4():
			return nil, provider.Errorf(provider.ErrPermanent, "staticAddress.gateway %s: not of the address %s's family", g, a.Address)
		case !a.Address.Contains(g) || g == addr:
			return nil, provider.Errorf(provider.ErrPermanent, "staticAddress.gateway %s: not another address in %s, the address's network", g, a.Address.Masked())
		}
		if g.Is4() {
			eth.Routes = []routeV2{{To: "0.0.0.0/0", Via: g.String()}}
		} else {
			eth.Gateway6 = g.String()
		}
	}
	if len(a.DNS) > 0 {
		ns := &nameserversV2{}
		for i, d := range a.DNS {
			if !d.IsValid() || d.IsUnspecified() || d.IsMulticast() {
				return nil, provider.Errorf(provider.ErrPermanent, "staticAddress.dns[%d] %s: not a resolver's address", i, d)
			}
			ns.Addresses = append(ns.Addresses, d.String())
		}
		eth.Nameservers = ns
	}
	id := nameGlob
	if mac != "" {
		hw, err := net.ParseMAC(mac)
		if err != nil || len(hw) != 6 || hw[0]&1 != 0 {
			return nil, provider.Errorf(provider.ErrPermanent, "nocloud network-config: MAC %q is not a unicast Ethernet address", mac)
		}
		// Lower case: netplan wants it so; HardwareAddr.String gives it.
		id, eth.Match.MACAddress, eth.SetName = MACMatchedName, hw.String(), MACMatchedName
	} else {
		eth.Match.Name = nameGlob
	}
	out, err := yaml.Marshal(netConfigV2{Version: 2, Ethernets: map[string]ethernetV2{id: eth}})
	if err != nil {
		return nil, fmt.Errorf("nocloud network-config: %w", err)
	}
	return out, nil
}

// NICMatch is how a network config finds its NIC: by MAC (lower case) or
// by a name glob.
type NICMatch struct {
	MAC  string
	Name string
}

// Matches says whether the NIC named name with MAC mac is the one: what
// cloud-init decides with the match: section.
func (m NICMatch) Matches(name, mac string) bool {
	if m.MAC != "" {
		return strings.EqualFold(m.MAC, mac)
	}
	ok, err := path.Match(m.Name, name)
	return err == nil && ok
}

// ParseNetworkConfig reads back a network config that NetworkConfig wrote:
// the static address and how it finds its NIC. It is what the providers'
// test doubles use to play the guest's cloud-init; anything else (another
// version, several ethernets, DHCP) is an error.
func ParseNetworkConfig(b []byte) (provider.StaticAddress, NICMatch, error) {
	var c netConfigV2
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return provider.StaticAddress{}, NICMatch{}, fmt.Errorf("network-config: %w", err)
	}
	if c.Version != 2 || len(c.Ethernets) != 1 {
		return provider.StaticAddress{}, NICMatch{}, fmt.Errorf("network-config: version %d with %d ethernets, want version 2 with one", c.Version, len(c.Ethernets))
	}
	var eth ethernetV2
	for _, e := range c.Ethernets {
		eth = e
	}
	if eth.DHCP4 || eth.DHCP6 || len(eth.Addresses) != 1 {
		return provider.StaticAddress{}, NICMatch{}, fmt.Errorf("network-config: DHCP on or %d addresses, want one static address", len(eth.Addresses))
	}
	var a provider.StaticAddress
	var err error
	if a.Address, err = netip.ParsePrefix(eth.Addresses[0]); err != nil {
		return provider.StaticAddress{}, NICMatch{}, fmt.Errorf("network-config: addresses[0]: %w", err)
	}
	gateway := eth.Gateway6
	for _, r := range eth.Routes {
		if r.To == "0.0.0.0/0" || r.To == "::/0" || r.To == "default" {
			gateway = r.Via
		}
	}
	if gateway != "" {
		if a.Gateway, err = netip.ParseAddr(gateway); err != nil {
			return provider.StaticAddress{}, NICMatch{}, fmt.Errorf("network-config: the default route's gateway: %w", err)
		}
	}
	if eth.Nameservers != nil {
		for _, s := range eth.Nameservers.Addresses {
			d, err := netip.ParseAddr(s)
			if err != nil {
				return provider.StaticAddress{}, NICMatch{}, fmt.Errorf("network-config: nameservers: %w", err)
			}
			a.DNS = append(a.DNS, d)
		}
	}
	m := NICMatch{MAC: strings.ToLower(eth.Match.MACAddress), Name: eth.Match.Name}
	if (m.MAC == "") == (m.Name == "") {
		return provider.StaticAddress{}, NICMatch{}, fmt.Errorf("network-config: match needs exactly one of macaddress and name")
	}
	return a, m, nil
}
