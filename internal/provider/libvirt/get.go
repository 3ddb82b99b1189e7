package libvirt

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Get reads the instance: while its create step runs, Provisioning with
// the step's progress (or the step's failure, once); else the domain by
// name, ours only (the marks; anything else is NotFound), in the earlier providers'
// state table, with its address when it runs. A domain that is not there
// while volumes of the instance are is a create that was interrupted:
// Stopped, which makes the reconciler call Create, which resumes it.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	hostName, name, err := parseID(id)
	if err != nil {
		return provider.Instance{}, err
	}
	h, err := p.configuredHost(hostName, id)
	if err != nil {
		return provider.Instance{}, err
	}
	ctx = logr.NewContext(ctx, logr.FromContextOrDiscard(ctx).WithValues("host", h.Name, "name", name))
	switch st := p.steps.Poll(name); {
	case st.Err != nil:
		return provider.Instance{}, st.Err
	case st.Running:
		return provisioning(id, "", st.Progress), nil
	}
	b, err := p.table.get(ctx, h)
	if err != nil {
		return provider.Instance{}, err
	}
	dom, err := b.DomainLookupByName(ctx, name)
	if errors.Is(err, provider.ErrNotFound) {
		return p.unfinished(ctx, b, h, name, id, err)
	}
	if err != nil {
		return provider.Instance{}, err
	}
	md, err := p.ourMarks(ctx, b, h, dom)
	if err != nil {
		return provider.Instance{}, err
	}
	return p.describe(ctx, b, h, dom, md)
}

// ourMarks reads dom's marks, NotFound unless they are this
// installation's: a domain under an instance's name that is not ours is
// not the instance, and no call acts on it.
func (p *Provider) ourMarks(ctx context.Context, b backend, h Host, dom libvirt.Domain) (parsedMetadata, error) {
	md, err := p.readMarks(ctx, b, dom)
	if err != nil {
		return parsedMetadata{}, err
	}
	if !md.Marks.Managed || md.Marks.Installation != p.opts.InstallationID {
		return parsedMetadata{}, provider.Errorf(provider.ErrNotFound, "domain %s on host %s is not this installation's", dom.Name, h.Name)
	}
	return md, nil
}

// configuredHost is the host an instance ID names. A host that is no
// longer in the config is Permanent, never NotFound: the domain may well
// be there, and reading it as gone would have the reconciler make a
// second instance and forget the first (the earlier providers orphaned such VMs).
func (p *Provider) configuredHost(host, id string) (Host, error) {
	if h, ok := p.host(host); ok {
		return h, nil
	}
	return Host{}, provider.Errorf(provider.ErrPermanent,
		"instance %s is on host %q, which is no longer in this entry's hosts (%s): re-add the host so the operator can reach it, or force-release the Proxy and remove the domain by hand (docs/libvirt-provider.md)",
		id, host, p.hostNames())
}

// unfinished tells an interrupted create (volumes of the instance, no
// domain yet) from an instance that is gone.
func (p *Provider) unfinished(ctx context.Context, b backend, h Host, name, id string, notFound error) (provider.Instance, error) {
	vols, err := p.instanceVolumes(ctx, b, h, name)
	if err != nil {
		return provider.Instance{}, err
	}
	if len(vols) == 0 {
		return provider.Instance{}, notFound
	}
	return provider.Instance{ID: id, UID: vols[0].UID, State: provider.StateStopped, Progress: progressInterrupted}, nil
}

// readMarks reads the domain's marks element; a domain without one is
// unmanaged (zero marks).
func (p *Provider) readMarks(ctx context.Context, b backend, dom libvirt.Domain) (parsedMetadata, error) {
	s, err := b.DomainGetMetadata(ctx, dom, metadataURI)
	switch {
	case hasCode(err, libvirt.ErrNoDomainMetadata):
		return parsedMetadata{}, nil
	case err != nil:
		return parsedMetadata{}, err
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("libvirt domain metadata", "metadata", s)
	return parseMetadata(s)
}

// describe is the instance dom, with its state and, while it runs, its
// address and whether its proxy answers (serving.go).
func (p *Provider) describe(ctx context.Context, b backend, h Host, dom libvirt.Domain, md parsedMetadata) (provider.Instance, error) {
	state, err := b.DomainGetState(ctx, dom)
	if err != nil {
		return provider.Instance{}, err
	}
	ip := ""
	if state == libvirt.DomainRunning || state == libvirt.DomainBlocked {
		if ip, err = p.address(ctx, b, dom); err != nil {
			return provider.Instance{}, err
		}
	}
	inst := provider.Instance{
		ID: formatID(h.Name, dom.Name), UID: md.Marks.UID, State: mapState(state, ip), IP: ip, CreatedAt: md.CreatedAt,
	}
	if inst.State == provider.StateRunning && md.ServingReport {
		sig, err := p.serving(ctx, b, dom)
		if err != nil {
			return provider.Instance{}, err
		}
		sig.Apply(&inst)
	}
	return inst, nil
}

// addressSources are asked in this order: the guest agent knows the
// guest's own view (and works on any NIC), the DHCP leases only on a
// libvirt network, the ARP table once the guest has talked.
var addressSources = []struct {
	src  libvirt.DomainInterfaceAddressesSource
	name string
}{
	{libvirt.DomainInterfaceAddressesSrcAgent, "agent"},
	{libvirt.DomainInterfaceAddressesSrcLease, "lease"},
	{libvirt.DomainInterfaceAddressesSrcArp, "arp"},
}

// address is the first routable IPv4 address of the domain's NIC (by its
// MAC) that a source reports. A source that fails (no agent yet, no
// libvirt network) is skipped; only the caller's ctx ending is an error, so
// a cancelled Get is Transient and never a false Provisioning.
func (p *Provider) address(ctx context.Context, b backend, dom libvirt.Domain) (string, error) {
	log := logr.FromContextOrDiscard(ctx)
	mac := domainMAC(dom.Name)
	var tried []string
	for _, s := range addressSources {
		ifaces, err := b.DomainInterfaceAddresses(ctx, dom, s.src)
		if err != nil {
			if ctx.Err() != nil {
				return "", provider.Errorf(provider.ErrTransient, "reading the address of domain %s: %w", dom.Name, ctx.Err())
			}
			tried = append(tried, s.name+": "+shortError(err))
			continue
		}
		if ip := firstRoutableIPv4(ifaces, mac); ip != "" {
			log.V(2).Info("libvirt domain address", "source", s.name, "ip", ip)
			return ip, nil
		}
		tried = append(tried, s.name+": none")
	}
	log.V(2).Info("libvirt domain has no address yet", "sources", strings.Join(tried, "; "))
	return "", nil
}

// shortError is an error's text for a V(2) line, without the rpc prefix.
func shortError(err error) string {
	var re *rpcError
	if errors.As(err, &re) {
		return fmt.Sprint(re.Err)
	}
	return err.Error()
}

// stateName is a libvirt domain state for log lines.
func stateName(s libvirt.DomainState) string {
	switch s {
	case libvirt.DomainNostate:
		return "nostate"
	case libvirt.DomainRunning:
		return "running"
	case libvirt.DomainBlocked:
		return "blocked"
	case libvirt.DomainPaused:
		return "paused"
	case libvirt.DomainShutdown:
		return "shutdown"
	case libvirt.DomainShutoff:
		return "shutoff"
	case libvirt.DomainCrashed:
		return "crashed"
	case libvirt.DomainPmsuspended:
		return "pmsuspended"
	}
	return fmt.Sprintf("state %d", s)
}
