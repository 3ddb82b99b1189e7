package libvirt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// hostListFailures counts the hosts a listing could not read: ListByTag
// and ListSecondary go on with the others, so this (and the log line) is
// where a host that blinds the collector shows.
var hostListFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "egress_proxy_libvirt_host_list_failures_total",
	Help: "Hosts a libvirt provider's ListByTag or ListSecondary could not read (the others were listed), by provider, host and operation.",
}, []string{"provider", "host", "operation"})

func init() { crmetrics.Registry.MustRegister(hostListFailures) }

// ListByTag lists this installation's domains, active and inactive, on
// every host at once, reading each domain's marks and nothing else (no
// state or address RPC: the collector reads ID, UID and CreatedAt only).
// A host that cannot be read is left out, logged and counted, and the
// others are listed: one host down does not blind the collector on the
// rest. Only when no host could be read is the listing an error.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	return eachHost(ctx, p, provider.OpList, p.listHost)
}

// listHost is one host's part of ListByTag: its domains of this
// installation, and the instances that are not domains yet: a create step
// in flight here, or an interrupted one whose volumes are on the host
// (Create resumes it; Delete removes it), so that the reconciler's sweep
// and the collector see an instance from its first moment.
func (p *Provider) listHost(ctx context.Context, h Host) ([]provider.Instance, error) {
	b, err := p.table.get(ctx, h)
	if err != nil {
		return nil, err
	}
	// The steps first: one that ends during the listing has defined its
	// domain by then, so it is listed one way or the other.
	creating := p.creating.Snapshot()
	doms, err := p.ourDomains(ctx, b)
	if err != nil {
		return nil, err
	}
	vols, err := p.poolVolumes(ctx, b, h)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Instance, 0, len(doms))
	seen := map[string]bool{}
	for _, d := range doms {
		seen[d.name] = true
		out = append(out, provider.Instance{ID: formatID(h.Name, d.name), UID: d.md.Marks.UID, CreatedAt: d.md.CreatedAt})
	}
	for name, ci := range creating {
		if ci.host == h.Name && !seen[name] {
			seen[name] = true
			out = append(out, provider.Instance{ID: formatID(h.Name, name), UID: ci.uid, CreatedAt: ci.since})
		}
	}
	for _, v := range vols {
		if !seen[v.Instance] {
			// Age unknown: the collector never takes it for old, and the
			// volumes are collected as secondary resources instead.
			seen[v.Instance] = true
			out = append(out, provider.Instance{ID: formatID(h.Name, v.Instance), UID: v.UID})
		}
	}
	return out, nil
}

type ourDomain struct {
	name string
	md   parsedMetadata
}

// ourDomains lists the host's domains with this installation's marks. A
// domain whose marks cannot be read (it vanished, its element is hand
// written) is skipped; the caller's ctx ending fails the listing.
func (p *Provider) ourDomains(ctx context.Context, b backend) ([]ourDomain, error) {
	doms, err := b.ConnectListAllDomains(ctx)
	if err != nil {
		return nil, err
	}
	log := logr.FromContextOrDiscard(ctx)
	var out []ourDomain
	for _, d := range doms {
		md, err := p.readMarks(ctx, b, d)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			log.V(1).Info("libvirt domain skipped: its marks cannot be read", "domain", d.Name, "error", err.Error())
			continue
		}
		if md.Marks.Managed && md.Marks.Installation == p.opts.InstallationID {
			out = append(out, ourDomain{name: d.Name, md: md})
		}
	}
	return out, nil
}

// eachHost runs fn on every host at once and returns the hosts' results
// in config order, one list. A failing host is logged and counted and left
// out; when every host failed, the first error (in config order) is the
// result.
func eachHost[T any](ctx context.Context, p *Provider, op string, fn func(context.Context, Host) ([]T, error)) ([]T, error) {
	results := make([][]T, len(p.hosts))
	errs := make([]error, len(p.hosts))
	var wg sync.WaitGroup
	for i, h := range p.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx := logr.NewContext(ctx, logr.FromContextOrDiscard(ctx).WithValues("host", h.Name))
			results[i], errs[i] = fn(hctx, h)
		}()
	}
	wg.Wait()
	var out []T
	listed := 0
	var failed []string
	var first error
	for i, h := range p.hosts {
		if errs[i] != nil {
			failed = append(failed, h.Name)
			if first == nil {
				first = errs[i]
			}
			hostListFailures.WithLabelValues(p.name, h.Name, op).Inc()
			logr.FromContextOrDiscard(ctx).Info("libvirt host could not be listed; the others were", "host", h.Name,
				"operation", op, "error", errs[i].Error())
			continue
		}
		listed++
		out = append(out, results[i]...)
	}
	if listed == 0 && first != nil {
		return nil, first
	}
	if len(failed) > 0 {
		provider.Note(ctx, "failedHosts", strings.Join(failed, ","))
	}
	return out, nil
}

// volumeOf is one instance volume in a pool.
type volumeOf struct {
	instanceVolume
	Volume string
}

// instanceVolumes are this installation's volumes of instance name in h's
// pool (one listing, whatever the UID in their names). A pool that is not
// there holds none.
func (p *Provider) instanceVolumes(ctx context.Context, b backend, h Host, name string) ([]volumeOf, error) {
	all, err := p.poolVolumes(ctx, b, h)
	if err != nil {
		return nil, err
	}
	var out []volumeOf
	for _, v := range all {
		if v.Instance == name {
			out = append(out, v)
		}
	}
	return out, nil
}

// poolVolumes are this installation's instance volumes in h's pool.
func (p *Provider) poolVolumes(ctx context.Context, b backend, h Host) ([]volumeOf, error) {
	pool, err := b.StoragePoolLookupByName(ctx, h.Pool)
	if hasCode(err, libvirt.ErrNoStoragePool) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	vols, err := b.StoragePoolListAllVolumes(ctx, pool)
	if err != nil {
		return nil, err
	}
	tag := installationTag(p.opts.InstallationID)
	var out []volumeOf
	for _, v := range vols {
		if iv, ok := parseVolumeName(v.Name); ok && iv.Tag == tag {
			out = append(out, volumeOf{instanceVolume: iv, Volume: v.Name})
		}
	}
	return out, nil
}

// A secondary's ID names the exact volume: hosts/<host>/pools/<pool>/volumes/<volume>.
func formatSecondaryID(host, pool, vol string) string {
	return idHosts + "/" + host + "/pools/" + pool + "/volumes/" + vol
}

func parseSecondaryID(id string) (host, pool, vol string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 6 || parts[0] != idHosts || parts[2] != "pools" || parts[4] != "volumes" || parts[1] == "" || parts[3] == "" {
		return "", "", "", provider.Errorf(provider.ErrPermanent, "malformed secondary resource ID %q: want %s/<host>/pools/<pool>/volumes/<volume>", id, idHosts)
	}
	if _, ok := parseVolumeName(parts[5]); !ok {
		return "", "", "", provider.Errorf(provider.ErrPermanent, "malformed secondary resource ID %q: %q is not an instance volume's name", id, parts[5])
	}
	return parts[1], parts[3], parts[5], nil
}

// ListSecondary lists the instances' overlays and seeds of this
// installation on every host, each with its instance, and InstanceGone
// when the host has no domain of that name and no create step for it
// runs here. A host that cannot be read is left out (logged and counted):
// the collector deletes only what it saw.
func (p *Provider) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpList); err != nil {
		return nil, err
	}
	return eachHost(ctx, p, "list-secondary", p.listHostSecondary)
}

func (p *Provider) listHostSecondary(ctx context.Context, h Host) ([]provider.Secondary, error) {
	b, err := p.table.get(ctx, h)
	if err != nil {
		return nil, err
	}
	// Domains first: a volume listed after its domain was defined is then
	// never taken for an orphan.
	doms, err := b.ConnectListAllDomains(ctx)
	if err != nil {
		return nil, err
	}
	exists := make(map[string]bool, len(doms))
	for _, d := range doms {
		exists[d.Name] = true
	}
	vols, err := p.poolVolumes(ctx, b, h)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Secondary, 0, len(vols))
	for _, v := range vols {
		out = append(out, provider.Secondary{
			ID:           formatSecondaryID(h.Name, h.Pool, v.Volume),
			Kind:         v.Kind,
			Marks:        provider.Marks{Managed: true, UID: v.UID, Installation: p.opts.InstallationID},
			Instance:     v.Instance,
			InstanceID:   formatID(h.Name, v.Instance),
			InstanceGone: !exists[v.Instance] && !p.steps.Running(v.Instance),
		})
	}
	return out, nil
}

// DeleteSecondary deletes one instance volume, under its instance's lock
// and only while the instance is still gone: a Create that began since the
// collector judged it would otherwise lose its disk.
func (p *Provider) DeleteSecondary(ctx context.Context, id string) error {
	if err := provider.CtxErr(ctx, p.name, provider.OpDelete); err != nil {
		return err
	}
	hostName, poolName, volName, err := parseSecondaryID(id)
	if err != nil {
		return err
	}
	v, _ := parseVolumeName(volName)
	if v.Tag != installationTag(p.opts.InstallationID) {
		return nil // not ours: counts as deleted
	}
	h, err := p.configuredHost(hostName, id)
	if err != nil {
		return err
	}
	if poolName != h.Pool {
		return provider.Errorf(provider.ErrPermanent, "secondary resource %s is in pool %s, but host %s now uses pool %s: remove the volume by hand", id, poolName, h.Name, h.Pool)
	}
	unlock, err := p.names.Lock(ctx, v.Instance)
	if err != nil {
		return provider.Errorf(provider.ErrTransient, "waiting for another call on instance %s: %w", v.Instance, err)
	}
	defer unlock()
	if p.steps.Running(v.Instance) {
		return provider.Errorf(provider.ErrTransient, "instance %s is being created again; its volume %s is not deleted", v.Instance, volName)
	}
	b, err := p.table.get(ctx, h)
	if err != nil {
		return err
	}
	switch _, err := b.DomainLookupByName(ctx, v.Instance); {
	case err == nil:
		return provider.Errorf(provider.ErrTransient, "instance %s exists again on host %s; its volume %s is not deleted", v.Instance, h.Name, volName)
	case !errors.Is(err, provider.ErrNotFound):
		return err
	}
	pool, err := b.StoragePoolLookupByName(ctx, h.Pool)
	if hasCode(err, libvirt.ErrNoStoragePool) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := deleteVolumeIfPresent(ctx, b, pool, volName); err != nil {
		return fmt.Errorf("deleting volume %s: %w", volName, err)
	}
	return nil
}
