package proxmox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// Group peers (provider.GroupPeersUpdater): a member's keepalived reads
// its peers from vrrp.PeersPath, which the provider rewrites in place
// through PVE's guest-agent API (vrrp.WritePeers decides what is read, run
// and waited for), so a group that gains or loses a member keeps its
// survivors. Every reconcile pass of a running member calls it: when the
// file holds the peers that is one agent/file-read (after the
// /cluster/resources read Get shares); otherwise agent/exec and
// agent/exec-status until the command exits. The token needs
// VM.GuestAgent.Unrestricted (PVE 9; VM.Monitor on 8) for the two exec
// calls: only group members ever make them.

var _ provider.GroupPeersUpdater = (*Provider)(nil)

// defaultExecPoll paces agent/exec-status: PVE does not say when a guest
// command ends, and ApplyPeers (a file moved, a reload asked) ends within
// tens of milliseconds.
const defaultExecPoll = 200 * time.Millisecond

// UpdateGroupPeers makes the member VM id's peers file hold exactly
// vrrp.Peers(self, peers), and its keepalived run with it. NotFound when
// the VM is gone or not this installation's (as Get says); Transient
// while it is being created, does not run, its agent does not answer, or
// the command fails in the guest (the next pass tries again); Permanent
// for peers that cannot be rendered.
func (p *Provider) UpdateGroupPeers(ctx context.Context, id string, self netip.Addr, peers []netip.Addr) error {
	ctx = httpobserve.WithOp(ctx, provider.OpUpdateGroupPeers)
	vmid, name, err := parseID(id)
	if err != nil {
		return err
	}
	want, err := vrrp.Peers(self, peers)
	if err != nil {
		return provider.Errorf(provider.ErrPermanent, "the group peers of VM %d: %w", vmid, err)
	}
	if p.steps.Running(name) {
		// Its seed holds the peers of its CreateRequest; a later pass
		// tells it of a change once it runs.
		return provider.Errorf(provider.ErrTransient, "VM %d is still being created", vmid)
	}
	r, err := p.entry(ctx, vmid)
	if err != nil {
		return err
	}
	if r.Lock != "" && r.Name != name {
		// A nameless entry mid-clone or mid-destroy: Get reads it as
		// Stopped, not gone.
		return provider.Errorf(provider.ErrTransient, "VM %d is locked (%s)", vmid, r.Lock)
	}
	m, err := p.judge(r, name)
	if err != nil {
		return err
	}
	if !m.Managed {
		return provider.Errorf(provider.ErrTransient, "VM %d carries no mark yet: its create is unfinished", vmid)
	}
	return vrrp.WritePeers(ctx, vmAgent{p: p, node: r.Node, vmid: vmid}, fmt.Sprintf("VM %d", vmid), want, p.execPoll)
}

// vmAgent is a VM's guest agent through PVE's API, as vrrp.WritePeers
// reaches it.
type vmAgent struct {
	p    *Provider
	node string
	vmid int
}

// ReadFile reads the whole file: agent/file-read takes no length.
func (a vmAgent) ReadFile(ctx context.Context, path string, _ int) (string, error) {
	// A missing file reads as "".
	f, err := a.p.readGuestFile(ctx, a.node, a.vmid, path)
	return f.Content, err
}

func (a vmAgent) Exec(ctx context.Context, argv []string, stdin string) (int64, error) {
	var started struct {
		PID int64 `json:"pid"`
	}
	// The command as repeated form values: an array on PVE 8 and 9 (a
	// "\0"-joined list, which exec splits, on 7).
	form := url.Values{"command": argv, "input-data": {stdin}}
	err := a.p.api.do(ctx, http.MethodPost, vmPath(a.node, a.vmid)+"/agent/exec", form, &started)
	return started.PID, err
}

func (a vmAgent) ExecStatus(ctx context.Context, pid int64) (vrrp.ExecStatus, error) {
	// PVE turns qemu-ga's booleans into 0 and 1 (read either way) and
	// decodes the outputs.
	var st struct {
		Exited   json.RawMessage `json:"exited"`
		ExitCode *int            `json:"exitcode"`
		Signal   *int            `json:"signal"`
		ErrData  string          `json:"err-data"`
	}
	status := url.Values{"pid": {strconv.FormatInt(pid, 10)}}
	if err := a.p.api.do(ctx, http.MethodGet, vmPath(a.node, a.vmid)+"/agent/exec-status", status, &st); err != nil {
		return vrrp.ExecStatus{}, err
	}
	return vrrp.ExecStatus{Exited: jsonTrue(st.Exited), ExitCode: st.ExitCode, Signal: st.Signal, Stderr: st.ErrData}, nil
}
