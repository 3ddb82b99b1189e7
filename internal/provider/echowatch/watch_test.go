package echowatch

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/echowatch/echowatchtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// tokenHeader and token are the probe header the tests send through the
// proxy; no Error may ever hold token.
const (
	tokenHeader = "X-Egress-Probe-Token"
	token       = "s3cr3t-probe-token-0123456789"
)

// answerFunc writes a response instead of the server's usual one.
type answerFunc = func(http.ResponseWriter, *http.Request)

// testProxy is an HTTP forward proxy on 127.0.0.1: it takes absolute-form
// requests, records what it got and forwards them (every header, as a
// proxy that strips nothing would) to their URL, or answers what answer
// says instead.
type testProxy struct {
	srv    *httptest.Server
	asked  atomic.Int32
	answer atomic.Pointer[answerFunc]

	mu sync.Mutex
	// uris and headers are each request's request-target and headers.
	uris    []string
	headers []http.Header
}

func newTestProxy(t *testing.T) *testProxy {
	t.Helper()
	p := &testProxy{}
	upstream := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	t.Cleanup(upstream.CloseIdleConnections)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.asked.Add(1)
		p.mu.Lock()
		p.uris = append(p.uris, r.RequestURI)
		p.headers = append(p.headers, r.Header.Clone())
		p.mu.Unlock()
		if f := p.answer.Load(); f != nil {
			(*f)(w, r)
			return
		}
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, r.URL.String(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := upstream.RoundTrip(out)
		if err != nil {
			w.Header().Set("X-Squid-Error", "ERR_CONNECT_FAIL 111")
			http.Error(w, "cannot reach", http.StatusServiceUnavailable)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *testProxy) setAnswer(f answerFunc) { p.answer.Store(&f) }

// via is a Via through p sending the test token; calls counts Header's
// calls.
func (p *testProxy) via(t *testing.T, calls *atomic.Int32) *Via {
	t.Helper()
	u, err := url.Parse(p.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &Via{Proxy: u, Header: func(context.Context) (http.Header, error) {
		if calls != nil {
			calls.Add(1)
		}
		return http.Header{tokenHeader: {token}}, nil
	}}
}

// testClock is the watch's clock seam: it moves only when told.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newWatch is New for the echo at rawURL through via, on clock, stopped
// at the test's end.
func newWatch(t *testing.T, rawURL string, via *Via, clock *testClock) *Watch {
	t.Helper()
	e, ferr := egress.ParseEcho(rawURL, nil)
	if ferr != nil {
		t.Fatalf("ParseEcho(%s): %v", rawURL, ferr)
	}
	w := New(e, via)
	w.now = clock.now
	t.Cleanup(w.Stop)
	return w
}

// await polls Observe until ok accepts the observation, for at most 5 s.
func await(t *testing.T, w *Watch, what string, ok func(provider.Egress) bool) provider.Egress {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if e := w.Observe(); ok(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s, Observe = %+v; want %s", w.Observe(), what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func hasIP(e provider.Egress) bool    { return e.IP != "" && e.Error == "" }
func hasError(e provider.Egress) bool { return e.Error != "" }

// requested is how many asks w's reads requested.
func (w *Watch) requestedAsks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requested
}

// goroutines counts the watches' goroutines in the process.
func goroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "echowatch.(*Watch).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// refusedURL is an http URL on 127.0.0.1 where nothing listens.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	_ = ln.Close()
	return u
}

// The pace, directly and through a proxy: one ask on the first read, none
// within the interval, one past it; a failure keeps the address; Stop
// ends the goroutine.
func TestObservePace(t *testing.T) {
	for _, throughProxy := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "through a proxy"}[throughProxy]
		t.Run(name, func(t *testing.T) {
			echo := echowatchtest.New(t)
			var via *Via
			var proxy *testProxy
			if throughProxy {
				proxy = newTestProxy(t)
				via = proxy.via(t, nil)
			}
			clock := &testClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
			before := goroutines()
			w := newWatch(t, echo.Srv.URL+"/ip", via, clock)
			if n := goroutines() - before; n != 0 {
				t.Fatalf("%d goroutines before the first read", n)
			}

			if got := w.Observe(); got != (provider.Egress{Source: provider.EgressFromEcho}) || !got.Awaited() {
				t.Fatalf("first Observe = %+v, want the source alone, awaited (it never waits)", got)
			}
			got := await(t, w, "127.0.0.1 from the echo", hasIP)
			want := provider.Egress{IP: "127.0.0.1", Source: provider.EgressFromEcho, Confirmed: clock.now()}
			if got != want {
				t.Fatalf("Observe = %+v, want %+v", got, want)
			}
			if n := goroutines() - before; n != 1 {
				t.Errorf("%d goroutines for one watch, want 1", n)
			}

			clock.advance(interval - time.Second)
			for range 5 {
				if got := w.Observe(); got != want {
					t.Fatalf("Observe within the interval = %+v, want %+v", got, want)
				}
			}
			if n := w.requestedAsks(); n != 1 {
				t.Fatalf("%d asks requested within %s, want 1", n, interval)
			}

			echo.SetAnswer(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "down", http.StatusServiceUnavailable)
			})
			clock.advance(2 * time.Second)
			got = await(t, w, "the echo's 503", hasError)
			if got.IP != "127.0.0.1" || got.Source != provider.EgressFromEcho || !got.Confirmed.Equal(want.Confirmed) ||
				got.Error != "the echo answered: 503 Service Unavailable" {
				t.Errorf("after a 503: Observe = %+v, want 127.0.0.1 confirmed at %s with the 503 as Error", got, want.Confirmed)
			}
			if n := echo.Asked.Load(); n != 2 || w.requestedAsks() != 2 {
				t.Errorf("the echo was asked %d times (%d requested), want 2: one per interval", n, w.requestedAsks())
			}
			if proxy != nil && proxy.asked.Load() != 2 {
				t.Errorf("the proxy was asked %d times, want 2: every ask goes through it", proxy.asked.Load())
			}
			if echo.BadAgent.Load() {
				t.Error("an ask was not a GET with User-Agent egress-proxies-operator")
			}

			echo.SetAnswer(nil)
			clock.advance(interval)
			got = await(t, w, "a fresh confirmation", func(e provider.Egress) bool { return e.Error == "" })
			if got.IP != "127.0.0.1" || !got.Confirmed.Equal(clock.now()) {
				t.Errorf("after recovering: Observe = %+v, want 127.0.0.1 confirmed at %s", got, clock.now())
			}

			w.Stop()
			if n := goroutines() - before; n != 0 {
				t.Errorf("%d goroutines left after Stop", n)
			}
		})
	}
}

// Through a proxy, the ask is an absolute-form request to the proxy with
// the Header func's headers (asked before each ask) and the operator's
// User-Agent, and the echo sees it from the proxy.
func TestThroughProxy(t *testing.T) {
	echo := echowatchtest.New(t)
	proxy := newTestProxy(t)
	var calls atomic.Int32
	via := proxy.via(t, &calls)
	via.Header = func(ctx context.Context) (http.Header, error) {
		calls.Add(1)
		// A header func may try to set the User-Agent; the operator's stands.
		return http.Header{tokenHeader: {token}, "User-Agent": {"other"}}, nil
	}
	clock := &testClock{}
	w := newWatch(t, echo.Srv.URL+"/ip?v=4", via, clock)
	await(t, w, "an address", hasIP)
	clock.advance(interval)
	w.Observe()
	// The second answer arrived: both asks are done at the proxy and the echo.
	await(t, w, "a second answer", func(e provider.Egress) bool { return e.Confirmed.Equal(clock.now()) })

	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	for i, h := range proxy.headers {
		if got := h.Get(tokenHeader); got != token {
			t.Errorf("ask %d reached the proxy with %s %q, want the token", i, tokenHeader, got)
		}
		if got := h.Values("User-Agent"); len(got) != 1 || got[0] != "egress-proxies-operator" {
			t.Errorf("ask %d reached the proxy with User-Agent %q, want only egress-proxies-operator", i, got)
		}
		if want := echo.Srv.URL + "/ip?v=4"; proxy.uris[i] != want {
			t.Errorf("ask %d's request-target is %q, want the absolute %q", i, proxy.uris[i], want)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("Header was called %d times for 2 asks, want once before each", n)
	}
	if n := echo.Asked.Load(); n != 2 {
		t.Errorf("the echo was asked %d times, want 2 (through the proxy)", n)
	}
}

// Every failure keeps the last confirmed address, says why in words that
// name the party that failed, and never shows the token.
func TestFailures(t *testing.T) {
	type setup struct {
		echo  *echowatchtest.Echo
		proxy *testProxy // nil: directly
		// failHeader makes the Header func fail from now on.
		failHeader *atomic.Bool
	}
	cases := []struct {
		name         string
		throughProxy bool
		// fail turns the working setup into a failing one.
		fail func(t *testing.T, s setup)
		want string
	}{{
		name: "direct: the echo's 503",
		fail: func(_ *testing.T, s setup) {
			s.echo.SetAnswer(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) })
		},
		want: "the echo answered: 503 Service Unavailable",
	}, {
		name: "direct: a 403 with X-Squid-Error is still the echo's",
		fail: func(_ *testing.T, s setup) {
			s.echo.SetAnswer(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Squid-Error", "ERR_ACCESS_DENIED 0")
				w.WriteHeader(http.StatusForbidden)
			})
		},
		want: "the echo answered: 403 Forbidden",
	}, {
		name: "direct: not an address",
		fail: func(_ *testing.T, s setup) {
			s.echo.SetAnswer(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte("  <html>\x01\x7fyour address is 127.0.0.1, thank you for asking us today</html>\n192.0.2.1\n"))
			})
		},
		want: "the echo's answer is not an address: <html>your address is 127.0.0.1, thank you for a",
	}, {
		name: "direct: an empty answer",
		fail: func(_ *testing.T, s setup) {
			s.echo.SetAnswer(func(http.ResponseWriter, *http.Request) {})
		},
		want: "the echo's answer is not an address: (empty)",
	}, {
		name: "direct: the echo is gone",
		fail: func(_ *testing.T, s setup) { s.echo.Srv.Close() },
		want: "the echo refused the connection",
	}, {
		name:         "through a proxy: the echo's 503 relayed",
		throughProxy: true,
		fail: func(_ *testing.T, s setup) {
			s.echo.SetAnswer(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) })
		},
		want: "the echo answered: 503 Service Unavailable",
	}, {
		name:         "through a proxy: Squid's 403",
		throughProxy: true,
		fail: func(_ *testing.T, s setup) {
			s.proxy.setAnswer(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Squid-Error", "ERR_ACCESS_DENIED 0")
				http.Error(w, "access denied", http.StatusForbidden)
			})
		},
		want: "the proxy refused the ask: 403 Forbidden",
	}, {
		name:         "through a proxy: Squid could not reach the echo",
		throughProxy: true,
		fail: func(_ *testing.T, s setup) {
			s.proxy.setAnswer(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Squid-Error", "ERR_CONNECT_FAIL 111")
				http.Error(w, "connection failed", http.StatusServiceUnavailable)
			})
		},
		want: "the proxy got no answer from the echo: 503 Service Unavailable",
	}, {
		name:         "through a proxy: a 407",
		throughProxy: true,
		fail: func(_ *testing.T, s setup) {
			s.proxy.setAnswer(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusProxyAuthRequired)
			})
		},
		want: "the proxy refused the ask: 407 Proxy Authentication Required",
	}, {
		name:         "through a proxy: its status line reflects the token",
		throughProxy: true,
		fail: func(t *testing.T, s setup) {
			s.proxy.setAnswer(func(w http.ResponseWriter, r *http.Request) {
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				_, _ = buf.WriteString("HTTP/1.1 403 Forbidden " + r.Header.Get(tokenHeader) +
					"\r\nX-Squid-Error: ERR_ACCESS_DENIED 0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				_ = buf.Flush()
			})
		},
		want: "the proxy refused the ask: 403 Forbidden [redacted]",
	}, {
		name:         "through a proxy: the echo reflects the token",
		throughProxy: true,
		fail: func(_ *testing.T, s setup) {
			s.echo.SetAnswer(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(r.Header.Get(tokenHeader) + "\x01 is what you sent\n"))
			})
		},
		want: "the echo's answer is not an address: [redacted] is what you sent",
	}, {
		name:         "through a proxy: the proxy is gone",
		throughProxy: true,
		fail:         func(_ *testing.T, s setup) { s.proxy.srv.Close() },
		want:         "the proxy refused the connection",
	}, {
		name:         "through a proxy: the proxy hangs up",
		throughProxy: true,
		fail: func(t *testing.T, s setup) {
			s.proxy.setAnswer(func(w http.ResponseWriter, _ *http.Request) {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				_ = conn.Close()
			})
		},
		want: "the proxy closed the connection before answering",
	}, {
		name:         "through a proxy: the Header func fails",
		throughProxy: true,
		fail:         func(_ *testing.T, s setup) { s.failHeader.Store(true) },
		want:         "the probe token Secret egress-proxies-probe-token has no key token",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := setup{echo: echowatchtest.New(t), failHeader: &atomic.Bool{}}
			var via *Via
			if tc.throughProxy {
				s.proxy = newTestProxy(t)
				via = s.proxy.via(t, nil)
				via.Header = func(context.Context) (http.Header, error) {
					if s.failHeader.Load() {
						return nil, errors.New("the probe token Secret egress-proxies-probe-token has no key token")
					}
					return http.Header{tokenHeader: {token}}, nil
				}
			}
			clock := &testClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
			w := newWatch(t, s.echo.Srv.URL, via, clock)
			confirmed := await(t, w, "an address", hasIP)

			tc.fail(t, s)
			clock.advance(interval)
			got := await(t, w, "an error", hasError)
			want := provider.Egress{IP: "127.0.0.1", Source: provider.EgressFromEcho, Confirmed: confirmed.Confirmed, Error: tc.want}
			if got != want {
				t.Errorf("Observe = %+v,\nwant %+v", got, want)
			}
			if strings.Contains(got.Error, token) || strings.Contains(got.Error, token[:8]) {
				t.Errorf("Error %q shows the token", got.Error)
			}
		})
	}
}

// A watch whose first ask fails has no address, only why. Through a
// proxy that refuses, the echo answers but is not asked: only the proxy
// is.
func TestFirstAskFails(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		w := newWatch(t, refusedURL(t), nil, &testClock{})
		got := await(t, w, "an error", hasError)
		if want := (provider.Egress{Source: provider.EgressFromEcho, Error: "the echo refused the connection"}); got != want {
			t.Errorf("Observe = %+v, want %+v", got, want)
		}
	})
	t.Run("through a proxy", func(t *testing.T) {
		echo := echowatchtest.New(t)
		proxy, err := url.Parse(refusedURL(t))
		if err != nil {
			t.Fatal(err)
		}
		w := newWatch(t, echo.Srv.URL, &Via{Proxy: proxy}, &testClock{})
		got := await(t, w, "an error", hasError)
		if want := (provider.Egress{Source: provider.EgressFromEcho, Error: "the proxy refused the connection"}); got != want {
			t.Errorf("Observe = %+v, want %+v", got, want)
		}
		if n := echo.Asked.Load(); n != 0 {
			t.Errorf("the echo was asked %d times directly", n)
		}
	})
}

// The transport failures a test cannot cheaply cause (a 10 s silence, a
// name that does not resolve) read as the VM reporter's do.
func TestTransportProblem(t *testing.T) {
	timeoutErr := &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}}
	dnsErr := &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}}}
	refused := &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	proxy := &Via{Proxy: &url.URL{Scheme: "http", Host: "127.0.0.1:3128"}}
	for _, tc := range []struct {
		err         error
		direct, via string
	}{
		{timeoutErr, "no answer from the echo within 10s", "no answer from the proxy or the echo within 10s"},
		{dnsErr, "the echo's host name does not resolve", "the proxy's host name does not resolve"},
		{refused, "the echo refused the connection", "the proxy refused the connection"},
		{io.ErrUnexpectedEOF, "the echo closed the connection before answering", "the proxy closed the connection before answering"},
		{errors.New("tls: something"), "the echo could not be reached", "the proxy could not be reached"},
	} {
		if got := New(egress.Echo{}, nil).transportProblem(tc.err); got != tc.direct {
			t.Errorf("directly, %v reads %q, want %q", tc.err, got, tc.direct)
		}
		if got := New(egress.Echo{}, proxy).transportProblem(tc.err); got != tc.via {
			t.Errorf("through a proxy, %v reads %q, want %q", tc.err, got, tc.via)
		}
	}
}

// Stop ends an ask in flight and the goroutine with it, and nothing starts
// after it.
func TestStopMidAsk(t *testing.T) {
	for _, throughProxy := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "through a proxy"}[throughProxy], func(t *testing.T) {
			echo := echowatchtest.New(t)
			asking := make(chan struct{})
			echo.SetAnswer(func(_ http.ResponseWriter, r *http.Request) {
				close(asking)
				<-r.Context().Done() // answers only when the caller goes
			})
			var via *Via
			if throughProxy {
				via = newTestProxy(t).via(t, nil)
			}
			before := goroutines()
			w := newWatch(t, echo.Srv.URL, via, &testClock{})
			w.Observe()
			select {
			case <-asking:
			case <-time.After(5 * time.Second):
				t.Fatal("the echo was not asked within 5s")
			}
			stopped := make(chan struct{})
			go func() { w.Stop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				t.Fatal("Stop waited 5s for the echo's answer")
			}
			if n := goroutines() - before; n != 0 {
				t.Errorf("%d goroutines left after Stop", n)
			}
			if got := w.Observe(); got != (provider.Egress{Source: provider.EgressFromEcho}) {
				t.Errorf("Observe after Stop = %+v, want the last observation (awaited: no answer came)", got)
			}
			if n := goroutines() - before; n != 0 {
				t.Errorf("Observe after Stop started %d goroutines", n)
			}
			w.Stop() // twice is fine
		})
	}
}

// A watch never read asks nothing and starts nothing; Stop on it returns,
// twice, and a later Observe starts nothing either.
func TestNeverStarted(t *testing.T) {
	echo := echowatchtest.New(t)
	before := goroutines()
	w := newWatch(t, echo.Srv.URL, nil, &testClock{})
	w.Stop()
	w.Stop()
	if got := w.Observe(); got != (provider.Egress{}) {
		t.Errorf("Observe after Stop = %+v, want nothing", got)
	}
	time.Sleep(20 * time.Millisecond) // room for a wrongly started ask
	if n := goroutines() - before; n != 0 {
		t.Errorf("%d goroutines after Stop and Observe", n)
	}
	if n := echo.Asked.Load(); n != 0 {
		t.Errorf("the echo was asked %d times by a watch stopped before any read", n)
	}
}

// A Via without a Proxy would ask directly while the caller thinks it asks
// through the instance: New refuses it.
func TestViaWithoutProxy(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with a Via without a Proxy did not panic")
		}
	}()
	New(egress.Echo{}, &Via{})
}

// Shown text: controls dropped, hidden values replaced even when split by
// a control character, then clipped.
func TestPrintable(t *testing.T) {
	for _, tc := range []struct {
		in     string
		max    int
		hidden []string
		want   string
	}{
		{"abc\x01def", 80, nil, "abcdef"},
		{"abcdef", 3, nil, "abc"},
		{"you sent s3cr\x7fet!", 80, []string{"s3cret"}, "you sent [redacted]!"},
		{"s3cret-and-more", 4, []string{"s3cret"}, "[red"},
		{"a\tb", 80, []string{"a\tb"}, "[redacted]"},
		{"nothing", 80, []string{""}, "nothing"},
	} {
		if got := printable(tc.in, tc.max, tc.hidden); got != tc.want {
			t.Errorf("printable(%q, %d, %q) = %q, want %q", tc.in, tc.max, tc.hidden, got, tc.want)
		}
	}
}
