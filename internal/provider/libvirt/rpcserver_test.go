package libvirt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/digitalocean/go-libvirt"
)

// rpcServer is an in-process libvirt RPC server on a unix socket: enough of
// libvirtd's wire protocol (packet length, header, XDR payloads) for the
// real go-libvirt client and the real adapter to run against it. Unlike
// go-libvirt's libvirttest mock (one request at a time, answered with its
// own serial counter), it answers each request on its own goroutine with
// the request's serial, so a held call does not stop the others, as with a
// real libvirtd.
//
// Knobs: hold(proc) holds calls of proc until released; fail(proc, code,
// msg) answers them with a libvirt error; closeConns() drops every
// connection as a restarting libvirtd would.
type rpcServer struct {
	t    testing.TB
	path string
	ln   net.Listener

	mu       sync.Mutex
	conns    []net.Conn
	accepted int
	holds    map[uint32]*fakeGate
	fails    map[uint32]libvirt.Error
	calls    map[uint32]int
	// answered gets one token per answered call of a held procedure.
	answered map[uint32]chan struct{}

	version  uint64
	hostname string
}

// The procedures the tests use (libvirt's remote_protocol.x numbers; the
// constants in go-libvirt are internal).
const (
	rpcProgram            = 0x20008086
	rpcVersion            = 1
	procConnectOpen       = 1
	procConnectClose      = 2
	procDomainCreate      = 9
	procDomainLookup      = 23
	procConnectGetHost    = 59
	procAuthList          = 66
	procConnectGetVersion = 157

	typeReply   = 1
	statusOK    = 0
	statusError = 1
)

func newRPCServer(t testing.TB) *rpcServer {
	t.Helper()
	// A short path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "lvrpc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "libvirt-sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &rpcServer{t: t, path: path, ln: ln, holds: map[uint32]*fakeGate{}, fails: map[uint32]libvirt.Error{},
		calls: map[uint32]int{}, answered: map[uint32]chan struct{}{}, version: 9000000, hostname: "rpc-host"}
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *rpcServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.accepted++
		s.mu.Unlock()
		go s.handle(c)
	}
}

func (s *rpcServer) close() {
	_ = s.ln.Close()
	s.closeConns()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.holds {
		g.open()
	}
}

// closeConns drops every connection.
func (s *rpcServer) closeConns() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (s *rpcServer) hold(proc uint32) *fakeGate {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := newFakeGate()
	s.holds[proc] = g
	s.answered[proc] = make(chan struct{}, 1024)
	return g
}

func (s *rpcServer) fail(proc uint32, code libvirt.ErrorNumber, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails[proc] = libvirt.Error{Code: uint32(code), Message: msg}
}

func (s *rpcServer) count(proc uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[proc]
}

func (s *rpcServer) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// handle reads packets and answers each on its own goroutine.
func (s *rpcServer) handle(c net.Conn) {
	var wmu sync.Mutex
	closed := make(chan struct{})
	defer close(closed)
	for {
		var n uint32
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		if n < 28 || n > 1<<24 {
			return
		}
		pkt := make([]byte, n-4)
		if _, err := io.ReadFull(c, pkt); err != nil {
			return
		}
		prog := binary.BigEndian.Uint32(pkt[0:4])
		proc := binary.BigEndian.Uint32(pkt[8:12])
		serial := binary.BigEndian.Uint32(pkt[16:20])
		payload := pkt[24:]
		if prog != rpcProgram {
			continue
		}
		go func() {
			status, body, ok := s.answer(proc, payload, closed)
			if !ok {
				return // the connection closed while the call was held
			}
			wmu.Lock()
			defer wmu.Unlock()
			_, _ = c.Write(packet(proc, serial, status, body))
			s.mu.Lock()
			ch := s.answered[proc]
			s.mu.Unlock()
			if ch != nil {
				ch <- struct{}{}
			}
		}()
	}
}

// answer is one call's reply (status and payload), after its hold; not ok
// when the connection closed first.
func (s *rpcServer) answer(proc uint32, payload []byte, closed <-chan struct{}) (uint32, []byte, bool) {
	s.mu.Lock()
	s.calls[proc]++
	gate := s.holds[proc]
	failure, failing := s.fails[proc]
	s.mu.Unlock()
	if gate != nil {
		gate.arrived <- struct{}{}
		select {
		case <-gate.release:
		case <-closed:
			return 0, nil, false
		}
	}
	if failing {
		return statusError, xdrError(failure), true
	}
	var b bytes.Buffer
	switch proc {
	case procAuthList:
		xdrUint32(&b, 1)
		xdrUint32(&b, 0) // REMOTE_AUTH_NONE
	case procConnectOpen, procConnectClose, procDomainCreate:
	case procConnectGetVersion:
		xdrUint64(&b, s.version)
	case procConnectGetHost:
		xdrString(&b, s.hostname)
	case procDomainLookup:
		name, ok := xdrReadString(payload)
		if !ok {
			return statusError, xdrError(libvirt.Error{Code: uint32(libvirt.ErrRPC), Message: "malformed request"}), true
		}
		xdrString(&b, name)
		var uuid [16]byte
		copy(uuid[:], name)
		b.Write(uuid[:])
		xdrUint32(&b, 7) // id
	default:
		return statusError, xdrError(libvirt.Error{Code: uint32(libvirt.ErrNoSupport), Message: "unknown procedure"}), true
	}
	return statusOK, b.Bytes(), true
}

func packet(proc, serial, status uint32, body []byte) []byte {
	var b bytes.Buffer
	xdrUint32(&b, uint32(28+len(body)))
	for _, v := range []uint32{rpcProgram, rpcVersion, proc, typeReply, serial, status} {
		xdrUint32(&b, v)
	}
	b.Write(body)
	return b.Bytes()
}

func xdrUint32(b *bytes.Buffer, v uint32) { _ = binary.Write(b, binary.BigEndian, v) }
func xdrUint64(b *bytes.Buffer, v uint64) { _ = binary.Write(b, binary.BigEndian, v) }

func xdrString(b *bytes.Buffer, s string) {
	xdrUint32(b, uint32(len(s)))
	b.WriteString(s)
	for i := len(s); i%4 != 0; i++ {
		b.WriteByte(0)
	}
}

func xdrReadString(p []byte) (string, bool) {
	if len(p) < 4 {
		return "", false
	}
	n := binary.BigEndian.Uint32(p)
	if uint32(len(p)-4) < n {
		return "", false
	}
	return string(p[4 : 4+n]), true
}

// xdrError is remote_error: code, domain, message (a present pointer to a
// string), level, then the optional fields, all absent.
func xdrError(e libvirt.Error) []byte {
	var b bytes.Buffer
	xdrUint32(&b, e.Code)
	xdrUint32(&b, 0) // domain
	xdrUint32(&b, 1) // message present
	xdrString(&b, e.Message)
	xdrUint32(&b, 2) // level: error
	for i := 0; i < 4; i++ {
		xdrUint32(&b, 0) // dom, str1, str2, str3 absent
	}
	xdrUint32(&b, 0) // int1
	xdrUint32(&b, 0) // int2
	xdrUint32(&b, 0) // net absent
	return b.Bytes()
}

// dial connects to the server as the production connector's transport
// would hand a socket to connectLibvirt.
func (s *rpcServer) dial() (net.Conn, error) {
	c, err := net.Dial("unix", s.path)
	if err != nil {
		return nil, errors.Join(errors.New("dialling the rpc server"), err)
	}
	return c, nil
}
