package proxmox

import (
	"context"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// ListByTag is one cluster-wide read; the tag mark decides.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	rs, err := p.resources(httpobserve.WithOp(ctx, provider.OpList), true)
	if err != nil {
		return nil, err
	}
	var out []provider.Instance
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Template != 0 || r.Name == "" {
			continue
		}
		m := p.marksFromTags(r.Tags)
		if !m.Managed || m.Installation != p.opts.InstallationID {
			continue
		}
		out = append(out, provider.Instance{ID: formatID(r.VMID, r.Name), UID: m.UID, CreatedAt: createdFromTags(r.Tags)})
		seen[r.Name] = true
	}
	// Creates in flight whose VM is not tagged yet (cloning) are ours too.
	p.creatingMu.Lock()
	for name, in := range p.creating {
		vmid, _, _ := parseID(in.ID)
		r, present := find(rs, vmid)
		if !seen[name] && present && (r.Name == name || r.Lock == "clone") && p.steps.Running(name) {
			out = append(out, in)
		}
	}
	p.creatingMu.Unlock()
	return out, nil
}
