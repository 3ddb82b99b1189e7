package local

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// testEcho is an egress-IP echo on 127.0.0.1 that answers the caller's
// address, or what answer says instead.
type testEcho struct {
	srv   *httptest.Server
	asked atomic.Int32
	// answer, when set, writes the response instead of the caller's
	// address.
	answer atomic.Pointer[func(http.ResponseWriter, *http.Request)]
	// badAgent records a request without the operator's User-Agent.
	badAgent atomic.Bool
}

func newTestEcho(t *testing.T) *testEcho {
	t.Helper()
	e := &testEcho{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.asked.Add(1)
		if r.Method != http.MethodGet || r.Header.Get("User-Agent") != "egress-proxies-operator" {
			e.badAgent.Store(true)
		}
		if f := e.answer.Load(); f != nil {
			(*f)(w, r)
			return
		}
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = w.Write([]byte(host + "\n"))
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *testEcho) setAnswer(f func(http.ResponseWriter, *http.Request)) { e.answer.Store(&f) }

// testClock is the echo's clock seam: it moves only when told.
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

// newEchoProvider is newTestProvider with egressIPEcho set to url, on
// clock.
func newEchoProvider(t *testing.T, url string, clock *testClock) *Provider {
	t.Helper()
	cfg := Config{BindCIDR: nextRange(24)}
	cfg.AllowedDestinations = []string{originIP + "/32"}
	cfg.EgressIPEcho = url
	p, err := New(testProviderName, cfg, optsFor(testInstallation))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if p.echo == nil {
		t.Fatalf("a provider with egressIPEcho %s has no echo", url)
	}
	p.echo.now = clock.now
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// awaitEgress polls Get until ok accepts the instance, for at most 5 s.
func awaitEgress(t *testing.T, p *Provider, id, what string, ok func(provider.Egress) bool) provider.Egress {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		inst, err := p.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if ok(inst.Egress) {
			return inst.Egress
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s, Egress = %+v; want %s", inst.Egress, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requested is how many asks the provider's reads requested.
func requested(p *Provider) int {
	p.echo.mu.Lock()
	defer p.echo.mu.Unlock()
	return p.echo.requested
}

// echoGoroutines counts the echo watchers' goroutines in the process.
func echoGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "local.(*echoWatch).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestEchoEgress(t *testing.T) {
	echo := newTestEcho(t)
	clock := &testClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	before := echoGoroutines()
	p := newEchoProvider(t, echo.srv.URL+"/ip", clock)

	// Create's view is ready at once; its egress may not be yet.
	inst := mustCreate(t, p, request("echo", "127.0.0.0/8"))
	if inst.State != provider.StateRunning {
		t.Fatalf("Create returned %s", inst.State)
	}
	got := awaitEgress(t, p, inst.ID, "127.0.0.1 from the echo", func(e provider.Egress) bool { return e.IP != "" })
	want := provider.Egress{IP: "127.0.0.1", Source: provider.EgressFromEcho, Confirmed: clock.now()}
	if got != want {
		t.Fatalf("Egress = %+v, want %+v", got, want)
	}
	if n := echoGoroutines() - before; n != 1 {
		t.Errorf("%d echo goroutines for one provider, want 1", n)
	}

	// Within the interval: Gets read the observation and ask nothing.
	clock.advance(echoInterval - time.Second)
	for range 5 {
		if i, err := p.Get(context.Background(), inst.ID); err != nil || i.Egress != want {
			t.Fatalf("Get within the interval: %+v, %v; want Egress %+v", i.Egress, err, want)
		}
	}
	if n := requested(p); n != 1 {
		t.Fatalf("%d asks requested by Gets within %s, want 1", n, echoInterval)
	}

	// Past the interval, the echo fails: the address stands, with why.
	echo.setAnswer(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	clock.advance(2 * time.Second)
	got = awaitEgress(t, p, inst.ID, "the echo's 503", func(e provider.Egress) bool { return e.Error != "" })
	if got.IP != "127.0.0.1" || got.Source != provider.EgressFromEcho || !got.Confirmed.Equal(want.Confirmed) ||
		got.Error != "the echo answered: 503 Service Unavailable" {
		t.Errorf("after a 503: Egress = %+v, want 127.0.0.1 confirmed at %s with the 503 as Error", got, want.Confirmed)
	}
	if n := echo.asked.Load(); n != 2 || requested(p) != 2 {
		t.Errorf("the echo was asked %d times (%d requested), want 2: one per interval", n, requested(p))
	}
	if echo.badAgent.Load() {
		t.Error("an ask was not a GET with User-Agent egress-proxies-operator")
	}

	// It answers again: the error goes, the confirmation moves.
	echo.answer.Store(nil)
	clock.advance(echoInterval)
	got = awaitEgress(t, p, inst.ID, "a fresh confirmation", func(e provider.Egress) bool { return e.Error == "" })
	if got.IP != "127.0.0.1" || !got.Confirmed.Equal(clock.now()) {
		t.Errorf("after recovering: Egress = %+v, want 127.0.0.1 confirmed at %s", got, clock.now())
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := echoGoroutines() - before; n != 0 {
		t.Errorf("%d echo goroutines left after Close", n)
	}
}

func TestEchoAnswerNotAnAddress(t *testing.T) {
	echo := newTestEcho(t)
	echo.setAnswer(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("  <html>\x01\x7fyour address is 127.0.0.1, thank you for asking us today</html>\n192.0.2.1\n"))
	})
	p := newEchoProvider(t, echo.srv.URL, &testClock{})
	inst := mustCreate(t, p, request("garbage", "127.0.0.0/8"))
	got := awaitEgress(t, p, inst.ID, "an error", func(e provider.Egress) bool { return e.Error != "" })
	want := provider.Egress{Source: provider.EgressFromEcho,
		Error: "the echo's answer is not an address: <html>your address is 127.0.0.1, thank you for a"}
	if got != want {
		t.Errorf("Egress = %+v, want %+v", got, want)
	}
}

func TestEchoRefused(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/"
	_ = ln.Close() // nothing listens there now
	p := newEchoProvider(t, url, &testClock{})
	inst := mustCreate(t, p, request("refused", "127.0.0.0/8"))
	got := awaitEgress(t, p, inst.ID, "an error", func(e provider.Egress) bool { return e.Error != "" })
	if got.Error != "the echo refused the connection" || got.IP != "" {
		t.Errorf("Egress = %+v, want no address and the refusal", got)
	}
}

// Close ends an ask in flight and the goroutine with it.
func TestEchoCloseMidAsk(t *testing.T) {
	echo := newTestEcho(t)
	asking := make(chan struct{})
	echo.setAnswer(func(_ http.ResponseWriter, r *http.Request) {
		close(asking)
		<-r.Context().Done() // answers only when the caller goes
	})
	before := echoGoroutines()
	p := newEchoProvider(t, echo.srv.URL, &testClock{})
	inst := mustCreate(t, p, request("midask", "127.0.0.0/8"))
	select {
	case <-asking:
	case <-time.After(5 * time.Second):
		t.Fatal("the echo was not asked within 5s")
	}
	closed := make(chan struct{})
	go func() { _ = p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited 5s for the echo's answer")
	}
	if n := echoGoroutines() - before; n != 0 {
		t.Errorf("%d echo goroutines left after Close", n)
	}
	if _, err := p.Get(context.Background(), inst.ID); err == nil {
		t.Error("Get after Close succeeded")
	}
}

// A provider with an echo makes no request until an instance is read.
func TestEchoLazy(t *testing.T) {
	echo := newTestEcho(t)
	before := echoGoroutines()
	p := newEchoProvider(t, echo.srv.URL, &testClock{})
	if _, err := p.ListByTag(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := echoGoroutines() - before; n != 0 {
		t.Errorf("%d echo goroutines before any instance was read", n)
	}
	_ = p.Close()
	if n := echo.asked.Load(); n != 0 {
		t.Errorf("the echo was asked %d times by a provider with no instances", n)
	}
}

func TestNoEcho(t *testing.T) {
	echo := newTestEcho(t)
	p := newTestProvider(t, testInstallation, 24)
	if p.echo != nil {
		t.Fatal("a provider without egressIPEcho has an echo")
	}
	inst := mustCreate(t, p, request("noecho", "127.0.0.0/8"))
	for range 3 {
		got, err := p.Get(context.Background(), inst.ID)
		if err != nil || got.Egress != (provider.Egress{}) {
			t.Fatalf("Get: Egress %+v, %v; want none", got.Egress, err)
		}
	}
	if inst.Egress != (provider.Egress{}) {
		t.Errorf("Create returned Egress %+v, want none", inst.Egress)
	}
	if n := echo.asked.Load(); n != 0 {
		t.Errorf("the echo was asked %d times", n)
	}
}
