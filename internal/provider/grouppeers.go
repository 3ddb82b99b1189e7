package provider

import (
	"context"
	"net/netip"
)

// GroupPeersUpdater is implemented by providers whose group members hold
// the group's address among themselves (VRRP on kvm, kvm2 and proxmox)
// and can tell a running member its new peers in place, through the guest
// agent: a group that gains or loses a member rewrites the survivors'
// peer lists instead of replacing them. A provider without it gets a new
// instance for new peers (the peers are in the shape hash then: make
// before break, which the group rolls).
type GroupPeersUpdater interface {
	// UpdateGroupPeers makes the member instance id, whose own address is
	// self, send its adverts to exactly peers (none: a group of one). It
	// is idempotent and cheap when the instance has them already (a read),
	// so the reconciler calls it on every pass of a running member. It
	// returns once the member runs with the new list. NotFound when the
	// instance is gone; Transient while its guest agent does not answer.
	UpdateGroupPeers(ctx context.Context, id string, self netip.Addr, peers []netip.Addr) error
}

// OpUpdateGroupPeers is GroupPeersUpdater's call, as used in errors and
// log lines.
const OpUpdateGroupPeers = "update_group_peers"
