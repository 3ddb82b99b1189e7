package proxmox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// Get reads the VM: the shared /cluster/resources read, plus for a running
// VM the agent's interfaces and, once it has an address, the guest's
// serving report (3 requests in steady state, fewer while concurrent Gets
// share the resources read).
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
	r, err := p.entry(ctx, vmid)
	if err != nil {
		return provider.Instance{}, err
	}
	id := formatID(vmid, name)
	if r.Lock != "" && r.Lock != "suspended" {
		// Mid-clone entries are nameless; an unfinished create that no
		// step advances reads Stopped, so Create resumes it.
		return provider.Instance{ID: id, UID: p.marksFromTags(r.Tags).UID, State: provider.StateStopped, Progress: "VM locked (" + r.Lock + "); Create resumes it"}, nil
	}
	m, err := p.judge(r, name)
	if err != nil {
		return provider.Instance{}, err
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
	reporter := hasTag(r.Tags, tagReporter)
	err = p.api.do(ctx, http.MethodGet, vmPath(r.Node, vmid)+"/agent/network-get-interfaces", nil, &ag)
	if err != nil {
		if strings.Contains(err.Error(), agentNotRunning) {
			in.State, in.Progress = provider.StateProvisioning, "waiting for the guest agent"
			if reporter {
				servingreport.Unread(agentNotAnswering).Apply(&in)
			}
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
				if reporter {
					if err := p.readReport(ctx, r.Node, vmid, &in); err != nil {
						return provider.Instance{}, err
					}
				}
				return in, nil
			}
		}
	}
	in.State, in.Progress = provider.StateProvisioning, "waiting for an IPv4 address"
	return in, nil
}

// entry is VM vmid's /cluster/resources entry (the shared read):
// NotFound when the cluster has no such VMID.
func (p *Provider) entry(ctx context.Context, vmid int) (resource, error) {
	rs, err := p.resources(ctx, false)
	if err != nil {
		return resource{}, err
	}
	r, ok := find(rs, vmid)
	if !ok {
		return resource{}, provider.Errorf(provider.ErrNotFound, "VM %d not found", vmid)
	}
	return r, nil
}

// judge says whether entry r, not locked, is name's VM of this
// installation: NotFound for another name or another installation's mark;
// marks not Managed while the VM carries none yet (a create interrupted
// before its first config), which only its description settles.
func (p *Provider) judge(r resource, name string) (provider.Marks, error) {
	if r.Name != name {
		return provider.Marks{}, provider.Errorf(provider.ErrNotFound, "VM %d is now %q", r.VMID, r.Name)
	}
	m := p.marksFromTags(r.Tags)
	if m.Managed && m.Installation != p.opts.InstallationID {
		return provider.Marks{}, provider.Errorf(provider.ErrNotFound, "VM %d is not this installation's", r.VMID)
	}
	return m, nil
}

// PVE's and qemu-ga's texts Get reads (fakepve's fixtures
// agent-*-not-running.json, agent-file-read-missing.json).
const (
	agentNotRunning = "QEMU guest agent is not running"
	// qemu-ga's guest-file-open of a missing file, as PVE wraps it:
	// "Agent error: failed to open file '<path>' (mode: 'r'): No such
	// file or directory".
	fileOpenFailed = "Agent error: failed to open file"
	noSuchFile     = "No such file or directory"
)

// Serving details of a report that could not be read.
const (
	agentNotAnswering = "the guest agent does not answer yet"
	notReportedYet    = "the guest has not reported yet: cloud-init starts its reporter"
)

// maxUnreadDetail bounds what a malformed report puts into the detail (a
// parse error quotes the guest's text).
const maxUnreadDetail = 200

// readReport reads the guest's serving report through the agent (one
// request) and sets in's serving fields. A guest that cannot say yet (its
// agent down, no report, a report that does not parse) is not answering;
// any other failure is Get's error, with PVE's class (a Transient one
// keeps a serving Proxy as it was).
func (p *Provider) readReport(ctx context.Context, node string, vmid int, in *provider.Instance) error {
	f, err := p.readGuestFile(ctx, node, vmid, servingreport.ReportPath)
	switch {
	case err != nil && strings.Contains(err.Error(), agentNotRunning):
		servingreport.Unread(agentNotAnswering).Apply(in)
		return nil
	case err != nil:
		return provider.Errorf(provider.ErrTransient, "serving report of VM %d (agent/file-read %s): %w", vmid, servingreport.ReportPath, err)
	case !f.Found:
		servingreport.Unread(notReportedYet).Apply(in)
		return nil
	case f.Truncated:
		// PVE stops at 16 MiB; the reporter writes a few hundred bytes.
		servingreport.Unread(fmt.Sprintf("the guest's report at %s is over %d bytes: not the reporter's", servingreport.ReportPath, len(f.Content))).Apply(in)
		return nil
	}
	rep, err := servingreport.Parse(f.Content)
	if err != nil {
		servingreport.Unread(clip("the guest's report does not parse: "+err.Error(), maxUnreadDetail)).Apply(in)
		return nil
	}
	rep.Signal(time.Now()).Apply(in)
	return nil
}

// guestFile is a file of a guest as agent/file-read read it.
type guestFile struct {
	Content string
	// Found is false for a file that does not exist (Content "").
	Found bool
	// Truncated: PVE stopped reading at 16 MiB.
	Truncated bool
}

// readGuestFile reads path on VM vmid's guest through its agent
// (agent/file-read, one request). A file that does not exist is not an
// error but Found false: qemu-ga's open fails with "No such file or
// directory". Every other failure is PVE's, as classifyAPI classed it.
func (p *Provider) readGuestFile(ctx context.Context, node string, vmid int, path string) (guestFile, error) {
	var fr struct {
		Content   string          `json:"content"`
		Truncated json.RawMessage `json:"truncated"`
	}
	err := p.api.do(ctx, http.MethodGet, vmPath(node, vmid)+"/agent/file-read", url.Values{"file": {path}}, &fr)
	switch {
	case err != nil && strings.Contains(err.Error(), fileOpenFailed) && strings.Contains(err.Error(), noSuchFile):
		return guestFile{}, nil
	case err != nil:
		return guestFile{}, err
	}
	return guestFile{Content: fr.Content, Found: true, Truncated: jsonTrue(fr.Truncated)}, nil
}

// jsonTrue reads a flag PVE sends as 1 (Perl's conversion of a JSON
// boolean) or as true.
func jsonTrue(v json.RawMessage) bool {
	t := string(v)
	return t != "" && t != "0" && t != "false" && t != "null"
}

// clip cuts s to n bytes at most, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
