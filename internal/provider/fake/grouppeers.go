package fake

import (
	"context"
	"net/netip"
	"slices"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// PeersUpdate is one change of a member instance's peers that
// UpdateGroupPeers made.
type PeersUpdate struct {
	Instance string
	Peers    []netip.Addr
}

// PeersUpdater is the fake as a GroupPeersUpdater, for the reconciler's
// tests of peers changed in place: an instance runs the peers of its
// CreateRequest until UpdateGroupPeers gives it others. The fake itself
// is no GroupPeersUpdater, so that members on it are replaced for new
// peers, as on a provider without the guest agent.
type PeersUpdater struct {
	*Provider
	// Refuse, when set, is asked first with the instance's name: a
	// guest that cannot be told (its error is returned).
	Refuse func(instance string) error
}

// UpdateGroupPeers gives instance id the peers; the same peers are no
// update. NotFound when id is not there.
func (u PeersUpdater) UpdateGroupPeers(ctx context.Context, id string, self netip.Addr, peers []netip.Addr) error {
	p := u.Provider
	if err := p.enter(ctx, provider.OpUpdateGroupPeers); err != nil {
		return err
	}
	name, err := parseID(id)
	if err != nil {
		return p.fail(provider.OpUpdateGroupPeers, nil, err)
	}
	if u.Refuse != nil {
		if err := u.Refuse(name); err != nil {
			return p.fail(provider.OpUpdateGroupPeers, nil, err)
		}
	}
	has := u.GroupPeers(name)
	b := p.backend
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.instances[name]; !ok {
		return provider.Errorf(provider.ErrNotFound, "instance %q not found", name)
	}
	if slices.Equal(has, peers) {
		return nil
	}
	if b.groupPeers == nil {
		b.groupPeers = map[string][]netip.Addr{}
	}
	b.groupPeers[name] = slices.Clone(peers)
	b.peersUpdates = append(b.peersUpdates, PeersUpdate{Instance: name, Peers: slices.Clone(peers)})
	return nil
}

// GroupPeers are the peers instance name runs with: the last update's,
// else its last CreateRequest's.
func (u PeersUpdater) GroupPeers(name string) []netip.Addr {
	b := u.backend
	b.mu.Lock()
	peers, ok := b.groupPeers[name]
	b.mu.Unlock()
	if ok {
		return slices.Clone(peers)
	}
	reqs := u.CreateRequests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Name == name && reqs[i].GroupAddress != nil {
			return slices.Clone(reqs[i].GroupAddress.Peers)
		}
	}
	return nil
}

// PeersUpdates are the changes UpdateGroupPeers made, in order.
func (b *Backend) PeersUpdates() []PeersUpdate {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.peersUpdates)
}
