// Package dnstest is a DNS server for tests: it answers A and AAAA queries
// for the names it is given, over UDP and TCP, from an address inside the
// test's own network namespace (internal/testenv/netns), so that Squid and
// Go resolve the same names the same way without any query leaving.
package dnstest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers from Names until the test ends. A name it does not hold is
// NXDOMAIN; a name held with no address of the asked family is answered
// with no records (NOERROR), as a real zone does.
type Server struct {
	names map[string][]netip.Addr
	mu    sync.Mutex
	asked map[string]int
}

// Start serves names (any case, with or without the trailing dot) at addr's
// port 53, UDP and TCP.
func Start(t testing.TB, addr string, names map[string][]netip.Addr) *Server {
	t.Helper()
	s := &Server{names: map[string][]netip.Addr{}, asked: map[string]int{}}
	for n, a := range names {
		s.names[canonical(n)] = a
	}
	hostPort := net.JoinHostPort(addr, "53")
	pc, err := net.ListenPacket("udp", hostPort)
	if err != nil {
		t.Fatalf("dnstest: %v", err)
	}
	ln, err := net.Listen("tcp", hostPort)
	if err != nil {
		_ = pc.Close()
		t.Fatalf("dnstest: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.serveUDP(pc) }()
	go func() { defer wg.Done(); s.serveTCP(ln) }()
	t.Cleanup(func() { _ = pc.Close(); _ = ln.Close(); wg.Wait() })
	return s
}

// Asked is how many queries named name, any type.
func (s *Server) Asked(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[canonical(name)]
}

func canonical(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) + "." }

func (s *Server) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, ok := s.answer(buf[:n]); ok {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

func (s *Server) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				out, ok := s.answer(msg)
				if !ok {
					return
				}
				if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
					return
				}
			}
		}()
	}
}

// answer builds the response to one query message.
func (s *Server) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if errors.Is(err, dnsmessage.ErrSectionDone) || err != nil {
		return nil, false
	}
	name := canonical(q.Name.String())
	s.mu.Lock()
	s.asked[name]++
	s.mu.Unlock()
	addrs, known := s.names[name]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	for _, a := range addrs {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
