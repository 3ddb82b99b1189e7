package provider

import (
	"fmt"
	"net/netip"
	"strings"
)

// StaticAddress is an instance's own address on its network, given instead
// of DHCP's: the Proxy's address from its entry's address pool, allocated
// in the API server (an IPAddressClaim bound to an IPAddress, Cluster API's
// IPAM contract), so it survives the instance and the operator. The
// provider renders it into the instance's network configuration (the
// NoCloud seed's network-config on libvirt and Proxmox).
type StaticAddress struct {
	// Address is the instance's address with the on-link prefix length,
	// e.g. 192.0.2.10/24.
	Address netip.Prefix
	// Gateway is the default route's next hop; invalid: no default route.
	Gateway netip.Addr
	// DNS are the resolvers the instance uses; empty: none configured.
	DNS []netip.Addr
}

// String is the address as it appears in a log line or an instance's
// shape: address/prefix, then the gateway and resolvers when set.
func (a StaticAddress) String() string {
	var b strings.Builder
	b.WriteString(a.Address.String())
	if a.Gateway.IsValid() {
		fmt.Fprintf(&b, " via %s", a.Gateway)
	}
	if len(a.DNS) > 0 {
		dns := make([]string, len(a.DNS))
		for i, d := range a.DNS {
			dns[i] = d.String()
		}
		fmt.Fprintf(&b, " dns %s", strings.Join(dns, ","))
	}
	return b.String()
}

// DescribeStaticAddress is a, or "dhcp" without one, for a log line.
func DescribeStaticAddress(a *StaticAddress) string {
	if a == nil {
		return "dhcp"
	}
	return a.String()
}
