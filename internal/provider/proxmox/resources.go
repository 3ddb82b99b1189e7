package proxmox

import (
	"context"
	"strconv"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// resources shares one /cluster/resources read among concurrent callers
// for p.window; fresh forces a new read (Create and Delete decide on it).
func (p *Provider) resources(ctx context.Context, fresh bool) ([]resource, error) {
	p.resMu.Lock()
	if !fresh && p.resList != nil && time.Since(p.resAt) < p.window {
		l := p.resList
		p.resMu.Unlock()
		return l, nil
	}
	if w := p.resWait; w != nil && !fresh {
		p.resMu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return nil, provider.Errorf(provider.ErrTransient, "waiting for /cluster/resources: %w", ctx.Err())
		}
		return p.resources(ctx, false)
	}
	w := make(chan struct{})
	p.resWait = w
	p.resMu.Unlock()
	l, err := p.api.resources(ctx)
	p.resMu.Lock()
	if err == nil {
		p.resList, p.resAt = l, time.Now()
	}
	p.resWait = nil
	close(w)
	p.resMu.Unlock()
	return l, err
}

func (p *Provider) forgetResources() {
	p.resMu.Lock()
	p.resList = nil
	p.resMu.Unlock()
}

func find(rs []resource, vmid int) (resource, bool) {
	for _, r := range rs {
		if r.VMID == vmid && r.Type != "lxc" {
			return r, true
		}
	}
	return resource{}, false
}

// nameless: an entry whose config has no name yet (a clone in progress),
// which /cluster/resources shows as "VM <vmid>".
func nameless(r resource) bool { return r.Name == "" || r.Name == "VM "+strconv.Itoa(r.VMID) }
