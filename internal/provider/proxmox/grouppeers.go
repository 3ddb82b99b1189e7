package proxmox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// Group peers (provider.GroupPeersUpdater): a member's keepalived reads
// its peers from vrrp.PeersPath, which the provider rewrites in place
// through PVE's guest-agent API, so a group that gains or loses a member
// keeps its survivors. Every reconcile pass of a running member calls it:
// when the file holds the peers that is one agent/file-read (after the
// /cluster/resources read Get shares); otherwise vrrp.ApplyPeers runs
// through agent/exec with the new content as its input-data, and the call
// polls agent/exec-status until it exits. The token needs
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
	f, err := p.readGuestFile(ctx, r.Node, vmid, vrrp.PeersPath)
	if err != nil {
		return err
	}
	// A missing file (a member made before peers files) reads as "",
	// which no rendering is: it is written now.
	if f.Content == want {
		provider.Note(ctx, "outcome", "unchanged")
		return nil
	}
	if err := p.guestExec(ctx, r.Node, vmid, "rewriting "+vrrp.PeersPath, vrrp.ApplyPeers(), want); err != nil {
		return err
	}
	provider.Note(ctx, "outcome", "updated")
	return nil
}

// execStatus is agent/exec-status' answer: PVE turns qemu-ga's booleans
// into 0 and 1 (read either way) and decodes the outputs.
type execStatus struct {
	Exited   json.RawMessage `json:"exited"`
	ExitCode *int            `json:"exitcode"`
	Signal   *int            `json:"signal"`
	ErrData  string          `json:"err-data"`
}

// guestExec runs argv in VM vmid's guest through its agent with stdin as
// input-data, and waits for it to exit: agent/exec, then agent/exec-status
// at once and every execPoll until the command has exited, within ctx and
// provider.CallBound. A command that exits non-zero or is killed is
// Transient, naming its exit code (or signal) and the first line of its
// stderr; what says what the command does, for the error.
func (p *Provider) guestExec(ctx context.Context, node string, vmid int, what string, argv []string, stdin string) error {
	var started struct {
		PID int `json:"pid"`
	}
	// The command as repeated form values: an array on PVE 8 and 9 (a
	// "\0"-joined list, which exec splits, on 7).
	form := url.Values{"command": argv, "input-data": {stdin}}
	if err := p.api.do(ctx, http.MethodPost, vmPath(node, vmid)+"/agent/exec", form, &started); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, provider.CallBound)
	defer cancel()
	tick := time.NewTicker(p.execPoll)
	defer tick.Stop()
	status := url.Values{"pid": {strconv.Itoa(started.PID)}}
	for {
		var st execStatus
		if err := p.api.do(ctx, http.MethodGet, vmPath(node, vmid)+"/agent/exec-status", status, &st); err != nil {
			return err
		}
		if jsonTrue(st.Exited) {
			return st.err(fmt.Sprintf("VM %d: %s (guest pid %d)", vmid, what, started.PID))
		}
		select {
		case <-ctx.Done():
			return provider.Errorf(provider.ErrTransient, "VM %d: %s (guest pid %d) has not exited: %w", vmid, what, started.PID, ctx.Err())
		case <-tick.C:
		}
	}
}

// err is nil for a command that exited 0, else its Transient error,
// starting with what.
func (s execStatus) err(what string) error {
	var how string
	switch {
	case s.Signal != nil:
		how = fmt.Sprintf("was killed by signal %d", *s.Signal)
	case s.ExitCode != nil && *s.ExitCode != 0:
		how = fmt.Sprintf("exited %d", *s.ExitCode)
	default:
		return nil
	}
	if line, _, _ := strings.Cut(strings.TrimSpace(s.ErrData), "\n"); line != "" {
		how += ": " + clip(line, maxUnreadDetail)
	}
	return provider.Errorf(provider.ErrTransient, "%s %s", what, how)
}

// clip cuts s to n bytes at most, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
