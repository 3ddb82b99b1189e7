package libvirt

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// Group peers (provider.GroupPeersUpdater): a member's keepalived reads
// its peers from vrrp.PeersPath, which the provider rewrites in place
// through the guest agent the serving signal already uses, so a group
// that gains or loses a member keeps its survivors. Every reconcile pass
// of a running member calls it: when the file holds the peers that is
// one read (guest-file-open, -read, -close) and nothing else; otherwise
// vrrp.ApplyPeers runs through guest-exec with the new content on its
// standard input, and the call waits for it to exit.

var _ provider.GroupPeersUpdater = (*Provider)(nil)

const (
	// execPollInterval paces guest-exec-status: the agent does not say
	// when a command ends, and ApplyPeers (a file moved, a reload asked)
	// ends within tens of milliseconds.
	execPollInterval = 200 * time.Millisecond
	// execBound ends the wait for a command that does not exit (a reload
	// that hangs): the call stays within the contract's bound, and the
	// next pass reads what the guest has by then.
	execBound = provider.CallBound
	// stderrLines is how much of a failed command's stderr its error
	// carries: the first lines say why; the rest is for the guest's
	// journal.
	stderrLines = 2
)

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
	log := logr.FromContextOrDiscard(ctx).WithValues("host", h.Name, "name", name)
	ctx = logr.NewContext(ctx, log)
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
	// One byte more than want: a longer file reads as different.
	has, err := readGuestFile(ctx, b, dom, vrrp.PeersPath, len(want)+1)
	switch {
	case err != nil && guestFileMissing(err):
		has = "" // a member made before peers files: written now
	case err != nil:
		return agentError(err, "reading "+vrrp.PeersPath+" on domain "+name)
	}
	if has == want {
		provider.Note(ctx, "outcome", "unchanged")
		return nil
	}
	log.V(2).Info("libvirt group peers differ", "has", has, "want", want)
	if err := guestExec(ctx, b, dom, "writing "+vrrp.PeersPath+" on domain "+name, vrrp.ApplyPeers(), want); err != nil {
		return err
	}
	provider.Note(ctx, "outcome", "updated")
	return nil
}

// guestExec runs argv (its path first) in the guest through the agent
// with stdin on its standard input, and waits for it to exit, polling
// guest-exec-status within execBound. A non-zero exit or a signal is
// Transient, naming it and the first lines of stderr; what says what the
// command does, for the error.
func guestExec(ctx context.Context, b backend, dom libvirt.Domain, what string, argv []string, stdin string) error {
	var started struct {
		PID int64 `json:"pid"`
	}
	if err := agentCommand(ctx, b, dom, "guest-exec", map[string]any{
		"path": argv[0], "arg": argv[1:],
		"input-data":     base64.StdEncoding.EncodeToString([]byte(stdin)),
		"capture-output": true,
	}, &started); err != nil {
		return agentError(err, what+": guest-exec")
	}
	ctx, cancel := context.WithTimeout(ctx, execBound)
	defer cancel()
	tick := time.NewTicker(execPollInterval)
	defer tick.Stop()
	for {
		var st execStatus
		if err := agentCommand(ctx, b, dom, "guest-exec-status", map[string]any{"pid": started.PID}, &st); err != nil {
			return agentError(err, fmt.Sprintf("%s: guest-exec-status of pid %d", what, started.PID))
		}
		if st.Exited {
			return st.err(what)
		}
		select {
		case <-ctx.Done():
			return provider.Errorf(provider.ErrTransient, "%s: pid %d has not exited: %w", what, started.PID, ctx.Err())
		case <-tick.C:
		}
	}
}

// execStatus is guest-exec-status's answer: exitcode when the command
// exited, signal when one killed it; the outputs base64.
type execStatus struct {
	Exited   bool   `json:"exited"`
	ExitCode *int   `json:"exitcode"`
	Signal   *int   `json:"signal"`
	ErrData  string `json:"err-data"`
}

// err is nil for a command that exited 0, else its Transient error.
func (s execStatus) err(what string) error {
	how := ""
	switch {
	case s.Signal != nil:
		how = fmt.Sprintf("killed by signal %d", *s.Signal)
	case s.ExitCode != nil && *s.ExitCode != 0:
		how = fmt.Sprintf("exited %d", *s.ExitCode)
	default:
		return nil
	}
	if stderr := firstLines(s.ErrData, stderrLines); stderr != "" {
		how += ": " + stderr
	}
	return provider.Errorf(provider.ErrTransient, "%s: the command %s", what, how)
}

// firstLines is the first n non-empty lines of base64 output, joined by
// "; ", clipped to a length an error line carries.
func firstLines(b64 string, n int) string {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && len(lines) < n {
			lines = append(lines, l)
		}
	}
	out := strings.Join(lines, "; ")
	if len(out) > 300 {
		out = strings.ToValidUTF8(out[:300], "") + "…"
	}
	return out
}

// agentError adds what failed to an agent command's error, keeping its
// class: the seam classified it (an agent not connected or a domain not
// running is Transient, a domain gone NotFound); an answer that does not
// decode, unclassified, is Transient.
func agentError(err error, what string) error {
	return reclassify(err, provider.ClassOf(err), what)
}
