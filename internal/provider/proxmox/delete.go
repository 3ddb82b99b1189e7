package proxmox

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Delete cancels the create step, then stops, removes the seed ISO and
// destroys in the background (returns early: the caller polls Get until
// ErrNotFound, which it reads only once everything is gone).
func (p *Provider) Delete(ctx context.Context, id string) error {
	ctx = httpobserve.WithOp(ctx, provider.OpDelete)
	vmid, name, err := parseID(id)
	if err != nil {
		return err
	}
	unlock, err := p.names.Lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := p.steps.Cancel(ctx, name); err != nil {
		return err
	}
	p.creatingMu.Lock()
	delete(p.creating, name)
	delete(p.cloned, name)
	p.creatingMu.Unlock()
	if st := p.dels.Poll(name); st.Err != nil || st.Running {
		return st.Err
	}
	rs, err := p.resources(ctx, true)
	if err != nil {
		return err
	}
	r, ok := find(rs, vmid)
	// A locked entry (a clone in progress is nameless) is judged once its
	// lock clears, in the step.
	candidate := ok && (r.Name == name || r.Lock != "")
	_, err = p.dels.Start(ctx, name, "delete started", func(ctx context.Context, progress func(string)) error {
		defer p.forgetResources()
		ctx = httpobserve.WithOp(ctx, httpobserve.OpDeleteStep)
		if candidate {
			return p.destroy(ctx, vmid, name, progress)
		}
		return p.deleteSeeds(ctx, name)
	})
	if err != nil {
		return err
	}
	p.forgetResources()
	return nil
}

func (p *Provider) destroy(ctx context.Context, vmid int, name string, progress func(string)) error {
	r, err := p.waitUnlocked(ctx, vmid, progress)
	if errors.Is(err, provider.ErrNotFound) {
		return p.deleteSeeds(ctx, name)
	}
	if err != nil {
		return err
	}
	if ours, err := p.owned(ctx, r, name); err != nil || !ours {
		if errors.Is(err, provider.ErrNotFound) {
			err = nil
		}
		if err != nil {
			return err
		}
		return p.deleteSeeds(ctx, name)
	}
	if err := p.deleteSeeds(ctx, name); err != nil {
		return err
	}
	// A start task the cancelled create step submitted may still power
	// the VM on after the status read: PVE then refuses the destroy ("is
	// running - destroy failed"), and the VM is stopped again.
	for attempt := 0; ; attempt++ {
		path := vmPath(r.Node, vmid)
		if r.Status != "stopped" || r.Lock == "suspended" || attempt > 0 {
			upid, err := p.api.upid(ctx, http.MethodPost, path+"/status/stop", nil)
			if err != nil && !errors.Is(err, provider.ErrNotFound) {
				return err
			}
			if err := p.wait(ctx, r.Node, upid, "stop", progress); err != nil && !errors.Is(err, provider.ErrNotFound) {
				return err
			}
		}
		upid, err := p.api.upid(ctx, http.MethodDelete, path, url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}})
		if err == nil {
			err = p.wait(ctx, r.Node, upid, "destroy", progress)
		}
		switch {
		case err == nil, errors.Is(err, provider.ErrNotFound):
			return nil
		case !strings.Contains(err.Error(), "is running") || attempt >= 3:
			return err
		}
		if r, err = p.waitUnlocked(ctx, vmid, progress); err != nil {
			if errors.Is(err, provider.ErrNotFound) {
				return nil
			}
			return err
		}
	}
}
