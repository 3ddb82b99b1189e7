package local

import (
	"context"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Get reads the instance with this ID: Running with its IP while the
// listener serves (with the egress address the entry's echo last answered:
// echowatch), Stopped when the record has no listener. An unknown ID,
// or an instance that lost our mark, is NotFound.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	return p.get(ctx, id)
}

func (p *Provider) get(ctx context.Context, id string) (provider.Instance, error) {
	if err := p.begin(ctx, provider.OpGet); err != nil {
		return provider.Instance{}, err
	}
	name, err := parseID(id)
	if err != nil {
		return provider.Instance{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return provider.Instance{}, provider.Errorf(provider.ErrTransient, "%w", errClosed)
	}
	in, ok := p.instances[name]
	if !ok || !p.ours(in.marks) {
		return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "instance %q not found", name)
	}
	return p.view(in), nil
}
