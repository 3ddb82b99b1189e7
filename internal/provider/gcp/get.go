package gcp

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Get reads the instance, ours only (the marks; anything else is
// NotFound), in the state table, with its address in the entry's mode. A
// create step that failed is Get's error, with its class, once (an insert
// that failed after it was accepted reaches the caller with its class,
// where the earlier providers saw only NotFound); while one runs, an instance the API
// does not show yet is Provisioning with the step's progress, never
// NotFound. An instance whose last insert failed and whose failure was
// reported reads Stopped, so that the reconciler's next Create tries
// again (on its own backoff: the failure's class decided it).
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	zone, name, err := parseID(id)
	if err != nil {
		return provider.Instance{}, err
	}
	ctx = httpobserve.WithOp(logr.NewContext(ctx, logr.FromContextOrDiscard(ctx).WithValues("zone", zone, "name", name)), provider.OpGet)
	ctx, cancel := context.WithTimeout(ctx, foregroundBound)
	defer cancel()
	st := p.steps.Poll(name)
	if st.Err != nil {
		return provider.Instance{}, st.Err
	}
	api, err := p.client()
	if err != nil {
		return provider.Instance{}, err
	}
	in, err := api.GetInstance(ctx, zone, name)
	read := p.now() // when in was read: an external address's egress is confirmed then
	if err != nil {
		err = classify(err, call{what: "reading instance " + id, target: p.instanceTarget(zone, name)})
		if errors.Is(err, provider.ErrNotFound) && st.Running {
			// The insert has not made it yet (or GCE answers 404 while
			// its operation runs): Provisioning, never NotFound.
			ci, _ := p.creating.Get(name)
			return provisioning(id, ci.uid, st.Progress), nil
		}
		if errors.Is(err, provider.ErrNotFound) {
			p.forgetServing(id)
			if failure, ok := p.lastInsertFailure(name); ok {
				return provider.Instance{ID: id, State: provider.StateStopped,
					Progress: clipProgress("the last insert failed (" + failure + "); Create tries again")}, nil
			}
		}
		return provider.Instance{}, err
	}
	marks := provider.MarksFromLabels(in.GetLabels())
	if !marks.Managed || marks.Installation != p.opts.InstallationID {
		return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "instance %s is not this installation's", id)
	}
	p.noteRegion(regionOf(zone))
	inst := p.describe(in, zone)
	if st.Running && (inst.State == provider.StateProvisioning || inst.State == provider.StateRunning) {
		// Until its step has read the insert's operation to the end, the
		// instance is still being created, whatever its status says.
		inst.State, inst.IP, inst.Progress = provider.StateProvisioning, "", st.Progress
	}
	if err := p.applyServing(ctx, api, in, &inst, read); err != nil {
		return provider.Instance{}, err
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("gcp instance", "status", in.GetStatus(), "ip", inst.IP,
		"internalIP", address(in, AddressInternal), "externalIP", address(in, AddressExternal),
		"serving", inst.Serving, "servingDetail", inst.ServingDetail,
		"egressIP", inst.Egress.IP, "egressSource", inst.Egress.Source, "egressError", inst.Egress.Error)
	return inst, nil
}

// applyServing sets inst's serving signal and egress address when it runs
// with its address (the only state Ready reads them in); otherwise the
// memo goes. read is when in was read. A failed read of the report is the
// caller's error, with its class: a Transient one keeps a serving Proxy
// Ready as it is until the next read tells.
func (p *Provider) applyServing(ctx context.Context, api computeAPI, in *computepb.Instance, inst *provider.Instance, read time.Time) error {
	if inst.State != provider.StateRunning {
		p.forgetServing(inst.ID)
		return nil
	}
	s, err := p.servingSignal(ctx, api, inst.ID, in)
	if err != nil {
		return err
	}
	s.Apply(inst)
	p.applyBackendEgress(inst, read)
	return nil
}

// applyBackendEgress sets the egress address GCE itself knows, in external
// mode: everything the VM sends to the internet leaves from its external
// NAT IP (inst.IP, Running), confirmed by the read at read. It wins over
// the guest's echo (set by Apply before it), which through the same VM
// sees the same address; an echo that saw another is kept as a note. In
// internal mode the egress goes through Cloud NAT or a chain the provider
// cannot see: the echo's answer, if any, is all there is.
func (p *Provider) applyBackendEgress(inst *provider.Instance, read time.Time) {
	if p.cfg.AddressMode != AddressExternal || inst.State != provider.StateRunning {
		return
	}
	nat, err := netip.ParseAddr(inst.IP)
	if err != nil {
		return // GCE's natIP always parses; anything else makes no claim
	}
	e := provider.Egress{IP: nat.Unmap().String(), Source: provider.EgressFromBackend, Confirmed: read}
	if echo := inst.Egress; echo.Source == provider.EgressFromEcho && echo.IP != "" {
		if a, err := netip.ParseAddr(echo.IP); err != nil || a.Unmap() != nat.Unmap() {
			e.Error = "the echo saw " + echo.IP + ": a destination behind a NAT of its own may see another address"
		}
	}
	inst.Egress = e
}

// describe is the instance in, with its state and, while it runs, its
// address.
func (p *Provider) describe(in *computepb.Instance, zone string) provider.Instance {
	deleting := p.deleting.Running(in.GetName())
	ip := address(in, p.cfg.AddressMode)
	state := mapState(in.GetStatus(), ip, deleting)
	if state != provider.StateRunning {
		ip = ""
	}
	created, _ := createdAt(in.GetCreationTimestamp())
	return provider.Instance{
		ID: formatID(zone, in.GetName()), UID: provider.MarksFromLabels(in.GetLabels()).UID,
		State: state, IP: ip, CreatedAt: created,
	}
}

// clipProgress keeps a progress detail short (it lands in a condition's
// message; the in-flight table clips its own).
func clipProgress(s string) string {
	const limit = 256
	if len(s) <= limit {
		return s
	}
	cut := limit - len("…")
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
