package libvirt

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
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
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// peersMember is one running member on a fake host, its agent up, behind
// the method boundary (for the outcome notes).
type peersMember struct {
	h    *fakeHost
	p    *Provider
	u    provider.GroupPeersUpdater
	name string
	id   string
}

func newPeersMember(t *testing.T) *peersMember {
	t.Helper()
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, newImageServer(t), h)
	name := "proxy-team-a-egress-0123456789"
	addDomain(t, p, name)
	giveAddress(h, name, "192.0.2.10")
	return &peersMember{h: h, p: p, u: provider.WithBoundary("vms", TypeKVM, p).Peers, name: name, id: formatID("h1", name)}
}

// domain runs fn on the member's fake domain, if there, under the
// host's lock.
func (m *peersMember) domain(fn func(d *fakeDomain)) {
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	if d, ok := m.h.domains[m.name]; ok {
		fn(d)
	}
}

// update calls UpdateGroupPeers and returns its error, the agent commands
// it made and the outcome its boundary line noted ("" when it failed).
// Nothing it logs at V(1) holds the file's content.
func (m *peersMember) update(ctx context.Context, t *testing.T, peers []netip.Addr) (agent []string, outcome string, err error) {
	t.Helper()
	m.domain(func(d *fakeDomain) { d.agentLog = nil })
	var logs testenv.LogLines
	lctx := logr.NewContext(ctx, logs.Logger(1))
	err = m.u.UpdateGroupPeers(lctx, m.id, peersSelf, peers)
	m.domain(func(d *fakeDomain) { agent = slices.Clone(d.agentLog) })
	if done := logs.Find(`"msg"="update_group_peers done"`); len(done) == 1 {
		if o := regexp.MustCompile(`"outcome"="(\w+)"`).FindStringSubmatch(done[0]); o != nil {
			outcome = o[1]
		}
	}
	if strings.Contains(logs.String(), "unicast_peer") || strings.Contains(logs.String(), "192.0.2.11") {
		t.Errorf("the peers file's content logged at V(1):\n%s", logs.String())
	}
	return agent, outcome, err
}

// file is the member's peers file, and whether it is there.
func (m *peersMember) file() (content string, ok bool) {
	m.domain(func(d *fakeDomain) { content, ok = d.guestFiles[vrrp.PeersPath] })
	return content, ok
}

var (
	agentRead   = []string{"guest-file-open", "guest-file-read", "guest-file-close"}
	agentExec   = []string{"guest-exec", "guest-exec-status"}
	agentWaited = []string{"guest-exec", "guest-exec-status", "guest-exec-status", "guest-exec-status"}
)

// TestUpdateGroupPeers: the member's peers file ends up holding exactly
// vrrp.Peers, written through guest-exec only when it held something
// else; a second call with the same peers reads and writes nothing.
func TestUpdateGroupPeers(t *testing.T) {
	want := renderPeers(t, peersSelf, peersTwo)
	older := renderPeers(t, peersSelf, peersTwo[:1])
	for _, tc := range []struct {
		name    string
		file    *string // nil: no peers file
		pending int     // guest-exec-status says "not exited" this often first
		agent   []string
		outcome string
	}{
		{name: "the file holds the peers", file: &want,
			agent: agentRead, outcome: "unchanged"},
		{name: "the file holds other peers", file: &older,
			agent: slices.Concat(agentRead, agentExec), outcome: "updated"},
		{name: "the file holds the peers and more", file: new(want + "unicast_peer {\n    192.0.2.13\n}\n"),
			agent: slices.Concat(agentRead, agentExec), outcome: "updated"},
		{name: "no file yet (a member made before peers files)",
			// The open fails: no read, no close.
			agent: slices.Concat(agentRead[:1], agentExec), outcome: "updated"},
		{name: "the command exits after two polls", file: &older, pending: 2,
			agent: slices.Concat(agentRead, agentWaited), outcome: "updated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newPeersMember(t)
			m.domain(func(d *fakeDomain) {
				d.guestFiles = defaultGuestFiles()
				if tc.file != nil {
					d.guestFiles[vrrp.PeersPath] = *tc.file
				}
				d.execPending = tc.pending
			})
			agent, outcome, err := m.update(context.Background(), t, peersTwo)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(agent, tc.agent) || outcome != tc.outcome {
				t.Errorf("agent commands %v, outcome %q; want %v, %q", agent, outcome, tc.agent, tc.outcome)
			}
			if got, _ := m.file(); got != want {
				t.Errorf("peers file %q, want %q", got, want)
			}
			// The reconciler's next pass: one read, nothing written.
			agent, outcome, err = m.update(context.Background(), t, peersTwo)
			if err != nil || !slices.Equal(agent, agentRead) || outcome != "unchanged" {
				t.Errorf("second call: %v, agent commands %v, outcome %q; want nil, %v, unchanged", err, agent, outcome, agentRead)
			}
			m.domain(func(d *fakeDomain) {
				if len(d.handles) != 0 || len(d.execs) != 0 {
					t.Errorf("%d file handles and %d guest-exec runs left behind", len(d.handles), len(d.execs))
				}
			})
		})
	}
}

// TestUpdateGroupPeersFails: what the caller is told, and with which
// class, when the peers cannot be rendered, the domain is not there or
// not ours, the agent does not answer, or the command fails in the guest.
func TestUpdateGroupPeersFails(t *testing.T) {
	older := renderPeers(t, peersSelf, peersTwo[:1])
	for _, tc := range []struct {
		name    string
		setup   func(m *peersMember)
		peers   []netip.Addr
		id      string // default: the member's
		timeout time.Duration
		class   error
		has     []string
		hasNot  []string
		agent   []string // nil: not checked; empty: none
		noRPC   bool     // nothing reaches the host
		// keepsFile: the command failed, the file is as it was.
		keepsFile bool
	}{
		{name: "peers that cannot be rendered", peers: []netip.Addr{peersSelf},
			class: provider.ErrPermanent, has: []string{"peers[0]: 192.0.2.10 is the member's own address"}, noRPC: true},
		{name: "a malformed ID", id: "domains/x",
			class: provider.ErrPermanent, has: []string{"malformed instance ID"}, noRPC: true},
		{name: "a host no longer configured", id: formatID("h9", "proxy-team-a-egress-0123456789"),
			class: provider.ErrPermanent, has: []string{`host "h9", which is no longer in this entry's hosts`}, noRPC: true},
		{name: "the domain is gone",
			setup: func(m *peersMember) { delete(m.h.domains, m.name) },
			class: provider.ErrNotFound, has: []string{"Domain not found"}},
		{name: "a domain that is not this installation's",
			setup: func(m *peersMember) { delete(m.h.domains[m.name].metadata, metadataURI) },
			class: provider.ErrNotFound, has: []string{"is not this installation's"}, agent: []string{}},
		{name: "the domain is shut off",
			setup: func(m *peersMember) { m.h.domains[m.name].state = libvirt.DomainShutoff },
			class: provider.ErrTransient, has: []string{"reading " + vrrp.PeersPath, "domain is not running"}, agent: []string{}},
		{name: "the agent does not answer",
			setup: func(m *peersMember) {
				d := m.h.domains[m.name]
				d.guestFiles, d.ifaces[libvirt.DomainInterfaceAddressesSrcAgent] = nil, nil
			},
			class: provider.ErrTransient, has: []string{"reading " + vrrp.PeersPath, "agent is not connected"}, agent: []string{}},
		{name: "the command exits 1",
			setup: func(m *peersMember) {
				d := m.h.domains[m.name]
				d.guestFiles[vrrp.PeersPath] = older
				d.execFail = &fakeExec{exitCode: 1, stdout: "out\n",
					stderr: "mv: cannot move '/etc/keepalived/egress-proxy-peers.conf.new': Read-only file system\n\nsecond line\nthird line\n"}
			},
			class:  provider.ErrTransient,
			has:    []string{"writing " + vrrp.PeersPath, "exited 1: mv: cannot move '/etc/keepalived/egress-proxy-peers.conf.new': Read-only file system; second line"},
			hasNot: []string{"third line", "out", "unicast"},
			agent:  slices.Concat(agentRead, agentExec), keepsFile: true},
		{name: "the command is killed",
			setup: func(m *peersMember) {
				d := m.h.domains[m.name]
				d.guestFiles[vrrp.PeersPath] = older
				d.execFail = &fakeExec{signal: 9}
			},
			class: provider.ErrTransient, has: []string{"killed by signal 9"}, agent: slices.Concat(agentRead, agentExec), keepsFile: true},
		{name: "the command does not exit before the caller's ctx ends",
			setup: func(m *peersMember) {
				d := m.h.domains[m.name]
				d.guestFiles[vrrp.PeersPath] = older
				d.execHang = true
			},
			timeout: 500 * time.Millisecond,
			class:   provider.ErrTransient, has: []string{"writing " + vrrp.PeersPath, "has not exited", "context deadline exceeded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newPeersMember(t)
			m.domain(func(d *fakeDomain) { d.guestFiles = defaultGuestFiles() })
			if tc.setup != nil {
				m.h.mu.Lock()
				tc.setup(m)
				m.h.mu.Unlock()
			}
			if tc.id != "" {
				m.id = tc.id
			}
			peers := tc.peers
			if peers == nil {
				peers = peersTwo
			}
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			rpcs := len(m.h.callLog())
			agent, _, err := m.update(ctx, t, peers)
			if err == nil {
				t.Fatal("UpdateGroupPeers succeeded")
			}
			if got := provider.ClassOf(err); got != tc.class {
				t.Errorf("class %v, want %v: %v", got, tc.class, err)
			}
			for _, s := range tc.has {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q says %q", err, s)
				}
			}
			if tc.agent != nil && !slices.Equal(agent, tc.agent) {
				t.Errorf("agent commands %v, want %v", agent, tc.agent)
			}
			if n := len(m.h.callLog()); tc.noRPC && n != rpcs {
				t.Errorf("%d RPCs for a call that cannot succeed: %v", n-rpcs, m.h.callLog()[rpcs:])
			}
			if tc.keepsFile {
				if got, _ := m.file(); got != older {
					t.Errorf("peers file after a failed command %q, want it as it was", got)
				}
			}
		})
	}
}

// TestUpdateGroupPeersWhileCreating: a member whose create step runs is
// not gone, and is told nothing until its domain runs.
func TestUpdateGroupPeersWhileCreating(t *testing.T) {
	srv := newImageServer(t)
	srv.gate = make(chan struct{})
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	name := "proxy-team-a-egress-0123456789"
	if _, err := p.Create(context.Background(), testRequest(name)); err != nil {
		t.Fatal(err)
	}
	err := p.UpdateGroupPeers(context.Background(), formatID("h1", name), peersSelf, peersTwo)
	if !errors.Is(err, provider.ErrTransient) || errors.Is(err, provider.ErrNotFound) {
		t.Errorf("UpdateGroupPeers while the create step runs: %v, want Transient", err)
	}
	close(srv.gate)
	waitSteps(t, p)
}
