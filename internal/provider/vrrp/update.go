package vrrp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// A member's peers are told in place through its guest agent (libvirt's
// qemu-ga commands, PVE's agent API): the read, the comparison, the
// command, the wait for it and what its exit means are decided here once;
// a provider says how its agent is reached and what the member is.

// Agent is one member's guest agent as its provider reaches it. Errors
// come classified by the provider (a domain gone is NotFound, an agent
// not answering Transient).
type Agent interface {
	// ReadFile is path's content, at most limit bytes of it where the
	// agent reads in pieces; "" for a missing file.
	ReadFile(ctx context.Context, path string, limit int) (string, error)
	// Exec starts argv (its path first) with stdin on its standard
	// input, and returns its pid.
	Exec(ctx context.Context, argv []string, stdin string) (pid int64, err error)
	// ExecStatus says whether pid has exited, and how.
	ExecStatus(ctx context.Context, pid int64) (ExecStatus, error)
}

// ExecStatus is what an agent says of a command it started.
type ExecStatus struct {
	Exited bool
	// ExitCode when it exited, Signal when one killed it.
	ExitCode, Signal *int
	// Stderr is its standard error, decoded.
	Stderr string
}

// stderrLines is how much of a failed command's standard error its error
// carries: the first lines say why; the rest is for the guest's journal.
const stderrLines = 2

// WritePeers makes the member's PeersPath hold exactly content (Peers'
// rendering) and its keepalived run with it: one read when it does;
// otherwise ApplyPeers through the agent, polled every poll until it
// exits, within ctx and provider.CallBound. member names the member in
// errors ("domain x", "VM 160"). A command that exits non-zero, is killed
// or does not exit in time is Transient (the next pass reads the file
// again), naming its exit and the first lines of its standard error; the
// agent's own errors keep their class. The call's boundary line notes
// outcome "unchanged" or "updated"; the content is never logged above
// V(2).
func WritePeers(ctx context.Context, a Agent, member, content string, poll time.Duration) error {
	// One byte more than content: a longer file reads as different.
	has, err := a.ReadFile(ctx, PeersPath, len(content)+1)
	if err != nil {
		return keepClass(err, "%s: reading %s", member, PeersPath)
	}
	if has == content {
		provider.Note(ctx, "outcome", "unchanged")
		return nil
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("group peers differ", "member", member, "has", has, "want", content)
	what := fmt.Sprintf("%s: writing %s", member, PeersPath)
	pid, err := a.Exec(ctx, ApplyPeers(), content)
	if err != nil {
		return keepClass(err, "%s", what)
	}
	what = fmt.Sprintf("%s (guest pid %d)", what, pid)
	ctx, cancel := context.WithTimeout(ctx, provider.CallBound)
	defer cancel()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		st, err := a.ExecStatus(ctx, pid)
		if err != nil {
			return keepClass(err, "%s: reading its status", what)
		}
		if st.Exited {
			if err := st.err(what); err != nil {
				return err
			}
			provider.Note(ctx, "outcome", "updated")
			return nil
		}
		select {
		case <-ctx.Done():
			return provider.Errorf(provider.ErrTransient, "%s has not exited: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// err is nil for a command that exited 0, else its Transient error,
// starting with what.
func (s ExecStatus) err(what string) error {
	var how string
	switch {
	case s.Signal != nil:
		how = fmt.Sprintf("was killed by signal %d", *s.Signal)
	case s.ExitCode != nil && *s.ExitCode != 0:
		how = fmt.Sprintf("exited %d", *s.ExitCode)
	default:
		return nil
	}
	if stderr := firstLines(s.Stderr, stderrLines); stderr != "" {
		how += ": " + stderr
	}
	return provider.Errorf(provider.ErrTransient, "%s %s", what, how)
}

// firstLines is the first n non-empty lines of out, joined by "; ",
// clipped to a length an error line carries.
func firstLines(out string, n int) string {
	var lines []string
	for l := range strings.SplitSeq(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && len(lines) < n {
			lines = append(lines, l)
		}
	}
	s := strings.Join(lines, "; ")
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

// keepClass says what failed before the agent's error, in an error of the
// same class (the boundary reads the outermost classified error).
func keepClass(err error, format string, args ...any) error {
	return provider.Errorf(provider.ClassOf(err), format+": %w", append(args, err)...)
}
