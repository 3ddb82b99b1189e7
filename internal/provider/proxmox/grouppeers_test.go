package proxmox

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

var (
	peersSelf = netip.MustParseAddr("192.0.2.10")
	peersTwo  = []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")}
)

func renderPeers(t *testing.T, self netip.Addr, peers []netip.Addr) string {
	t.Helper()
	s, err := vrrp.Peers(self, peers)
	must(t, err)
	return s
}

const peersVMID = 160

// peersMember is a running member VM of ours on the fake, reached
// through the method boundary (for the outcome notes).
type peersMember struct {
	e  *env
	u  provider.GroupPeersUpdater
	id string
}

func newPeersMember(t *testing.T) *peersMember {
	t.Helper()
	e := newEnv(t)
	e.p.window = 0 // every call reads /cluster/resources: the calls are compared
	id := plantRunning(t, e, peersVMID, "proxy-member-0", "71111111-2222-3333-4444-555555555555", true)
	return &peersMember{e: e, u: provider.WithBoundary("pve-test", Type, e.p).Peers, id: id}
}

// update calls UpdateGroupPeers and returns its error, the API calls it
// made ("GET agent/file-read") and the outcome its boundary line noted
// ("" when it failed). Nothing it logs at V(1) holds the file's content.
func (m *peersMember) update(ctx context.Context, t *testing.T, peers []netip.Addr) (calls []string, outcome string, err error) {
	t.Helper()
	m.e.fake.ClearRequests()
	var logs testenv.LogLines
	err = m.u.UpdateGroupPeers(logr.NewContext(ctx, logs.Logger(1)), m.id, peersSelf, peers)
	for _, r := range m.e.fake.Requests() {
		path := r.Path[strings.Index(r.Path, "/json/")+len("/json/"):]
		if i := strings.Index(path, "/agent/"); i >= 0 {
			path = path[i+1:]
		}
		calls = append(calls, r.Method+" "+path)
	}
	if done := logs.Find(`"msg"="update_group_peers done"`); len(done) == 1 {
		if o := regexp.MustCompile(`"outcome"="(\w+)"`).FindStringSubmatch(done[0]); o != nil {
			outcome = o[1]
		}
	}
	if strings.Contains(logs.String(), "unicast_") {
		t.Errorf("the peers file's content logged at V(1):\n%s", logs.String())
	}
	return calls, outcome, err
}

// file is the member's peers file, and whether it is there.
func (m *peersMember) file() (string, bool) {
	b, ok := m.e.fake.GuestFile(peersVMID, vrrp.PeersPath)
	return string(b), ok
}

var (
	callsRead  = []string{"GET cluster/resources", "GET agent/file-read"}
	callsExec  = []string{"POST agent/exec", "GET agent/exec-status"}
	callsWaits = []string{"POST agent/exec", "GET agent/exec-status", "GET agent/exec-status", "GET agent/exec-status"}
)

// The member's peers file ends up holding exactly vrrp.Peers, written
// through agent/exec only when it held something else; a second call
// with the same peers reads and writes nothing.
func TestUpdateGroupPeers(t *testing.T) {
	want := renderPeers(t, peersSelf, peersTwo)
	older := renderPeers(t, peersSelf, peersTwo[:1])
	for _, tc := range []struct {
		name    string
		file    *string // nil: no peers file
		polls   int     // exec-status reads the command runs for
		calls   []string
		outcome string
	}{
		{name: "the file holds the peers", file: &want, calls: callsRead, outcome: "unchanged"},
		{name: "the file holds other peers", file: &older, calls: slices.Concat(callsRead, callsExec), outcome: "updated"},
		{name: "the file holds the peers and more", file: new(want + "unicast_peer {\n    192.0.2.13\n}\n"),
			calls: slices.Concat(callsRead, callsExec), outcome: "updated"},
		{name: "no file yet (a member made before peers files)", calls: slices.Concat(callsRead, callsExec), outcome: "updated"},
		{name: "the command exits on the third read", file: &older, polls: 3,
			calls: slices.Concat(callsRead, callsWaits), outcome: "updated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newPeersMember(t)
			if tc.file != nil {
				m.e.fake.SetGuestFile(peersVMID, vrrp.PeersPath, []byte(*tc.file))
			}
			m.e.fake.SetExecPolls(tc.polls)
			calls, outcome, err := m.update(t.Context(), t, peersTwo)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(calls, tc.calls) || outcome != tc.outcome {
				t.Errorf("calls %q, outcome %q; want %q, %q", calls, outcome, tc.calls, tc.outcome)
			}
			if got, ok := m.file(); !ok || got != want {
				t.Errorf("peers file %q (there: %v), want %q", got, ok, want)
			}
			calls, outcome, err = m.update(t.Context(), t, peersTwo)
			if err != nil || !slices.Equal(calls, callsRead) || outcome != "unchanged" {
				t.Errorf("the same peers again: calls %q, outcome %q, %v; want %q, unchanged", calls, outcome, err, callsRead)
			}
		})
	}
}

// A group of one has no unicast block: its file says so, and going back
// to peers writes them again.
func TestUpdateGroupPeersToNoneAndBack(t *testing.T) {
	m := newPeersMember(t)
	for _, peers := range [][]netip.Addr{nil, peersTwo, nil} {
		if _, outcome, err := m.update(t.Context(), t, peers); err != nil || outcome != "updated" {
			t.Fatalf("peers %v: outcome %q, %v", peers, outcome, err)
		}
		if got, _ := m.file(); got != renderPeers(t, peersSelf, peers) {
			t.Fatalf("peers %v: file %q", peers, got)
		}
	}
}

// Failures, each with its class: a VM gone or not ours is NotFound (as
// Get says); peers that cannot be rendered are Permanent before any
// request; an agent or VM that does not answer, and a command that fails
// or does not end, are Transient, and the file keeps what it had.
func TestUpdateGroupPeersFails(t *testing.T) {
	older := renderPeers(t, peersSelf, peersTwo[:1])
	for _, tc := range []struct {
		name  string
		setup func(m *peersMember)
		peers []netip.Addr
		ctx   func(t *testing.T) context.Context
		class error
		msg   string   // in the error
		calls []string // the API calls made; nil: not compared
	}{
		{name: "the VM is gone", setup: func(m *peersMember) { m.id = formatID(170, "proxy-member-0") },
			class: provider.ErrNotFound, msg: "VM 170 not found", calls: callsRead[:1]},
		{name: "the VMID holds another VM", setup: func(m *peersMember) {
			plantRunning(t, m.e, 171, "someone-else", "81111111-2222-3333-4444-555555555555", true)
			m.id = formatID(171, "proxy-member-0")
		}, class: provider.ErrNotFound, msg: `VM 171 is now "someone-else"`, calls: callsRead[:1]},
		{name: "the VM is another installation's", setup: func(m *peersMember) {
			other := m.e.newProvider(t, "inst-b")
			must(t, m.e.fake.PutVM(fakepve.VM{VMID: 172, Node: "pve1", Running: true, Config: []fakepve.KV{
				{Key: "name", Value: "proxy-member-1"}, {Key: "agent", Value: "1"},
				{Key: "tags", Value: other.tags("71111111-2222-3333-4444-555555555555", time.Now(), true)}}}))
			m.id = formatID(172, "proxy-member-1")
		}, class: provider.ErrNotFound, msg: "VM 172 is not this installation's", calls: callsRead[:1]},
		{name: "a peer is the member itself", peers: []netip.Addr{peersSelf},
			class: provider.ErrPermanent, msg: "is the member's own address", calls: []string{}},
		{name: "a peer twice", peers: []netip.Addr{peersTwo[0], peersTwo[0]},
			class: provider.ErrPermanent, msg: "is listed twice", calls: []string{}},
		{name: "the agent does not run", setup: func(m *peersMember) {
			m.e.fake.SetAgent(peersVMID, fakepve.Agent{Mode: fakepve.AgentNotRunning})
		}, class: provider.ErrTransient, msg: "QEMU guest agent is not running", calls: callsRead},
		{name: "the VM does not run", setup: func(m *peersMember) { m.e.fake.SetVMRunning(peersVMID, "") },
			class: provider.ErrTransient, msg: "VM 160 is not running", calls: callsRead},
		{name: "the command fails in the guest", setup: func(m *peersMember) {
			m.e.fake.SetAgent(peersVMID, fakepve.Agent{Exec: &fakepve.ExecResult{ExitCode: 2,
				Stderr: "/bin/sh: 1: cannot create /etc/keepalived/egress-proxy-peers.conf.new: Directory nonexistent\nsecond line\n"}})
		}, class: provider.ErrTransient,
			msg:   "VM 160: writing " + vrrp.PeersPath + " (guest pid 1187) exited 2: /bin/sh: 1: cannot create /etc/keepalived/egress-proxy-peers.conf.new: Directory nonexistent",
			calls: slices.Concat(callsRead, callsExec)},
		{name: "the command is killed", setup: func(m *peersMember) {
			m.e.fake.SetAgent(peersVMID, fakepve.Agent{Exec: &fakepve.ExecResult{Signal: 9}})
		}, class: provider.ErrTransient, msg: "(guest pid 1187) was killed by signal 9", calls: slices.Concat(callsRead, callsExec)},
		{name: "the command does not end within the call", setup: func(m *peersMember) { m.e.fake.SetExecPolls(1 << 30) },
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
				t.Cleanup(cancel)
				return ctx
			}, class: provider.ErrTransient, msg: "context deadline exceeded"},
		{name: "the token may not exec", setup: func(m *peersMember) {
			m.e.fake.Revoke(fakepve.DefaultTokenID, "/vms/160", "VM.GuestAgent.Unrestricted")
		}, class: provider.ErrPermanent, msg: "Permission check failed (/vms/160, VM.GuestAgent.Unrestricted)",
			calls: slices.Concat(callsRead, callsExec[:1])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newPeersMember(t)
			m.e.fake.SetGuestFile(peersVMID, vrrp.PeersPath, []byte(older))
			if tc.setup != nil {
				tc.setup(m)
			}
			peers := peersTwo
			if tc.peers != nil {
				peers = tc.peers
			}
			ctx := t.Context()
			if tc.ctx != nil {
				ctx = tc.ctx(t)
			}
			calls, _, err := m.update(ctx, t, peers)
			if !errors.Is(err, tc.class) || provider.ClassOf(err) != tc.class || !strings.Contains(fmtErr(err), tc.msg) {
				t.Fatalf("err = %v (%s), want %s with %q", err, provider.ClassName(err), provider.ClassName(provider.Errorf(tc.class, "")), tc.msg)
			}
			if tc.calls != nil && !slices.Equal(calls, tc.calls) && !(len(calls) == 0 && len(tc.calls) == 0) {
				t.Errorf("calls %q, want %q", calls, tc.calls)
			}
			if got, ok := m.file(); ok && got != older {
				t.Errorf("peers file %q after a failure, want what it had", got)
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
