package local

import (
	"context"
	"sort"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// ListByTag returns this installation's managed instances with ID, UID and
// CreatedAt, sorted by ID. State and IP are left out, as the contract allows.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	return p.list(ctx)
}

func (p *Provider) list(ctx context.Context) ([]provider.Instance, error) {
	if err := p.begin(ctx, provider.OpList); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, provider.Errorf(provider.ErrTransient, "%w", errClosed)
	}
	list := []provider.Instance{}
	for _, in := range p.instances {
		if p.ours(in.marks) {
			list = append(list, provider.Instance{ID: instanceID(in.name), UID: in.marks.UID, CreatedAt: in.createdAt})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list, nil
}

// ListOwnedInstances is ListByTag for one Proxy's UID (provider.OwnerLister):
// a Proxy's deletion pass calls it, and a scan that copies only the
// matches costs a fraction of the fleet's sorted copy, which every pass of
// a delete wave made under the lock that this provider's Deletes wait for
// (47 % of the manager's CPU in a 10,000-Proxy delete wave:
// docs/performance.md).
func (p *Provider) ListOwnedInstances(ctx context.Context, uid string) ([]provider.Instance, error) {
	if err := p.begin(ctx, provider.OpListOwnedInstances); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, provider.Errorf(provider.ErrTransient, "%w", errClosed)
	}
	var own []provider.Instance
	for _, in := range p.instances {
		if in.marks.UID == uid && p.ours(in.marks) {
			own = append(own, provider.Instance{ID: instanceID(in.name), UID: in.marks.UID, CreatedAt: in.createdAt})
		}
	}
	return own, nil
}

// ListOwnedSecondaries has nothing to return: an instance here is one
// listener, with no resource beside it.
func (p *Provider) ListOwnedSecondaries(ctx context.Context, _ string) ([]provider.Secondary, error) {
	return nil, p.begin(ctx, provider.OpListOwnedSecondaries)
}
