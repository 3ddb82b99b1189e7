package proxmox

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// Create resolves the VMID (one /cluster/resources read) and starts the
// slow steps in the background; it returns Provisioning with progress.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	return p.create(httpobserve.WithOp(ctx, provider.OpCreate), req)
}

type plan struct {
	node     string
	template int
	// cloneNode is where the template lives, so where the clone task
	// runs; a clone to another node (pl.node) names it as the target.
	cloneNode string
	machine   MachineType
	// userData is the seed's user-data: the Proxy's cloud-init as given,
	// else the generated Squid cloud-config for the template's family.
	userData provider.Sensitive
}

// staticNIC is where a static address goes on the VM: the net0 value the
// config update writes (empty: the template's net0 stays) and the MAC the
// seed's network-config matches the NIC by (empty: by name).
type staticNIC struct {
	net0, mac string
}

func (p *Provider) plan(req provider.CreateRequest) (plan, error) {
	var err error
	pl := plan{node: req.Placement.Zone}
	if pl.node == "" {
		pl.node = p.cfg.Nodes[0]
	} else if !contains(p.cfg.Nodes, pl.node) {
		return pl, provider.Errorf(provider.ErrPermanent, "node %q is not configured", pl.node)
	}
	img := req.Placement.Image
	if img == "" {
		img = p.cfg.DefaultTemplate
	}
	tpl, ok := p.cfg.Templates[img]
	if !ok {
		return pl, provider.Errorf(provider.ErrPermanent, "image %q is not in the templates catalogue", img)
	}
	pl.template = tpl
	if pl.userData, err = squid.UserData(req, p.dest, p.cfg.family(img), servingreport.PublishFile); err != nil {
		return pl, err
	}
	mt := req.Placement.MachineType
	if mt == "" {
		mt = p.cfg.DefaultMachine
	}
	m, ok := p.cfg.MachineTypes[mt]
	if !ok {
		return pl, provider.Errorf(provider.ErrPermanent, "machine type %q is not in the catalogue", mt)
	}
	pl.machine = m
	if a := req.StaticAddress; a != nil {
		// Refused here, before any request, rather than in the step.
		if !a.Address.Addr().Is4() {
			// Get reports the guest's first IPv4 address.
			return pl, provider.Errorf(provider.ErrPermanent, "staticAddress.address %s: not IPv4; the proxmox provider reports an instance's IPv4 address", a.Address)
		}
		if _, err := nocloud.NetworkConfig(*a, ""); err != nil {
			return pl, err
		}
	}
	return pl, nil
}

// vmMAC is the MAC net0 gets with a static address on the configured
// bridge: derived from the instance name, so a resumed step writes the
// same one, in QEMU's locally administered range (PVE's own random MACs
// are in its OUI, BC:24:11), upper case as PVE prints it.
func vmMAC(name string) string { return strings.ToUpper(provider.InstanceMAC(name)) }

// net0 is the NIC on the configured bridge (and VLAN), with mac when
// given (PVE generates one when the value has none, at every update).
func (p *Provider) net0(mac string) string {
	n := "virtio"
	if mac != "" {
		n += "=" + mac
	}
	n += ",bridge=" + p.cfg.Bridge
	if p.cfg.VLANTag > 0 {
		n += ",tag=" + strconv.Itoa(p.cfg.VLANTag)
	}
	return n
}

// staticNIC decides the NIC a static address goes on. On the configured
// bridge, net0 is written with vmMAC; without a bridge the template's net0
// stays, with the MAC the clone gave it, read from the VM's config (one
// request, only with a static address). A net0 without a MAC leaves the
// seed matching the NIC by name.
func (p *Provider) staticNIC(ctx context.Context, node string, vmid int, req provider.CreateRequest) (staticNIC, error) {
	if p.cfg.Bridge != "" {
		if req.StaticAddress == nil {
			return staticNIC{net0: p.net0("")}, nil
		}
		mac := vmMAC(req.Name)
		return staticNIC{net0: p.net0(mac), mac: mac}, nil
	}
	if req.StaticAddress == nil {
		return staticNIC{}, nil
	}
	cfg, err := p.api.config(ctx, node, vmid)
	if err != nil {
		return staticNIC{}, err
	}
	net0, _ := cfg["net0"].(string)
	return staticNIC{mac: macOfNet(net0)}, nil
}

// macOfNet is the MAC of a PVE net value ("virtio=BC:24:11:2E:C5:4A,bridge=vmbr0",
// or macaddr=...), "" when it has none.
func macOfNet(v string) string {
	for _, part := range strings.Split(v, ",") {
		// The model's value (virtio=...) or macaddr's is the only one
		// that is six colon-separated bytes.
		_, val, _ := strings.Cut(part, "=")
		if hw, err := net.ParseMAC(val); err == nil && len(hw) == 6 && strings.Count(val, ":") == 5 {
			return val
		}
	}
	return ""
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func (p *Provider) create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	pl, err := p.plan(req)
	if err != nil {
		return provider.Instance{}, err
	}
	logger(ctx).V(2).Info("proxmox create planned", "node", pl.node, "template", pl.template,
		"cores", pl.machine.Cores, "memoryMB", pl.machine.MemoryMB, "userDataBytes", len(pl.userData.Reveal()), "generatedUserData", req.CloudInit == "",
		"staticAddress", provider.DescribeStaticAddress(req.StaticAddress))
	unlock, err := p.names.Lock(ctx, req.Name)
	if err != nil {
		return provider.Instance{}, provider.Errorf(provider.ErrTransient, "waiting for another call on %s: %w", req.Name, err)
	}
	defer unlock()
	if st := p.steps.Poll(req.Name); st.Err != nil {
		return provider.Instance{}, st.Err
	}
	if p.steps.Running(req.Name) {
		p.creatingMu.Lock()
		in, ok := p.creating[req.Name]
		p.creatingMu.Unlock()
		if ok {
			st := p.steps.Poll(req.Name)
			return provider.Instance{ID: in.ID, UID: req.UID, State: provider.StateProvisioning, Progress: st.Progress}, nil
		}
	}
	rs, err := p.resources(ctx, true)
	if err != nil {
		return provider.Instance{}, err
	}
	vmid, adopt, err := p.allocate(ctx, rs, req)
	if err != nil {
		return provider.Instance{}, err
	}
	id := formatID(vmid, req.Name)
	if adopt {
		if r, _ := find(rs, vmid); r.Status == "running" && r.Lock == "" && p.marksFromTags(r.Tags).Managed {
			if in, err := p.get(ctx, vmid, req.Name); err == nil && in.State != provider.StateStopped {
				return in, nil
			}
		}
	}
	// The clone is submitted here (PVE answers its UPID at once), so the
	// VM's entry exists once Create returns; its task is followed by the
	// step.
	cloneUPID := ""
	if _, exists := find(rs, vmid); !exists {
		// The template is cloned on its own node; a VM placed on another
		// node is cloned there with target (PVE needs the template's
		// disks on shared storage for that, and says so).
		src, ok := find(rs, pl.template)
		if !ok || src.Template != 1 {
			return provider.Instance{}, provider.Errorf(provider.ErrPermanent, "template %d (placement.image %q) is not a template in the cluster", pl.template, req.Placement.Image)
		}
		pl.cloneNode = src.Node
		params := url.Values{"newid": {strconv.Itoa(vmid)}, "name": {req.Name}, "description": {p.description(req.UID)}}
		if p.cfg.FullClone {
			params.Set("full", "1")
		}
		if src.Node != pl.node {
			params.Set("target", pl.node)
		}
		if cloneUPID, err = p.api.upid(ctx, http.MethodPost, vmPath(src.Node, pl.template)+"/clone", params); err != nil {
			return provider.Instance{}, err
		}
		p.forgetResources()
	}
	p.creatingMu.Lock()
	p.creating[req.Name] = provider.Instance{ID: id, UID: req.UID, CreatedAt: time.Now()}
	p.creatingMu.Unlock()
	st, err := p.steps.Start(ctx, req.Name, "create started", func(ctx context.Context, progress func(string)) error {
		return p.provision(httpobserve.WithOp(ctx, httpobserve.OpCreateStep), req, pl, vmid, cloneUPID, progress)
	})
	if err != nil {
		return provider.Instance{}, err
	}
	if st.Err != nil {
		return provider.Instance{}, st.Err
	}
	if p.onStepStarted != nil && st.Running {
		p.onStepStarted(req.Name, st.Done)
	}
	return provider.Instance{ID: id, UID: req.UID, State: provider.StateProvisioning, Progress: st.Progress}, nil
}

// allocate finds our VM by name or a free VMID from the UID's hash.
func (p *Provider) allocate(ctx context.Context, rs []resource, req provider.CreateRequest) (int, bool, error) {
	var named []resource
	taken := map[int]bool{}
	// An LXC container's VMID is taken too (one VMID space).
	for _, r := range rs {
		taken[r.VMID] = true
		if r.Name == req.Name && r.Template == 0 {
			named = append(named, r)
		}
	}
	if len(named) > 1 {
		return 0, false, provider.Errorf(provider.ErrPermanent, "%d VMs are named %q; remove all but one", len(named), req.Name)
	}
	if len(named) == 1 {
		r := named[0]
		m := p.marksFromTags(r.Tags)
		if !m.Managed {
			// Not tagged yet (a create interrupted after the clone): the
			// description decides.
			cfg, err := p.api.config(ctx, r.Node, r.VMID)
			if err != nil {
				return 0, false, err
			}
			d, _ := cfg["description"].(string)
			m = marksFromDescription(d)
		}
		if err := provider.AdoptionError(provider.CheckAdoption(m, p.opts.InstallationID, req.UID), req.Name); err != nil {
			return 0, false, err
		}
		if m.UID == "" {
			// Adopted with an empty UID: ours is written now, so the next
			// list and Get see it.
			if err := p.api.do(ctx, http.MethodPut, vmPath(r.Node, r.VMID)+"/config", url.Values{"tags": {p.tags(req.UID, time.Now(), hasTag(r.Tags, tagReporter))}, "description": {p.description(req.UID)}}, nil); err != nil {
				return 0, false, err
			}
			p.forgetResources()
		}
		return r.VMID, true, nil
	}
	for i := 0; i < maxProbes; i++ {
		v := p.vmidFor(req.UID, i)
		if !taken[v] {
			return v, false, nil
		}
		if r, _ := find(rs, v); nameless(r) && r.Lock != "" && r.Template == 0 {
			// A clone in progress at one of our probes may be ours, made
			// before a restart: it is judged once its lock clears (the
			// step probes past it if it is not).
			return v, true, nil
		}
	}
	return 0, false, provider.Errorf(provider.ErrQuotaExceeded, "no free VMID in [%d, %d] after %d probes", p.cfg.VMIDMin, p.cfg.VMIDMax, maxProbes)
}

// seedUploadBound bounds a seed upload and its task, which a cancel does
// not cut short (a seed is tens of KiB; PVE moves it in within seconds).
const seedUploadBound = 2 * time.Minute

// provision is the create step: each part ensures, so a rerun after a
// restart resumes.
func (p *Provider) provision(ctx context.Context, req provider.CreateRequest, pl plan, vmid int, cloneUPID string, progress func(string)) error {
	if err := p.wait(ctx, pl.cloneNode, cloneUPID, "clone", progress); err != nil {
		return err
	}
	r, err := p.waitUnlocked(ctx, vmid, progress)
	if err != nil {
		return err
	}
	if cloneUPID == "" {
		// Not cloned by this call: an entry that was nameless and locked
		// when Create chose it (a clone before a restart, or another's)
		// is ours only by name and mark.
		if err := p.adoptable(ctx, r, req); err != nil {
			return err
		}
	}
	node := r.Node
	created := createdFromTags(r.Tags)
	if created.IsZero() {
		created = time.Now()
	}
	if m := p.marksFromTags(r.Tags); !m.Managed || m.UID != strings.ToLower(req.UID) || createdFromTags(r.Tags).IsZero() {
		// The mark first, so ListByTag and Get know the VM before the
		// slow parts; an adopted VM with an empty UID gets ours.
		if err := p.api.do(ctx, http.MethodPut, vmPath(node, vmid)+"/config", url.Values{"tags": {p.tags(req.UID, created, hasTag(r.Tags, tagReporter))}, "description": {p.description(req.UID)}}, nil); err != nil {
			return err
		}
		p.forgetResources()
	}
	if r.Lock == "suspended" {
		progress("resuming hibernated VM")
		upid, err := p.api.upid(ctx, http.MethodPost, vmPath(node, vmid)+"/status/start", nil)
		if err != nil {
			return err
		}
		return p.wait(ctx, node, upid, "start", progress)
	}
	if r.Status == "running" {
		return nil
	}
	// The VM gets tagReporter with this seed unless it has booted from a
	// seed of ours already: cloud-init runs vendor-data once per instance,
	// so a VM first booted by an operator without the reporter never gets
	// it from a new seed.
	reporter := hasTag(r.Tags, tagReporter) || cloneUPID != ""
	if !reporter {
		attached, err := p.seedAttached(ctx, node, vmid, req)
		if err != nil {
			return err
		}
		reporter = !attached
	}
	nic, err := p.staticNIC(ctx, node, vmid, req)
	if err != nil {
		return err
	}
	var netcfg []byte
	if req.StaticAddress != nil {
		if netcfg, err = nocloud.NetworkConfig(*req.StaticAddress, nic.mac); err != nil {
			return err
		}
	}
	progress("uploading seed ISO")
	iso, err := nocloud.Build(nocloud.Seed{InstanceID: req.Name, LocalHostname: req.Name, UserData: pl.userData,
		VendorData: nocloud.VendorData(nocloud.OwnCloudInitReporter(req, p.dest), true), NetworkConfig: provider.Sensitive(netcfg)})
	if err != nil {
		return err
	}
	// The upload and the task that moves the file into the storage are
	// seen through even when Delete cancels the step: PVE stores an upload
	// it has received whether or not the client still waits, so a seed cut
	// off mid-flight would land after Delete removed the seeds. The cancel
	// is honoured once the file is in place.
	upCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), seedUploadBound)
	defer cancel()
	upid, err := p.api.upload(upCtx, node, p.cfg.ISOStorage, seedName(req.Name, p.opts.InstallationID, req.UID), iso)
	if err != nil {
		return err
	}
	if err := p.wait(upCtx, node, upid, "upload", progress); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return provider.Errorf(provider.ErrTransient, "create step stopped after the seed upload: %w", err)
	}
	progress("configuring VM")
	// The tags gain tagReporter with the config that attaches the seed.
	params := url.Values{
		"cores": {strconv.Itoa(pl.machine.Cores)}, "memory": {strconv.Itoa(pl.machine.MemoryMB)},
		"agent": {"1"},
		"ide2":  {p.cfg.ISOStorage + ":iso/" + seedName(req.Name, p.opts.InstallationID, req.UID) + ",media=cdrom"},
		"tags":  {p.tags(req.UID, created, reporter)},
	}
	if nic.net0 != "" {
		params.Set("net0", nic.net0)
	}
	if err := p.api.do(ctx, http.MethodPut, vmPath(node, vmid)+"/config", params, nil); err != nil {
		return err
	}
	p.forgetResources()
	if p.cfg.DiskGiB > 0 {
		progress("resizing disk")
		upid, err := p.api.upid(ctx, http.MethodPut, vmPath(node, vmid)+"/resize", url.Values{"disk": {"scsi0"}, "size": {strconv.Itoa(p.cfg.DiskGiB) + "G"}})
		if err != nil && !strings.Contains(err.Error(), "shrinking disks is not supported") {
			return err
		}
		if err == nil {
			if err := p.wait(ctx, node, upid, "resize", progress); err != nil {
				return err
			}
		}
	}
	progress("start task started")
	upid, err = p.api.upid(ctx, http.MethodPost, vmPath(node, vmid)+"/status/start", nil)
	if err != nil {
		return err
	}
	return p.wait(ctx, node, upid, "start", progress)
}

// seedAttached says whether the VM's ide2 holds its seed already: a config
// update of an earlier create attached it (one request, only when a create
// resumes on a VM without tagReporter).
func (p *Provider) seedAttached(ctx context.Context, node string, vmid int, req provider.CreateRequest) (bool, error) {
	cfg, err := p.api.config(ctx, node, vmid)
	if err != nil {
		return false, err
	}
	ide2, _ := cfg["ide2"].(string)
	return strings.Contains(ide2, ":iso/"+seedName(req.Name, p.opts.InstallationID, req.UID)), nil
}

// adoptable judges a VM this create did not clone: another name is a
// Transient failure (the next Create probes past it); our name without our
// mark, or with another UID, is the adoption error.
func (p *Provider) adoptable(ctx context.Context, r resource, req provider.CreateRequest) error {
	if r.Name != req.Name {
		return provider.Errorf(provider.ErrTransient, "VM %d, whose clone was in progress at one of %s's VMIDs, is %q, not ours: the next Create probes past it", r.VMID, req.Name, r.Name)
	}
	m := p.marksFromTags(r.Tags)
	if !m.Managed {
		cfg, err := p.api.config(ctx, r.Node, r.VMID)
		if err != nil {
			return err
		}
		d, _ := cfg["description"].(string)
		m = marksFromDescription(d)
	}
	return provider.AdoptionError(provider.CheckAdoption(m, p.opts.InstallationID, req.UID), req.Name)
}
