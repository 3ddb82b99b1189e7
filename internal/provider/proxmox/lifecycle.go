package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Get reads the VM: the shared /cluster/resources read, plus the agent
// call for a running VM (2 requests in steady state).
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpGet); err != nil {
		return provider.Instance{}, err
	}
	vmid, name, err := parseID(id)
	if err != nil {
		return provider.Instance{}, provider.Wrap(p.name, provider.OpGet, provider.ErrPermanent, err)
	}
	st := p.steps.Poll(name)
	if st.Err != nil {
		return provider.Instance{}, st.Err
	}
	in, err := p.get(withOp(ctx, provider.OpGet), vmid, name)
	if st.Running {
		// The step's progress, unless the backend shows the VM gone after
		// its clone, or taken by another.
		switch {
		case err == nil:
			return provider.Instance{ID: id, UID: in.UID, State: provider.StateProvisioning, Progress: st.Progress}, nil
		}
	}
	if err != nil {
		return provider.Instance{}, provider.Wrap(p.name, provider.OpGet, provider.ErrTransient, err)
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

// Delete cancels the create step, then stops, removes the seed ISO and
// destroys in the background (returns early: the caller polls Get until
// ErrNotFound, which it reads only once everything is gone).
func (p *Provider) Delete(ctx context.Context, id string) error {
	if err := provider.CtxErr(ctx, p.name, provider.OpDelete); err != nil {
		return err
	}
	ctx = withOp(ctx, provider.OpDelete)
	vmid, name, err := parseID(id)
	if err != nil {
		return provider.Wrap(p.name, provider.OpDelete, provider.ErrPermanent, err)
	}
	unlock, err := p.names.Lock(ctx, name)
	if err != nil {
		return provider.Wrap(p.name, provider.OpDelete, provider.ErrTransient, err)
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
		return provider.Wrap(p.name, provider.OpDelete, provider.ErrTransient, err)
	}
	r, ok := find(rs, vmid)
	// A locked entry (a clone in progress is nameless) is judged once its
	// lock clears, in the step.
	candidate := ok && (r.Name == name || r.Lock != "")
	_, err = p.dels.Start(ctx, name, "delete started", func(ctx context.Context, progress func(string)) error {
		defer p.forgetResources()
		ctx = withOp(ctx, opDeleteStep)
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
	path := vmPath(r.Node, vmid)
	if r.Status != "stopped" || r.Lock == "suspended" {
		upid, err := p.api.upid(ctx, http.MethodPost, path+"/status/stop", nil)
		if err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
		if err := p.wait(ctx, r.Node, upid, "stop", progress); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
	}
	if err := p.deleteSeeds(ctx, name); err != nil {
		return err
	}
	upid, err := p.api.upid(ctx, http.MethodDelete, path, url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}})
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := p.wait(ctx, r.Node, upid, "destroy", progress); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	return nil
}

// deleteSeeds removes the seed ISO on every configured node (a VM may have
// migrated away from the node its seed was uploaded to).
func (p *Provider) deleteSeeds(ctx context.Context, name string) error {
	for _, node := range p.cfg.Nodes {
		vol := p.cfg.ISOStorage + ":iso/" + seedName(name)
		upid, err := p.api.upid(ctx, http.MethodDelete, "/nodes/"+node+"/storage/"+p.cfg.ISOStorage+"/content/"+vol, nil)
		if err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
		if err := p.wait(ctx, node, upid, "seed delete", func(string) {}); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
	}
	return nil
}

// ListByTag is one cluster-wide read; the tag mark decides.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpList); err != nil {
		return nil, err
	}
	rs, err := p.resources(withOp(ctx, provider.OpList), true)
	if err != nil {
		return nil, provider.Wrap(p.name, provider.OpList, provider.ErrTransient, err)
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

// Check probes every node concurrently; the first unhealthy node decides.
func (p *Provider) Check(ctx context.Context) provider.CheckResult {
	ctx = withOp(ctx, provider.OpCheck)
	results := make([]provider.CheckResult, len(p.cfg.Nodes))
	var wg sync.WaitGroup
	for i, n := range p.cfg.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = p.checkNode(ctx, n) }()
	}
	wg.Wait()
	for _, r := range results {
		if !r.Healthy {
			return r
		}
	}
	return provider.CheckResult{Healthy: true, Reason: provider.ReasonHealthy, Target: strings.Join(p.cfg.Nodes, ","), Address: p.cfg.URL,
		Message: fmt.Sprintf("%d node(s) ready", len(p.cfg.Nodes))}
}

func (p *Provider) checkNode(ctx context.Context, node string) provider.CheckResult {
	res := provider.CheckResult{Target: node, Address: p.cfg.URL, Details: map[string]string{}}
	fail := func(reason string, err error) provider.CheckResult {
		res.Reason, res.Message = reason, err.Error()
		return res
	}
	tok, err := p.api.token()
	if err != nil {
		return fail("CredentialsUnavailable", err)
	}
	res.Details["tokenID"], _, _ = strings.Cut(tok, "=")
	var ver struct {
		Version string `json:"version"`
	}
	if err := p.api.do(ctx, http.MethodGet, "/version", nil, &ver); err != nil {
		return fail(checkReason(ctx, err), err)
	}
	res.Details["version"] = ver.Version
	if err := p.api.do(ctx, http.MethodGet, "/nodes/"+node+"/status", nil, nil); err != nil {
		return fail(checkReason(ctx, err), err)
	}
	var ss struct {
		Active  int    `json:"active"`
		Content string `json:"content"`
		Avail   int64  `json:"avail"`
	}
	if err := p.api.do(ctx, http.MethodGet, "/nodes/"+node+"/storage/"+p.cfg.ISOStorage+"/status", nil, &ss); err != nil {
		if r := checkReason(ctx, err); r != provider.ReasonAPIError {
			return fail(r, err)
		}
		return fail("StorageNotFound", err)
	}
	if ss.Active != 1 || !strings.Contains(ss.Content, "iso") {
		return fail("StorageNotFound", fmt.Errorf("storage %s on %s is inactive or has no iso content", p.cfg.ISOStorage, node))
	}
	res.Details["isoStorageAvailBytes"] = fmt.Sprint(ss.Avail)
	rs, err := p.resources(ctx, false)
	if err != nil {
		return fail(checkReason(ctx, err), err)
	}
	for img, vmid := range p.cfg.Templates {
		r, ok := find(rs, vmid)
		if !ok || r.Template != 1 {
			return fail("TemplateNotFound", fmt.Errorf("template %s (VMID %d) is missing or not a template", img, vmid))
		}
	}
	res.Healthy, res.Reason, res.Message = true, provider.ReasonHealthy, "node ready"
	return res
}

func checkReason(ctx context.Context, err error) string {
	var ae *apiError
	switch {
	case ctx.Err() != nil:
		return provider.ReasonTimeout
	case strings.Contains(err.Error(), "TLS verification"), strings.Contains(err.Error(), "CA file"):
		return "CertificateInvalid"
	case errors.As(err, &ae) && ae.Status == 401:
		return provider.ReasonUnauthorized
	case errors.As(err, &ae) && ae.Status == 403:
		return provider.ReasonForbidden
	case errors.As(err, &ae) && (ae.Status == 595 || ae.Status == 596):
		return provider.ReasonUnreachable
	case errors.As(err, &ae):
		return provider.ReasonAPIError
	default:
		return provider.ReasonUnreachable
	}
}

// owned: our name and this installation's mark (tags, else the
// description).
func (p *Provider) owned(ctx context.Context, r resource, name string) (bool, error) {
	if r.Name != name {
		return false, nil
	}
	if m := p.marksFromTags(r.Tags); m.Managed {
		return m.Installation == p.opts.InstallationID, nil
	}
	cfg, err := p.api.config(ctx, r.Node, r.VMID)
	if err != nil {
		return false, err
	}
	d, _ := cfg["description"].(string)
	m := marksFromDescription(d)
	return m.Managed && m.Installation == p.opts.InstallationID, nil
}
