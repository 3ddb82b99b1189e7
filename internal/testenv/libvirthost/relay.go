package libvirthost

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"
)

// Relay is a libvirt RPC relay on a unix socket of its own, in front of the
// test host's libvirtd socket. A provider whose host names Relay.Path as
// its socket reaches the real libvirtd through it (sshd opens the relay's
// socket for the direct-streamlocal channel, as it would libvirtd's), and
// the test can make that real wire misbehave: a call answered with a
// libvirt error instead of being forwarded, or a call held before it
// reaches libvirtd until the test releases it. The provider under test is
// not touched: what it meets is what a libvirtd that refused the call, or
// that has not got to it yet, sends.
//
// The relay reads libvirt's framing (a 4-byte length, a 24-byte header:
// program, version, procedure, type, serial, status; then the XDR payload)
// in both directions, so an injected answer never splits another packet.
// Only calls (type 0) of the remote program are matched; replies, events
// and stream data pass untouched.
type Relay struct {
	// Path is the relay's socket: configure it as the host's socket.
	Path string

	upstream string
	ln       net.Listener

	mu     sync.Mutex
	rules  []*rule
	conns  map[*relayConn]struct{}
	calls  map[uint32]int
	closed bool
}

// The remote program's procedures the tests match on (libvirt's
// remote_protocol.x numbers; go-libvirt keeps its constants internal).
const (
	ProcConnectOpen           = 1
	ProcDomainCreate          = 9
	ProcDomainDefineXML       = 11
	ProcDomainLookupByName    = 23
	ProcAuthList              = 66
	ProcStorageVolCreateXML   = 93
	ProcStorageVolUpload      = 208
	ProcDomainGetMetadata     = 265
	ProcConnectListAllDomains = 273
)

const (
	remoteProgram = 0x20008086
	pktHeaderLen  = 28 // the length word and the header
	typeCall      = 0
	typeReply     = 1
	statusError   = 1
	// maxPacket is above libvirt's own limit (VIR_NET_MESSAGE_MAX, 32 MiB).
	maxPacket = 64 << 20
)

// Call is one call as the relay sees it.
type Call struct {
	Procedure uint32
	// Payload is the call's XDR arguments. Strings are there verbatim
	// (length-prefixed), so a domain or volume name can be found in it.
	Payload []byte
}

// Mentions says whether the call's arguments hold s (a domain name, a
// volume name, which holds its instance's name).
func (c Call) Mentions(s string) bool { return bytes.Contains(c.Payload, []byte(s)) }

// Match picks the calls a rule applies to.
type Match func(Call) bool

// Procedures matches calls of any of procs.
func Procedures(procs ...uint32) Match {
	return func(c Call) bool {
		for _, p := range procs {
			if c.Procedure == p {
				return true
			}
		}
		return false
	}
}

// ProceduresMentioning matches calls of any of procs whose arguments hold s.
func ProceduresMentioning(s string, procs ...uint32) Match {
	of := Procedures(procs...)
	return func(c Call) bool { return of(c) && c.Mentions(s) }
}

// AnyCall matches every call.
func AnyCall(Call) bool { return true }

type rule struct {
	match Match
	once  bool
	used  bool
	fail  *libvirt.Error // answer with this
	gate  *Gate          // or hold until the gate opens
}

// Gate holds the calls of a Hold rule.
type Gate struct {
	release chan struct{}
	once    sync.Once
	answer  *libvirt.Error // read after release is closed

	arrived     chan struct{}
	arrivedOnce sync.Once
	// drop removes a persistent rule from its relay once the gate is
	// released, so the calls it would match pass straight through, in
	// order. A one-shot rule stays until it matched: a call that arrives
	// after the release still gets the release's answer.
	drop func()
}

// Release lets the held calls go on: forwarded to libvirtd when answer is
// nil, else answered with it (and never forwarded). Only the first call
// counts. A one-shot hold released before its call arrived answers that
// call as released; a persistent one matches nothing once released.
func (g *Gate) Release(answer *libvirt.Error) {
	g.once.Do(func() {
		g.answer = answer
		close(g.release)
		if g.drop != nil {
			g.drop()
		}
	})
}

// Arrived is closed once the first call is held.
func (g *Gate) Arrived() <-chan struct{} { return g.arrived }

// NewRelay starts a relay to the libvirtd socket upstream; it stops when
// the test ends. Its socket is in a short temporary directory of its own
// (unix socket paths are limited to 108 bytes).
func NewRelay(t testing.TB, upstream string) *Relay {
	t.Helper()
	dir, err := os.MkdirTemp("", "lvrelay")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{Path: path, upstream: upstream, ln: ln, conns: map[*relayConn]struct{}{}, calls: map[uint32]int{}}
	go r.serve()
	t.Cleanup(r.Close)
	return r
}

// FailNext answers the next call that m matches with e, without
// forwarding it.
func (r *Relay) FailNext(m Match, e libvirt.Error) {
	r.add(&rule{match: m, once: true, fail: &e})
}

// Hold holds the calls m matches (only the next one when once) until the
// gate is released or their connection closes; a call whose connection
// closed first is dropped, as it never reached libvirtd.
func (r *Relay) Hold(m Match, once bool) *Gate {
	g := &Gate{release: make(chan struct{}), arrived: make(chan struct{})}
	ru := &rule{match: m, once: once, gate: g}
	if !once {
		g.drop = func() { r.remove(ru) }
	}
	r.add(ru)
	return g
}

func (r *Relay) remove(ru *rule) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rules = slices.DeleteFunc(r.rules, func(x *rule) bool { return x == ru })
}

func (r *Relay) add(ru *rule) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rules = append(r.rules, ru)
}

// Reset drops every rule and forwards what is held.
func (r *Relay) Reset() {
	r.mu.Lock()
	rules := r.rules
	r.rules = nil
	r.mu.Unlock()
	for _, ru := range rules {
		if ru.gate != nil {
			ru.gate.Release(nil)
		}
	}
}

// Calls is how many calls of proc the relay has seen.
func (r *Relay) Calls(proc uint32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[proc]
}

// Close stops the relay and drops its connections; what they held is
// dropped with them.
func (r *Relay) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	conns := make([]*relayConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	_ = r.ln.Close()
	for _, c := range conns {
		c.close()
	}
}

// decide is what happens to a call: the first rule that matches it.
func (r *Relay) decide(c Call) *rule {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[c.Procedure]++
	for _, ru := range r.rules {
		if ru.used || !ru.match(c) {
			continue
		}
		if ru.once {
			ru.used = true
		}
		return ru
	}
	return nil
}

func (r *Relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.handle(c)
	}
}

// relayConn is one client connection and its own connection to libvirtd.
type relayConn struct {
	client, server net.Conn
	cmu, smu       sync.Mutex // one packet at a time on each side
	done           chan struct{}
	once           sync.Once
}

func (c *relayConn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

func (c *relayConn) toClient(pkt []byte) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if _, err := c.client.Write(pkt); err != nil {
		c.close()
	}
}

func (c *relayConn) toServer(pkt []byte) {
	c.smu.Lock()
	defer c.smu.Unlock()
	if _, err := c.server.Write(pkt); err != nil {
		c.close()
	}
}

func (r *Relay) handle(client net.Conn) {
	server, err := net.Dial("unix", r.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &relayConn{client: client, server: server, done: make(chan struct{})}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.close()
		return
	}
	r.conns[c] = struct{}{}
	r.mu.Unlock()
	defer func() {
		c.close()
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	go func() {
		defer c.close()
		for {
			pkt, err := readPacket(server)
			if err != nil {
				return
			}
			c.toClient(pkt)
		}
	}()
	for {
		pkt, err := readPacket(client)
		if err != nil {
			return
		}
		if binary.BigEndian.Uint32(pkt[4:8]) != remoteProgram || binary.BigEndian.Uint32(pkt[16:20]) != typeCall {
			c.toServer(pkt)
			continue
		}
		ru := r.decide(Call{Procedure: binary.BigEndian.Uint32(pkt[12:16]), Payload: pkt[pktHeaderLen:]})
		switch {
		case ru == nil:
			c.toServer(pkt)
		case ru.fail != nil:
			c.toClient(errorReply(pkt, *ru.fail))
		default:
			g := ru.gate
			g.arrivedOnce.Do(func() { close(g.arrived) })
			go func() {
				select {
				case <-g.release:
				case <-c.done:
					return
				}
				if g.answer != nil {
					c.toClient(errorReply(pkt, *g.answer))
					return
				}
				c.toServer(pkt)
			}()
		}
	}
}

// readPacket reads one whole packet, its length word included.
func readPacket(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < pktHeaderLen || size > maxPacket {
		return nil, fmt.Errorf("libvirt packet of %d bytes", size)
	}
	pkt := make([]byte, size)
	copy(pkt, n[:])
	if _, err := io.ReadFull(r, pkt[4:]); err != nil {
		return nil, err
	}
	return pkt, nil
}

// errorReply is libvirtd's error answer to the call pkt: the call's
// program, version, procedure and serial, type reply, status error, and a
// remote_error as the payload.
func errorReply(call []byte, e libvirt.Error) []byte {
	var b bytes.Buffer
	body := xdrError(e)
	put := func(v uint32) { _ = binary.Write(&b, binary.BigEndian, v) }
	put(uint32(pktHeaderLen + len(body)))
	b.Write(call[4:16]) // program, version, procedure
	put(typeReply)
	b.Write(call[20:24]) // serial
	put(statusError)
	b.Write(body)
	return b.Bytes()
}

// xdrError is remote_error: code, domain, message (a present pointer to a
// string), level, then the optional fields, all absent.
func xdrError(e libvirt.Error) []byte {
	var b bytes.Buffer
	put := func(v uint32) { _ = binary.Write(&b, binary.BigEndian, v) }
	put(e.Code)
	put(0) // domain
	put(1) // message present
	put(uint32(len(e.Message)))
	b.WriteString(e.Message)
	for i := len(e.Message); i%4 != 0; i++ {
		b.WriteByte(0)
	}
	put(2) // level: error
	for i := 0; i < 4; i++ {
		put(0) // dom, str1, str2, str3 absent
	}
	put(0) // int1
	put(0) // int2
	put(0) // net absent
	return b.Bytes()
}
