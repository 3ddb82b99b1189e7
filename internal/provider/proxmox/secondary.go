package proxmox

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

var _ provider.SecondaryLister = (*Provider)(nil)

// A secondary's ID names the node's storage and the exact file:
// nodes/<node>/storage/<storage>/iso/<file>. The node is in it because
// isoStorage may be node-local (the seed of a VM that migrated stays on
// the node it was uploaded to).
func formatSecondaryID(node, storage, file string) string {
	return "nodes/" + node + "/storage/" + storage + "/iso/" + file
}

func parseSecondaryID(id string) (node, storage, file string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 6 || parts[0] != "nodes" || parts[2] != "storage" || parts[4] != "iso" || !idPattern.MatchString(parts[1]) || !idPattern.MatchString(parts[3]) {
		return "", "", "", provider.Errorf(provider.ErrPermanent, "malformed proxmox secondary resource ID %q: want nodes/<node>/storage/<storage>/iso/<file>", id)
	}
	if _, ok := parseSeedName(parts[5]); !ok {
		return "", "", "", provider.Errorf(provider.ErrPermanent, "malformed proxmox secondary resource ID %q: %q is not a seed ISO's name", id, parts[5])
	}
	return parts[1], parts[3], parts[5], nil
}

// seedFile is one of this installation's seed ISOs as a node lists it.
type seedFile struct {
	seedVolume
	node, file string
	created    time.Time
}

// listSeeds reads isoStorage's iso content on every configured node (one
// request each); a node that cannot be read fails the listing: the
// collector then deletes nothing rather than judging half a cluster.
func (p *Provider) listSeeds(ctx context.Context) ([]seedFile, error) {
	var out []seedFile
	for _, node := range p.cfg.Nodes {
		seeds, err := p.seedsOn(ctx, node)
		if err != nil {
			return nil, err
		}
		out = append(out, seeds...)
	}
	return out, nil
}

// seedsOn lists this installation's seeds on node.
func (p *Provider) seedsOn(ctx context.Context, node string) ([]seedFile, error) {
	tag := seedTag(p.opts.InstallationID)
	vols, err := p.api.isoContent(ctx, node, p.cfg.ISOStorage)
	if err != nil {
		return nil, err
	}
	var out []seedFile
	for _, v := range vols {
		file, ok := strings.CutPrefix(v.Volid, p.cfg.ISOStorage+":iso/")
		if !ok {
			continue
		}
		sv, ok := parseSeedName(file)
		if !ok || sv.Tag != tag {
			continue
		}
		sf := seedFile{seedVolume: sv, node: node, file: file}
		if v.CTime > 0 {
			sf.created = time.Unix(v.CTime, 0)
		}
		out = append(out, sf)
	}
	return out, nil
}

// instanceOf tells whether the instance name (of the Proxy uid) is on the
// cluster: a VM with the name, or a nameless clone-locked entry at one of
// the VMIDs its create probes (a clone in progress has no name yet).
func (p *Provider) instanceOf(rs []resource, name, uid string) (resource, bool) {
	probes := map[int]bool{}
	for i := 0; i < maxProbes; i++ {
		probes[p.vmidFor(uid, i)] = true
	}
	var locked resource
	found := false
	for _, r := range rs {
		if r.Template != 0 || r.Type == "lxc" {
			continue
		}
		if r.Name == name {
			return r, true
		}
		if nameless(r) && r.Lock != "" && probes[r.VMID] {
			locked, found = r, true
		}
	}
	return locked, found
}

// ListSecondary lists this installation's seed ISOs on every configured
// node, each with its instance and InstanceGone when no VM of that name
// (nor a clone that may become it) is on the cluster and no create step
// for it runs here. The seeds are read first, the VMs after: a seed is
// uploaded only after its VM's clone, so a seed seen has its VM in the
// later read unless the VM is really gone.
func (p *Provider) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpListSecondary); err != nil {
		return nil, err
	}
	ctx = httpobserve.WithOp(ctx, provider.OpListSecondary)
	seeds, err := p.listSeeds(ctx)
	if err != nil {
		return nil, err
	}
	rs, err := p.resources(ctx, true)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Secondary, 0, len(seeds))
	for _, s := range seeds {
		r, exists := p.instanceOf(rs, s.Instance, s.UID)
		sec := provider.Secondary{
			ID:           formatSecondaryID(s.node, p.cfg.ISOStorage, s.file),
			Kind:         kindSeed,
			Marks:        provider.Marks{Managed: true, UID: s.UID, Installation: p.opts.InstallationID},
			Instance:     s.Instance,
			InstanceGone: !exists && !p.steps.Running(s.Instance),
			CreatedAt:    s.created,
		}
		if exists && !nameless(r) {
			sec.InstanceID = formatID(r.VMID, r.Name)
		}
		out = append(out, sec)
	}
	return out, nil
}

// DeleteSecondary removes one seed ISO, under its instance's lock and only
// while the instance is still gone: a Create that began since the
// collector judged it would otherwise lose its seed.
func (p *Provider) DeleteSecondary(ctx context.Context, id string) error {
	if err := provider.CtxErr(ctx, p.name, provider.OpDeleteSecondary); err != nil {
		return err
	}
	ctx = httpobserve.WithOp(ctx, provider.OpDeleteSecondary)
	node, storage, file, err := parseSecondaryID(id)
	if err != nil {
		return err
	}
	sv, _ := parseSeedName(file)
	if sv.Tag != seedTag(p.opts.InstallationID) {
		return nil // not ours: counts as deleted
	}
	if !contains(p.cfg.Nodes, node) {
		return provider.Errorf(provider.ErrPermanent, "secondary resource %s is on node %s, which the entry no longer names: remove the ISO by hand", id, node)
	}
	if storage != p.cfg.ISOStorage {
		return provider.Errorf(provider.ErrPermanent, "secondary resource %s is on storage %s, but the entry now uses %s: remove the ISO by hand", id, storage, p.cfg.ISOStorage)
	}
	unlock, err := p.names.Lock(ctx, sv.Instance)
	if err != nil {
		return provider.Errorf(provider.ErrTransient, "waiting for another call on %s: %w", sv.Instance, err)
	}
	defer unlock()
	if p.steps.Running(sv.Instance) {
		return provider.Errorf(provider.ErrTransient, "instance %s is being created again; its seed %s is not deleted", sv.Instance, file)
	}
	rs, err := p.resources(ctx, true)
	if err != nil {
		return err
	}
	if r, exists := p.instanceOf(rs, sv.Instance, sv.UID); exists {
		return provider.Errorf(provider.ErrTransient, "instance %s exists again (VM %d on %s); its seed %s is not deleted", sv.Instance, r.VMID, r.Node, file)
	}
	return p.deleteSeed(ctx, node, file)
}

// deleteSeed removes one seed file on node and waits for its task; a file
// already gone is done.
func (p *Provider) deleteSeed(ctx context.Context, node, file string) error {
	vol := p.cfg.ISOStorage + ":iso/" + file
	upid, err := p.api.upid(ctx, http.MethodDelete, "/nodes/"+node+"/storage/"+p.cfg.ISOStorage+"/content/"+vol, nil)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := p.wait(ctx, node, upid, "seed delete", func(string) {}); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	return nil
}

// deleteSeeds removes every seed of instance name on every configured node
// (a VM may have migrated away from the node its seed was uploaded to),
// whatever UID it names. A node that cannot be read is skipped (logged):
// its seeds are left to the garbage collector, which lists them once the
// node answers, rather than keeping the VM from being destroyed; a
// Permanent failure (the token may not list the storage) or the end of ctx
// fails the delete.
func (p *Provider) deleteSeeds(ctx context.Context, name string) error {
	for _, node := range p.cfg.Nodes {
		seeds, err := p.seedsOn(ctx, node)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, provider.ErrPermanent) {
				return err
			}
			logger(ctx).Info("proxmox seed ISOs left for the garbage collector: node not readable", "node", node, "instance", name, "error", err.Error())
			continue
		}
		for _, s := range seeds {
			if s.Instance != name {
				continue
			}
			if err := p.deleteSeed(ctx, s.node, s.file); err != nil {
				return err
			}
		}
	}
	return nil
}

// isoVolume is one entry of a storage's content listing.
type isoVolume struct {
	Volid string `json:"volid"`
	CTime int64  `json:"ctime"`
	Size  int64  `json:"size"`
}

func (c *client) isoContent(ctx context.Context, node, storage string) ([]isoVolume, error) {
	var vols []isoVolume
	err := c.do(ctx, http.MethodGet, "/nodes/"+node+"/storage/"+storage+"/content", url.Values{"content": {"iso"}}, &vols)
	return vols, err
}
