// Package echowatchtest is the egress-IP echo the tests of echowatch and of
// the providers that use it ask: an HTTP server on 127.0.0.1 that answers
// the caller's address, as checkip-style services do.
package echowatchtest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// UserAgent is what every ask of the operator's sends.
const UserAgent = "egress-proxies-operator"

// Echo answers the caller's address, or what SetAnswer says instead.
type Echo struct {
	Srv *httptest.Server
	// Asked counts the requests.
	Asked atomic.Int32
	// BadAgent records a request that was not a GET with UserAgent.
	BadAgent atomic.Bool
	answer   atomic.Pointer[func(http.ResponseWriter, *http.Request)]
}

// New starts an Echo, closed when t ends.
func New(t testing.TB) *Echo {
	t.Helper()
	e := &Echo{}
	e.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.Asked.Add(1)
		if r.Method != http.MethodGet || r.Header.Get("User-Agent") != UserAgent {
			e.BadAgent.Store(true)
		}
		if f := e.answer.Load(); f != nil {
			(*f)(w, r)
			return
		}
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = w.Write([]byte(host + "\n"))
	}))
	t.Cleanup(e.Srv.Close)
	return e
}

// SetAnswer makes f write the responses from now on; nil restores the
// caller's address.
func (e *Echo) SetAnswer(f func(http.ResponseWriter, *http.Request)) {
	if f == nil {
		e.answer.Store(nil)
		return
	}
	e.answer.Store(&f)
}
