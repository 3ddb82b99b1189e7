package local

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/echowatch/echowatchtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// newEchoProvider is newTestProvider with egressIPEcho set to url.
func newEchoProvider(t *testing.T, url string) *Provider {
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

// echoGoroutines counts the echo watches' goroutines in the process.
func echoGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "echowatch.(*Watch).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// The provider's one watch gives every Running instance the address the
// echo answers this host, asked once per interval whatever the reads
// (echowatch's tests cover the pace, the failures and their words).
func TestEchoEgress(t *testing.T) {
	echo := echowatchtest.New(t)
	before := echoGoroutines()
	p := newEchoProvider(t, echo.Srv.URL+"/ip")

	// Create's view is ready at once; its egress may not be yet.
	start := time.Now()
	inst := mustCreate(t, p, request("echo", "127.0.0.0/8"))
	if inst.State != provider.StateRunning {
		t.Fatalf("Create returned %s", inst.State)
	}
	got := awaitEgress(t, p, inst.ID, "127.0.0.1 from the echo", func(e provider.Egress) bool { return e.IP != "" })
	if got.IP != "127.0.0.1" || got.Source != provider.EgressFromEcho || got.Error != "" ||
		got.Confirmed.Before(start) || got.Confirmed.After(time.Now()) {
		t.Fatalf("Egress = %+v, want 127.0.0.1 from the echo, confirmed since %s", got, start)
	}

	// A second instance shares the observation: no second watch, no
	// second ask within the interval.
	other := mustCreate(t, p, request("echo2", "127.0.0.0/8"))
	for _, id := range []string{inst.ID, other.ID, inst.ID, other.ID} {
		if i, err := p.Get(context.Background(), id); err != nil || i.Egress != got {
			t.Fatalf("Get(%s): %+v, %v; want Egress %+v", id, i.Egress, err, got)
		}
	}
	if n := echoGoroutines() - before; n != 1 {
		t.Errorf("%d echo goroutines for one provider, want 1", n)
	}
	if n := echo.Asked.Load(); n != 1 {
		t.Errorf("the echo was asked %d times within %s, want 1", n, servingreport.EchoInterval)
	}
	if echo.BadAgent.Load() {
		t.Error("an ask was not a GET with User-Agent egress-proxies-operator")
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := echoGoroutines() - before; n != 0 {
		t.Errorf("%d echo goroutines left after Close", n)
	}
}

// The provider asks the echo directly, so a refusal is the echo's.
func TestEchoRefused(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/"
	_ = ln.Close() // nothing listens there now
	p := newEchoProvider(t, url)
	inst := mustCreate(t, p, request("refused", "127.0.0.0/8"))
	got := awaitEgress(t, p, inst.ID, "an error", func(e provider.Egress) bool { return e.Error != "" })
	if got.Error != "the echo refused the connection" || got.IP != "" {
		t.Errorf("Egress = %+v, want no address and the refusal", got)
	}
}

// Close ends an ask in flight and the goroutine with it.
func TestEchoCloseMidAsk(t *testing.T) {
	echo := echowatchtest.New(t)
	asking := make(chan struct{})
	echo.SetAnswer(func(_ http.ResponseWriter, r *http.Request) {
		close(asking)
		<-r.Context().Done() // answers only when the caller goes
	})
	before := echoGoroutines()
	p := newEchoProvider(t, echo.Srv.URL)
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
	echo := echowatchtest.New(t)
	before := echoGoroutines()
	p := newEchoProvider(t, echo.Srv.URL)
	if _, err := p.ListByTag(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := echoGoroutines() - before; n != 0 {
		t.Errorf("%d echo goroutines before any instance was read", n)
	}
	_ = p.Close()
	if n := echo.Asked.Load(); n != 0 {
		t.Errorf("the echo was asked %d times by a provider with no instances", n)
	}
}

func TestNoEcho(t *testing.T) {
	echo := echowatchtest.New(t)
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
	if n := echo.Asked.Load(); n != 0 {
		t.Errorf("the echo was asked %d times", n)
	}
}
