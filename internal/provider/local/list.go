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
