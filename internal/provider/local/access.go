package local

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// access is one request's access log line (egress.AccessEntry), filled in
// as the request is decided and served and written at V(1) when it ends,
// as Squid writes its line (docs/operations.md, "Access log").
type access struct {
	start    time.Time
	mu       sync.Mutex
	entry    egress.AccessEntry
	bytesIn  atomic.Int64
	bytesOut atomic.Int64
}

type accessKey struct{}

// accessOf is the line of the request ctx belongs to; nil outside one.
func accessOf(ctx context.Context) *access {
	a, _ := ctx.Value(accessKey{}).(*access)
	return a
}

// decide records what decided the request; the last call wins, as the
// last annotation does in Squid.
func (a *access) decide(decision, rule string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entry.Decision, a.entry.Rule = decision, rule
}

// target records the request's host and port.
func (a *access) target(host string, port uint16) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entry.Host, a.entry.Port = host, port
}

func (a *access) user(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entry.User = name
}

// line is the finished entry with status as the client got it.
func (a *access) line(status int) egress.AccessEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entry
	e.Time, e.Duration, e.Status = a.start, time.Since(a.start), status
	e.BytesIn, e.BytesOut = a.bytesIn.Load(), a.bytesOut.Load()
	return e
}

// traced gives ctx a trace that records, for a forwarded request, the rule
// that allowed the upstream connection it got, new or reused.
func (a *access) traced(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if c, ok := unwrapConn(info.Conn).(*allowedConn); ok {
			a.decide(egress.DecisionAllowed, c.rule)
		}
	}})
}

// allowedConn is an upstream connection with the rule that allowed it, so
// a request that reuses it logs that rule too.
type allowedConn struct {
	net.Conn
	rule string
}

// unwrapConn reaches the connection dial made under a TLS one.
func unwrapConn(c net.Conn) net.Conn {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		return u.NetConn()
	}
	return c
}

// recordingWriter counts what a handler writes and keeps its status.
type recordingWriter struct {
	http.ResponseWriter
	a      *access
	status int
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.a.bytesOut.Add(int64(n))
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingReader counts what is read through it into n.
type countingReader struct {
	io.Reader
	n *atomic.Int64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// countingBody is a request body that counts what is read of it.
type countingBody struct {
	countingReader
	io.Closer
}

// clientAddr is the request's source address as the log writes it.
func clientAddr(remote string) string {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap().String()
	}
	return ""
}

// countingConn counts what is written to it into n (a tunnel's bytes to
// the client); it keeps CloseWrite, which splice half-closes with.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
