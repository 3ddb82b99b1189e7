package local

import (
	"context"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Delete closes the instance's listener and every connection it serves,
// forgets it, and returns once its handlers have all returned. An instance
// that is gone, or that is not ours, counts as deleted and is left alone.
func (p *Provider) Delete(ctx context.Context, id string) error {
	how, err := p.delete(ctx, id)
	if err == nil {
		provider.Note(ctx, "outcome", how)
	}
	return err
}

func (p *Provider) delete(ctx context.Context, id string) (string, error) {
	if err := p.begin(ctx, provider.OpDelete); err != nil {
		return "", err
	}
	name, err := parseID(id)
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return "", provider.Errorf(provider.ErrTransient, "%w", errClosed)
	}
	in, ok := p.instances[name]
	switch {
	case !ok:
		p.mu.Unlock()
		return "already gone", nil
	case !p.ours(in.marks):
		// Never touch what another installation or a human made.
		p.mu.Unlock()
		return "not ours, left alone", nil
	}
	delete(p.instances, name)
	p.release(in)
	srv := in.srv
	if srv != nil {
		srv.close() // the address is free once this returns
	}
	p.mu.Unlock()
	if srv == nil {
		return "deleted", nil
	}
	if err := srv.wait(ctx); err != nil {
		// Forgotten and closed already; only the wait for its handlers was
		// cut short. A retry finds it gone.
		return "", provider.Errorf(provider.ErrTransient, "instance %q closed, draining its connections: %w", name, err)
	}
	return "deleted", nil
}
