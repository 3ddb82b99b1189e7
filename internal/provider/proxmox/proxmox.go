package proxmox

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/inflight"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/keyedlock"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
)

// Provider is the proxmox provider.
type Provider struct {
	name  string
	opts  provider.Options
	cfg   Config
	api   *client
	names keyedlock.Locks
	steps *inflight.Table
	dels  *inflight.Table
	// taskPoll is the interval between task status reads.
	taskPoll time.Duration

	// shared /cluster/resources read: concurrent Gets within window share one.
	resMu   sync.Mutex
	resAt   time.Time
	resList []resource
	resWait chan struct{}
	window  time.Duration

	// creating holds the creates started here, for ListByTag while the
	// clone runs (the VM carries no tag until its first config).
	creatingMu sync.Mutex
	creating   map[string]provider.Instance
	cloned     map[string]bool
}

func (p *Provider) setCloned(name string) {
	p.creatingMu.Lock()
	p.cloned[name] = true
	p.creatingMu.Unlock()
}

func (p *Provider) isCloned(name string) bool {
	p.creatingMu.Lock()
	defer p.creatingMu.Unlock()
	return p.cloned[name]
}

// createdFromTags reads the poc-<unix seconds> tag: /cluster/resources has
// no creation time, and ListByTag must not read configs.
func createdFromTags(tags string) time.Time {
	for _, t := range strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		if v, ok := strings.CutPrefix(t, "poc-"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.Unix(n, 0)
			}
		}
	}
	return time.Time{}
}

var _ provider.Provider = (*Provider)(nil)
var _ provider.Checker = (*Provider)(nil)

// New builds the provider; it makes no request.
func New(name string, cfg Config, opts provider.Options) (*Provider, error) {
	cfg.Default()
	if errs := cfg.Validate(nil); len(errs) > 0 {
		return nil, provider.Wrap(name, "new", provider.ErrPermanent, errs.ToAggregate())
	}
	return &Provider{
		name: name, opts: opts, cfg: cfg,
		api: &client{base: strings.TrimRight(cfg.URL, "/"), tokenFile: cfg.TokenFile, caFile: cfg.CAFile,
			insecure: cfg.InsecureSkipTLSVerify, timeout: time.Duration(cfg.RequestTimeoutSeconds) * time.Second},
		steps: inflight.New(provider.OpCreate), dels: inflight.New(provider.OpDelete),
		taskPoll: time.Second, window: time.Second, creating: map[string]provider.Instance{}, cloned: map[string]bool{},
	}, nil
}

// Close stops the steps in flight.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), inflight.StopBound)
	defer cancel()
	err1 := p.steps.Close(ctx)
	err2 := p.dels.Close(ctx)
	if err1 != nil {
		return err1
	}
	return err2
}

// --- IDs and marks ---

func formatID(vmid int, name string) string { return fmt.Sprintf("vms/%d/%s", vmid, name) }

var idRE = regexp.MustCompile(`^vms/([1-9][0-9]{2,8})/(.+)$`)

func parseID(id string) (int, string, error) {
	m := idRE.FindStringSubmatch(id)
	if m == nil || strings.Contains(m[2], "/") {
		return 0, "", provider.Errorf(provider.ErrPermanent, "malformed proxmox ID %q (want vms/<vmid>/<name>)", id)
	}
	n, _ := strconv.Atoi(m[1])
	return n, m[2], nil
}

const tagManaged = "proxy-operator"

// installTag is the installation's tag: a hash, since PVE tags allow only
// [a-z0-9_+.-].
func installTag(inst string) string {
	h := sha256.Sum256([]byte(inst))
	return "poi-" + hex.EncodeToString(h[:6])
}

func uidTag(uid string) string { return "pou-" + strings.ToLower(uid) }

func (p *Provider) tags(uid string, created time.Time) string {
	return strings.Join([]string{tagManaged, installTag(p.opts.InstallationID), uidTag(uid), fmt.Sprintf("poc-%d", created.Unix())}, ";")
}

// marksFromTags reads the mark from /cluster/resources' tags (";" or ","
// separated). Installation is the hashed tag compared with ours.
func (p *Provider) marksFromTags(tags string) provider.Marks {
	var m provider.Marks
	for _, t := range strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		switch {
		case t == tagManaged:
			m.Managed = true
		case t == installTag(p.opts.InstallationID):
			m.Installation = p.opts.InstallationID
		case strings.HasPrefix(t, "poi-"):
			m.Installation = t
		case strings.HasPrefix(t, "pou-"):
			m.UID = strings.TrimPrefix(t, "pou-")
		}
	}
	return m
}

func (p *Provider) description(uid string) string {
	return fmt.Sprintf("%s=%s\n%s=%s\n%s=%s\n", provider.MarkManaged, provider.MarkManagedValue,
		provider.MarkUID, uid, provider.MarkInstallation, p.opts.InstallationID)
}

func marksFromDescription(d string) provider.Marks {
	kv := map[string]string{}
	for _, l := range strings.Split(d, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			kv[k] = v
		}
	}
	return provider.MarksFromLabels(kv)
}

// vmidFor is the VMID probe sequence: a hash of the UID into the range,
// then forward.
func (p *Provider) vmidFor(uid string, attempt int) int {
	h := sha256.Sum256([]byte(uid))
	span := uint64(p.cfg.VMIDMax - p.cfg.VMIDMin + 1)
	return p.cfg.VMIDMin + int((binary.BigEndian.Uint64(h[:8])+uint64(attempt))%span)
}

func seedName(name string) string { return name + "-seed.iso" }

// --- shared resources read ---

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

// --- tasks ---

// wait follows a task until it ends, reporting progress.
func (p *Provider) wait(ctx context.Context, node, upid, what string, progress func(string)) error {
	if upid == "" {
		return nil
	}
	t := time.NewTicker(p.taskPoll)
	defer t.Stop()
	for {
		ts, err := p.api.task(ctx, node, upid)
		if err != nil {
			return err
		}
		if ts.Status == "stopped" {
			return classifyTask(what, ts.ExitStatus)
		}
		detail := what + " task running"
		if what == "clone" {
			if m := pctRE.FindStringSubmatch(p.api.taskLogTail(ctx, node, upid)); m != nil {
				detail = fmt.Sprintf("clone task %s%%", m[1])
			}
		}
		progress(detail)
		select {
		case <-ctx.Done():
			return provider.Errorf(provider.ErrTransient, "%s task %s: %w", what, upid, ctx.Err())
		case <-t.C:
		}
	}
}

var pctRE = regexp.MustCompile(`\(([0-9]+)(?:\.[0-9]+)?%\)`)

// waitUnlocked waits out a VM lock in the background; a clone lock that
// never clears is reported with the VMID and the qm unlock hint.
func (p *Provider) waitUnlocked(ctx context.Context, vmid int, progress func(string)) (resource, error) {
	t := time.NewTicker(p.taskPoll)
	defer t.Stop()
	start := time.Now()
	for {
		rs, err := p.resources(ctx, true)
		if err != nil {
			return resource{}, err
		}
		r, ok := find(rs, vmid)
		if !ok {
			return resource{}, provider.Errorf(provider.ErrNotFound, "VM %d is gone", vmid)
		}
		if r.Lock == "" || r.Lock == "suspended" {
			return r, nil
		}
		if time.Since(start) > 10*time.Minute {
			return r, provider.Errorf(provider.ErrTransient, "VM %d is still locked (%s) after %s; if no task runs on it, clear it with `qm unlock %d` on node %s", vmid, r.Lock, time.Since(start).Round(time.Second), vmid, r.Node)
		}
		progress(fmt.Sprintf("VM %d locked (%s); waiting (qm unlock %d if it never clears)", vmid, r.Lock, vmid))
		select {
		case <-ctx.Done():
			return resource{}, provider.Errorf(provider.ErrTransient, "waiting for VM %d lock: %w", vmid, ctx.Err())
		case <-t.C:
		}
	}
}

// --- Create ---

// Create resolves the VMID (one /cluster/resources read) and starts the
// slow steps in the background; it returns Provisioning with progress.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpCreate); err != nil {
		return provider.Instance{}, err
	}
	inst, err := p.create(withOp(ctx, provider.OpCreate), req)
	if err != nil {
		return provider.Instance{}, provider.Wrap(p.name, provider.OpCreate, provider.ErrTransient, err)
	}
	return inst, nil
}

type plan struct {
	node     string
	template int
	machine  MachineType
}

func (p *Provider) plan(req provider.CreateRequest) (plan, error) {
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
	mt := req.Placement.MachineType
	if mt == "" {
		mt = p.cfg.DefaultMachine
	}
	m, ok := p.cfg.MachineTypes[mt]
	if !ok {
		return pl, provider.Errorf(provider.ErrPermanent, "machine type %q is not in the catalogue", mt)
	}
	pl.machine = m
	return pl, nil
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
		params := url.Values{"newid": {strconv.Itoa(vmid)}, "name": {req.Name}, "description": {p.description(req.UID)}}
		if p.cfg.FullClone {
			params.Set("full", "1")
		}
		if cloneUPID, err = p.api.upid(ctx, http.MethodPost, vmPath(pl.node, pl.template)+"/clone", params); err != nil {
			return provider.Instance{}, err
		}
		p.forgetResources()
	}
	p.creatingMu.Lock()
	p.creating[req.Name] = provider.Instance{ID: id, UID: req.UID, CreatedAt: time.Now()}
	p.creatingMu.Unlock()
	st, err := p.steps.Start(ctx, req.Name, "create started", func(ctx context.Context, progress func(string)) error {
		return p.provision(withOp(ctx, opCreateStep), req, pl, vmid, cloneUPID, progress)
	})
	if err != nil {
		return provider.Instance{}, err
	}
	if st.Err != nil {
		return provider.Instance{}, st.Err
	}
	return provider.Instance{ID: id, UID: req.UID, State: provider.StateProvisioning, Progress: st.Progress}, nil
}

// allocate finds our VM by name or a free VMID from the UID's hash.
func (p *Provider) allocate(ctx context.Context, rs []resource, req provider.CreateRequest) (int, bool, error) {
	var named []resource
	taken := map[int]bool{}
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
			if err := p.api.do(ctx, http.MethodPut, vmPath(r.Node, r.VMID)+"/config", url.Values{"tags": {p.tags(req.UID, time.Now())}, "description": {p.description(req.UID)}}, nil); err != nil {
				return 0, false, err
			}
			p.forgetResources()
		}
		return r.VMID, true, nil
	}
	for i := 0; i < 64; i++ {
		v := p.vmidFor(req.UID, i)
		if !taken[v] {
			return v, false, nil
		}
	}
	return 0, false, provider.Errorf(provider.ErrQuotaExceeded, "no free VMID in [%d, %d] after 64 probes", p.cfg.VMIDMin, p.cfg.VMIDMax)
}

// provision is the create step: each part ensures, so a rerun after a
// restart resumes.
func (p *Provider) provision(ctx context.Context, req provider.CreateRequest, pl plan, vmid int, cloneUPID string, progress func(string)) error {
	if err := p.wait(ctx, pl.node, cloneUPID, "clone", progress); err != nil {
		return err
	}
	r, err := p.waitUnlocked(ctx, vmid, progress)
	if err != nil {
		return err
	}
	node := r.Node
	created := createdFromTags(r.Tags)
	if created.IsZero() {
		created = time.Now()
	}
	if m := p.marksFromTags(r.Tags); !m.Managed || m.UID != strings.ToLower(req.UID) || createdFromTags(r.Tags).IsZero() {
		// The mark first, so ListByTag and Get know the VM before the
		// slow parts; an adopted VM with an empty UID gets ours.
		if err := p.api.do(ctx, http.MethodPut, vmPath(node, vmid)+"/config", url.Values{"tags": {p.tags(req.UID, created)}, "description": {p.description(req.UID)}}, nil); err != nil {
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
	progress("uploading seed ISO")
	iso, err := nocloud.Build(nocloud.Seed{InstanceID: req.Name, LocalHostname: req.Name, UserData: req.CloudInit,
		VendorData: nocloud.GuestAgentVendorData})
	if err != nil {
		return err
	}
	upid, err := p.api.upload(ctx, node, p.cfg.ISOStorage, seedName(req.Name), iso)
	if err != nil {
		return err
	}
	if err := p.wait(ctx, node, upid, "upload", progress); err != nil {
		return err
	}
	progress("configuring VM")
	params := url.Values{
		"cores": {strconv.Itoa(pl.machine.Cores)}, "memory": {strconv.Itoa(pl.machine.MemoryMB)},
		"agent": {"1"},
		"ide2":  {p.cfg.ISOStorage + ":iso/" + seedName(req.Name) + ",media=cdrom"},
	}
	if p.cfg.Bridge != "" {
		n := "virtio,bridge=" + p.cfg.Bridge
		if p.cfg.VLANTag > 0 {
			n += ",tag=" + strconv.Itoa(p.cfg.VLANTag)
		}
		params.Set("net0", n)
	}
	if err := p.api.do(ctx, http.MethodPut, vmPath(node, vmid)+"/config", params, nil); err != nil {
		return err
	}
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
