package libvirt

import (
	"context"
	"errors"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Delete removes the instance and everything of it: first its create step
// in flight, cancelled and stopped (so none re-creates what is removed),
// then the domain (destroyed, undefined with its NVRAM, managed save,
// snapshot and checkpoint metadata) and its volumes, the overlay and the
// seed, found by name in the pool whether or not the domain still exists.
// Nothing of it is left when nil is returned; what is already gone is
// fine, and a domain under the name that is not this installation's is
// left alone. An instance on a host no longer in the config is Permanent:
// the earlier providers called that done and orphaned the VM.
func (p *Provider) Delete(ctx context.Context, id string) error {
	hostName, name, err := parseID(id)
	if err != nil {
		return err
	}
	h, err := p.configuredHost(hostName, id)
	if err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("host", h.Name, "name", name)
	ctx = logr.NewContext(ctx, log)
	unlock, err := p.names.Lock(ctx, name)
	if err != nil {
		return provider.Errorf(provider.ErrTransient, "waiting for another call on instance %s: %w", name, err)
	}
	defer unlock()
	if err := p.steps.Cancel(ctx, name); err != nil {
		return err
	}
	b, err := p.table.get(ctx, h)
	if err != nil {
		return err
	}
	if err := p.removeDomain(ctx, b, name); err != nil {
		return err
	}
	vols, err := p.instanceVolumes(ctx, b, h, name)
	if err != nil {
		return err
	}
	if len(vols) > 0 {
		pool, err := b.StoragePoolLookupByName(ctx, h.Pool)
		if err != nil {
			return err
		}
		for _, v := range vols {
			if err := deleteVolumeIfPresent(ctx, b, pool, v.Volume); err != nil {
				return err
			}
		}
	}
	log.V(1).Info("libvirt instance deleted", "volumes", len(vols))
	return nil
}

// removeDomain destroys and undefines the domain named name when it is
// this installation's; gone is fine.
func (p *Provider) removeDomain(ctx context.Context, b backend, name string) error {
	dom, err := b.DomainLookupByName(ctx, name)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	md, err := p.readMarks(ctx, b, dom)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !md.Marks.Managed || md.Marks.Installation != p.opts.InstallationID {
		logr.FromContextOrDiscard(ctx).Info("libvirt domain under the instance's name is not this installation's: left alone")
		return nil
	}
	// Not running (ErrOperationInvalid) and gone are both what destroy is for.
	if err := b.DomainDestroy(ctx, dom); err != nil && !hasCode(err, libvirt.ErrOperationInvalid) && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	if err := b.DomainUndefine(ctx, dom); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	return nil
}
