package vrrp

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// scriptedAgent answers WritePeers as its test says, and records the
// calls it got.
type scriptedAgent struct {
	file      string
	readErr   error
	execErr   error
	statusErr error
	// running is how many status reads say "not exited" first.
	running int
	exit    ExecStatus
	calls   []string
	stdin   string
	limit   int
}

func (a *scriptedAgent) ReadFile(_ context.Context, path string, limit int) (string, error) {
	a.calls = append(a.calls, "read "+path)
	a.limit = limit
	return a.file, a.readErr
}

func (a *scriptedAgent) Exec(_ context.Context, argv []string, stdin string) (int64, error) {
	a.calls = append(a.calls, "exec "+argv[0])
	a.stdin = stdin
	return 42, a.execErr
}

func (a *scriptedAgent) ExecStatus(context.Context, int64) (ExecStatus, error) {
	a.calls = append(a.calls, "status")
	if a.statusErr != nil {
		return ExecStatus{}, a.statusErr
	}
	if a.running > 0 {
		a.running--
		return ExecStatus{}, nil
	}
	st := a.exit
	st.Exited = true
	return st, nil
}

func TestWritePeers(t *testing.T) {
	const want = "unicast_src_ip 192.0.2.10\nunicast_peer {\n    192.0.2.11\n}\n"
	one, nine := 1, 9
	read, exec := "read "+PeersPath, "exec /bin/sh"
	for _, tc := range []struct {
		name    string
		agent   scriptedAgent
		timeout time.Duration
		calls   []string
		class   error // nil: no error
		msg     []string
		not     []string
	}{
		{name: "the file holds the peers", agent: scriptedAgent{file: want},
			calls: []string{read}},
		{name: "the file holds other peers", agent: scriptedAgent{file: "unicast_src_ip 192.0.2.10\n"},
			calls: []string{read, exec, "status"}},
		{name: "the file is missing", agent: scriptedAgent{},
			calls: []string{read, exec, "status"}},
		{name: "the file holds the peers and more", agent: scriptedAgent{file: want + "#"},
			calls: []string{read, exec, "status"}},
		{name: "the command exits on the third status read", agent: scriptedAgent{running: 2},
			calls: []string{read, exec, "status", "status", "status"}},
		{name: "the command exits 1", agent: scriptedAgent{exit: ExecStatus{ExitCode: &one,
			Stderr: "mv: cannot move: Read-only file system\n\nsecond line\nthird line\n"}},
			calls: []string{read, exec, "status"}, class: provider.ErrTransient,
			msg: []string{"domain d: writing " + PeersPath + " (guest pid 42) exited 1: mv: cannot move: Read-only file system; second line"},
			not: []string{"third line", "unicast"}},
		{name: "the command is killed", agent: scriptedAgent{exit: ExecStatus{Signal: &nine}},
			calls: []string{read, exec, "status"}, class: provider.ErrTransient,
			msg: []string{"(guest pid 42) was killed by signal 9"}},
		{name: "the command does not exit before the caller's ctx ends", agent: scriptedAgent{running: 1 << 30},
			timeout: 50 * time.Millisecond, class: provider.ErrTransient,
			msg: []string{"(guest pid 42) has not exited", "context deadline exceeded"}},
		{name: "the member is gone", agent: scriptedAgent{readErr: provider.Errorf(provider.ErrNotFound, "Domain not found")},
			calls: []string{read}, class: provider.ErrNotFound,
			msg: []string{"domain d: reading " + PeersPath + ": Domain not found"}},
		{name: "the agent may not exec", agent: scriptedAgent{execErr: provider.Errorf(provider.ErrPermanent, "Permission check failed")},
			calls: []string{read, exec}, class: provider.ErrPermanent,
			msg: []string{"domain d: writing " + PeersPath + ": Permission check failed"}},
		{name: "the status read fails", agent: scriptedAgent{statusErr: errors.New("connection reset")},
			calls: []string{read, exec, "status"}, class: provider.ErrTransient,
			msg: []string{"(guest pid 42): reading its status: connection reset"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			a := tc.agent
			err := WritePeers(ctx, &a, "domain d", want, time.Millisecond)
			if tc.class == nil && err != nil || tc.class != nil && (err == nil || provider.ClassOf(err) != tc.class) {
				t.Fatalf("err %v (%s), want class %v", err, provider.ClassName(err), tc.class)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
			for _, m := range tc.not {
				if strings.Contains(err.Error(), m) {
					t.Errorf("error %q says %q", err, m)
				}
			}
			if tc.calls != nil && !slices.Equal(a.calls, tc.calls) {
				t.Errorf("calls %v, want %v", a.calls, tc.calls)
			}
			if a.limit != len(want)+1 {
				t.Errorf("read at most %d bytes, want %d (one more than the peers: a longer file differs)", a.limit, len(want)+1)
			}
			if slices.Contains(a.calls, exec) && a.stdin != want {
				t.Errorf("the command's input %q, want the peers", a.stdin)
			}
		})
	}
}
