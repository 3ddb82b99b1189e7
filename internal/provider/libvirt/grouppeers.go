package libvirt

import (
	"context"
	"encoding/base64"
	"net/netip"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// Group peers (provider.GroupPeersUpdater): a member's keepalived reads
// its peers from vrrp.PeersPath, which the provider rewrites in place
// through the guest agent the serving signal already uses (vrrp.WritePeers
// decides what is read, run and waited for), so a group that gains or
// loses a member keeps its survivors. Every reconcile pass of a running
// member calls it: when the file holds the peers that is one read
// (guest-file-open, -read, -close) and nothing else.

var _ provider.GroupPeersUpdater = (*Provider)(nil)

// execPollInterval paces guest-exec-status: the agent does not say when a
// command ends, and ApplyPeers (a file moved, a reload asked) ends within
// tens of milliseconds.
const execPollInterval = 200 * time.Millisecond

// UpdateGroupPeers makes the member instance id's peers file hold exactly
// vrrp.Peers(self, peers), and its keepalived run with it. NotFound when
// the domain is gone or not this installation's; Transient while the
// domain is not running, its agent does not answer, or the command fails
// in the guest (the next pass tries again); Permanent for peers that
// cannot be rendered.
func (p *Provider) UpdateGroupPeers(ctx context.Context, id string, self netip.Addr, peers []netip.Addr) error {
	hostName, name, err := parseID(id)
	if err != nil {
		return err
	}
	want, err := vrrp.Peers(self, peers)
	if err != nil {
		return provider.Errorf(provider.ErrPermanent, "the group peers of instance %s: %w", id, err)
	}
	h, err := p.configuredHost(hostName, id)
	if err != nil {
		return err
	}
	ctx = logr.NewContext(ctx, logr.FromContextOrDiscard(ctx).WithValues("host", h.Name, "name", name))
	if p.steps.Running(name) {
		// No domain yet, or one still booting: not gone. Its seed holds the
		// peers of its CreateRequest; a later pass tells it of a change.
		return provider.Errorf(provider.ErrTransient, "instance %s is still being created", name)
	}
	b, err := p.table.get(ctx, h)
	if err != nil {
		return err
	}
	dom, err := b.DomainLookupByName(ctx, name)
	if err != nil {
		return err
	}
	if _, err := p.ourMarks(ctx, b, h, dom); err != nil {
		return err
	}
	return vrrp.WritePeers(ctx, domainAgent{b: b, dom: dom}, "domain "+name, want, execPollInterval)
}

// domainAgent is a domain's qemu-ga as vrrp.WritePeers reaches it.
type domainAgent struct {
	b   backend
	dom libvirt.Domain
}

func (a domainAgent) ReadFile(ctx context.Context, path string, limit int) (string, error) {
	s, err := readGuestFile(ctx, a.b, a.dom, path, limit)
	switch {
	case err != nil && guestFileMissing(err):
		return "", nil // a member made before peers files: written now
	case err != nil:
		return "", agentError(err, "guest-file-read")
	}
	return s, nil
}

func (a domainAgent) Exec(ctx context.Context, argv []string, stdin string) (int64, error) {
	var started struct {
		PID int64 `json:"pid"`
	}
	if err := agentCommand(ctx, a.b, a.dom, "guest-exec", map[string]any{
		"path": argv[0], "arg": argv[1:],
		"input-data":     base64.StdEncoding.EncodeToString([]byte(stdin)),
		"capture-output": true,
	}, &started); err != nil {
		return 0, agentError(err, "guest-exec")
	}
	return started.PID, nil
}

func (a domainAgent) ExecStatus(ctx context.Context, pid int64) (vrrp.ExecStatus, error) {
	// The outputs come base64; the exit as qemu-ga says it.
	var st struct {
		Exited   bool   `json:"exited"`
		ExitCode *int   `json:"exitcode"`
		Signal   *int   `json:"signal"`
		ErrData  string `json:"err-data"`
	}
	if err := agentCommand(ctx, a.b, a.dom, "guest-exec-status", map[string]any{"pid": pid}, &st); err != nil {
		return vrrp.ExecStatus{}, agentError(err, "guest-exec-status")
	}
	stderr, _ := base64.StdEncoding.DecodeString(st.ErrData)
	return vrrp.ExecStatus{Exited: st.Exited, ExitCode: st.ExitCode, Signal: st.Signal, Stderr: string(stderr)}, nil
}

// agentError adds what failed to an agent command's error, keeping its
// class: the seam classified it (an agent not connected or a domain not
// running is Transient, a domain gone NotFound); an answer that does not
// decode, unclassified, is Transient.
func agentError(err error, what string) error {
	return reclassify(err, provider.ClassOf(err), what)
}
