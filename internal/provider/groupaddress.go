package provider

import "net/netip"

// GroupAddress is an instance's part in holding its group's one address
// (a ProxyGroup's, docs/groups.md) in turn with the other members. The
// on-prem providers hold it with VRRP among the members' own pool
// addresses (internal/provider/vrrp), so it comes with StaticAddress.
type GroupAddress struct {
	// Virtual is the group's address, with its pool's prefix length.
	Virtual netip.Prefix
	// Peers are the other members' own addresses.
	Peers []netip.Addr
	// Group identifies the group (its UID), the same for every member.
	Group string
	// Index is the member's index in its group.
	Index int
}
