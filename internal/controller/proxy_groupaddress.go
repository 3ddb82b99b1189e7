package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// A member of a ProxyGroup on an entry with an addressPool holds the
// group's address in turn with the other members (VRRP among the members'
// own pool addresses; docs/groups.md). The group writes the address and
// the peers into the member's spec.groupAddress (proxygroup_address.go).
// A change of the address reshapes the member's instance and is rolled by
// the group one member at a time, like a template change; a change of the
// peers does too, unless the provider tells a running member its peers in
// place (provider.GroupPeersUpdater, updateGroupPeers).

// updateGroupPeers tells a running member's instance its spec's peers
// when its provider does that in place (a read when it has them). It
// reports whether the instance is known to have them: always when the
// peers are in the shape (a new instance came for new peers) or the Proxy
// is no member; only after a successful update otherwise. Until it is,
// the pass leaves observedGeneration behind, so the group, which lists a
// new member among another's peers before that member gets its own
// (desiredGroupAddress), waits until the others really hear it.
func (r *ProxyReconciler) updateGroupPeers(ctx context.Context, entry *registry.Entry, id string, req provider.CreateRequest) (bool, error) {
	if entry.Peers == nil || req.GroupAddress == nil || req.StaticAddress == nil {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	if err := entry.Peers.UpdateGroupPeers(ctx, id, req.StaticAddress.Address.Addr(), req.GroupAddress.Peers); err != nil {
		return false, err
	}
	return true, nil
}

// memberGroupAddress is the member's spec.groupAddress as the provider
// takes it, with its own pool address already in static. nil: no group
// address. errPoolPending while the group has not written the address yet
// (the member makes no instance until then); Permanent for a Proxy that no
// ProxyGroup controls or one without a pool address.
func memberGroupAddress(px *egressv1.Proxy, static *provider.StaticAddress, entry string) (*provider.GroupAddress, error) {
	ga := px.Spec.GroupAddress
	if ga == nil {
		return nil, nil
	}
	owner := metav1.GetControllerOf(px)
	if owner == nil || owner.Kind != "ProxyGroup" || owner.APIVersion != egressv1.GroupVersion.String() {
		return nil, provider.Errorf(provider.ErrPermanent,
			"spec.groupAddress is written by a ProxyGroup on its members, and no ProxyGroup controls Proxy %s: remove the field", px.Name)
	}
	if static == nil {
		return nil, provider.Errorf(provider.ErrPermanent,
			"spec.groupAddress: a group's address is held among its members' own pool addresses, and providers config entry %s has no addressPool", entry)
	}
	if ga.Address == "" {
		return nil, errPoolPending{fmt.Sprintf("waiting for ProxyGroup %s to give its address and its members' own addresses", owner.Name)}
	}
	virtual, err := netip.ParsePrefix(ga.Address)
	if err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "spec.groupAddress.address %q is not an address with its prefix length", ga.Address)
	}
	out := &provider.GroupAddress{Virtual: virtual, Group: string(owner.UID)}
	for i, p := range ga.Peers {
		a, err := netip.ParseAddr(p)
		if err != nil {
			return nil, provider.Errorf(provider.ErrPermanent, "spec.groupAddress.peers[%d] %q is not an address", i, p)
		}
		out.Peers = append(out.Peers, a)
	}
	if out.Index, err = strconv.Atoi(px.Labels[egressv1.LabelGroupMember]); err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "label %s of a group member is %q, not its index", egressv1.LabelGroupMember, px.Labels[egressv1.LabelGroupMember])
	}
	return out, nil
}

// heldGroupAddress is what status.holdsGroupAddress says of the serving
// instance inst: whether its guest reports holding the group's address,
// for a member with one; nil otherwise. The group names its holder from
// it (groupStatus).
func heldGroupAddress(px *egressv1.Proxy, inst provider.Instance) *bool {
	if px.Spec.GroupAddress == nil || px.Spec.GroupAddress.Address == "" || inst.HoldsGroupAddress == nil {
		return nil
	}
	held := *inst.HoldsGroupAddress
	return &held
}
