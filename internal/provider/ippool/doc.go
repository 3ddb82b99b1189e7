// Package ippool is a provider entry's address pool: the addresses the
// operator may give the Proxies of a libvirt or Proxmox entry as static
// addresses (rendered into the guest's cloud-init network-config), where a
// network has no DHCP or the admin wants each proxy's egress address known
// and stable. It parses and validates the pool's block of the providers
// config, and picks a free address for a claim; the allocator that records
// the pick (Cluster API IPAM's IPAddressClaim and IPAddress) and the
// rendering live elsewhere.
//
// It is a leaf (the standard library and apimachinery's field package
// only) so the config, the allocator and the providers can all share one
// reading of a pool. Allocation never enumerates the pool: a pool may be an
// IPv6 /64, so finding a free address costs steps in the number of held
// and excluded addresses and ranges, not in the pool's size.
package ippool
