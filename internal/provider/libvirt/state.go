package libvirt

import (
	"net/netip"
	"strings"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// mapState is the earlier providers' state table (both agreed on it): a domain that
// runs serves once it has an address; nostate is a domain being started;
// every other state (paused, shutting down, shut off, crashed,
// pmsuspended, anything newer) is Stopped, which makes the reconciler call
// Create, which starts or resumes it (planned).
func mapState(state libvirt.DomainState, ip string) provider.State {
	switch state {
	case libvirt.DomainNostate:
		return provider.StateProvisioning
	case libvirt.DomainRunning, libvirt.DomainBlocked:
		if ip == "" {
			return provider.StateProvisioning
		}
		return provider.StateRunning
	default:
		return provider.StateStopped
	}
}

// firstRoutableIPv4 picks the instance's address from one source's answer:
// the first IPv4 address, in the source's order, of an interface with the
// NIC's MAC (any interface when mac is empty), that a client can route to:
// not loopback, link-local, unspecified, multicast or broadcast. An entry
// whose type says IPv4 but whose literal is not (or the reverse) is
// dropped. "" when there is none.
func firstRoutableIPv4(ifaces []libvirt.DomainInterface, mac string) string {
	for _, iface := range ifaces {
		if mac != "" && !sameMAC(iface.Hwaddr, mac) {
			continue
		}
		for _, a := range iface.Addrs {
			if libvirt.IPAddrType(a.Type) != libvirt.IPAddrTypeIpv4 {
				continue
			}
			ip, err := netip.ParseAddr(a.Addr)
			if err != nil || !ip.Is4() {
				continue
			}
			if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() ||
				ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
				continue
			}
			return ip.String()
		}
	}
	return ""
}

// sameMAC compares a source's hardware address (absent for some sources)
// with the NIC's, ignoring case.
func sameMAC(hw libvirt.OptString, mac string) bool {
	return len(hw) > 0 && strings.EqualFold(hw[0], mac)
}
