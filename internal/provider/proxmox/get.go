package proxmox

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Get reads the VM: the shared /cluster/resources read, plus the agent
// call for a running VM (2 requests in steady state).
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	vmid, name, err := parseID(id)
	if err != nil {
		return provider.Instance{}, err
	}
	st := p.steps.Poll(name)
	if st.Err != nil && !errors.Is(st.Err, provider.ErrTransient) {
		// A permanent or quota failure is the answer, with its class.
		return provider.Instance{}, st.Err
	}
	if ds := p.dels.Poll(name); ds.Err != nil {
		// A failed delete step is the next call's error, so the reconciler
		// calls Delete again instead of reading the VM as still there.
		return provider.Instance{}, ds.Err
	}
	in, err := p.get(httpobserve.WithOp(ctx, provider.OpGet), vmid, name)
	if st.Err != nil {
		// A transient failure is the answer (once), unless the VM is gone
		// or its name taken by another: the step failed against what is
		// not ours any more, and NotFound says more.
		if errors.Is(err, provider.ErrNotFound) {
			return provider.Instance{}, err
		}
		return provider.Instance{}, st.Err
	}
	if st.Running {
		// The step's progress, unless the backend shows the VM gone after
		// its clone, or taken by another.
		switch {
		case err == nil:
			return provider.Instance{ID: id, UID: in.UID, State: provider.StateProvisioning, Progress: st.Progress}, nil
		}
	}
	if err != nil {
		return provider.Instance{}, err
	}
	return in, nil
}

func (p *Provider) get(ctx context.Context, vmid int, name string) (provider.Instance, error) {
	rs, err := p.resources(ctx, false)
	if err != nil {
		return provider.Instance{}, err
	}
	r, ok := find(rs, vmid)
	if !ok {
		return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "VM %d not found", vmid)
	}
	id := formatID(vmid, name)
	m := p.marksFromTags(r.Tags)
	if r.Lock != "" && r.Lock != "suspended" {
		// Mid-clone entries are nameless; an unfinished create that no
		// step advances reads Stopped, so Create resumes it.
		return provider.Instance{ID: id, UID: m.UID, State: provider.StateStopped, Progress: "VM locked (" + r.Lock + "); Create resumes it"}, nil
	}
	if r.Name != name {
		return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "VM %d is now %q", vmid, r.Name)
	}
	if !m.Managed {
		// Not tagged: a create interrupted right after its clone, or
		// someone else's VM; the description decides (one more request,
		// never in steady state).
		cfg, err := p.api.config(ctx, r.Node, vmid)
		if err != nil {
			return provider.Instance{}, err
		}
		d, _ := cfg["description"].(string)
		dm := marksFromDescription(d)
		if !dm.Managed || dm.Installation != p.opts.InstallationID {
			return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "VM %d is not this installation's", vmid)
		}
		return provider.Instance{ID: id, UID: dm.UID, State: provider.StateStopped, Progress: "create unfinished; Create resumes it"}, nil
	}
	if m.Installation != p.opts.InstallationID {
		return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "VM %d is not this installation's", vmid)
	}
	in := provider.Instance{ID: id, UID: m.UID}
	switch r.Status {
	case "running":
	case "unknown":
		return provider.Instance{}, provider.Errorf(provider.ErrTransient, "VM %d: node %s does not report its status", vmid, r.Node)
	default:
		in.State = provider.StateStopped
		return in, nil
	}
	var ag struct {
		Result []struct {
			Name  string `json:"name"`
			Addrs []struct {
				Type string `json:"ip-address-type"`
				IP   string `json:"ip-address"`
			} `json:"ip-addresses"`
		} `json:"result"`
	}
	err = p.api.do(ctx, http.MethodGet, vmPath(r.Node, vmid)+"/agent/network-get-interfaces", nil, &ag)
	if err != nil {
		if strings.Contains(err.Error(), "QEMU guest agent is not running") {
			in.State, in.Progress = provider.StateProvisioning, "waiting for the guest agent"
			return in, nil
		}
		if strings.Contains(err.Error(), "No QEMU guest agent configured") {
			in.State = provider.StateStopped
			return in, nil
		}
		return provider.Instance{}, provider.Errorf(provider.ErrTransient, "agent of VM %d: %w", vmid, err)
	}
	for _, ifc := range ag.Result {
		if ifc.Name == "lo" {
			continue
		}
		for _, a := range ifc.Addrs {
			if ip := net.ParseIP(a.IP); a.Type == "ipv4" && ip != nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				in.State, in.IP = provider.StateRunning, a.IP
				return in, nil
			}
		}
	}
	in.State, in.Progress = provider.StateProvisioning, "waiting for an IPv4 address"
	return in, nil
}
