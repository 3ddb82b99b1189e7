package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

const (
	testProviderName = "local-test"
	testInstallation = "install-test"
)

// rangeSeq gives every test provider its own /24 inside 127.64.0.0/10, so
// providers built by different tests (or by the conformance suite, one per
// case) never contend for an address.
var rangeSeq atomic.Uint32

func nextRange(bits int) string {
	n := rangeSeq.Add(1)
	return fmt.Sprintf("127.%d.%d.0/%d", 64+(n/256)%64, n%256, bits)
}

// testPort is one port for every instance of the test binary: instances
// differ by address, as VMs would. It is a port the kernel just handed out,
// so nothing well-known is in the way.
var testPort = sync.OnceValue(func() int32 {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
})

// originIP is where every test origin listens (httptest and echo servers
// on loopback): the one destination the test providers allow, since the
// default policy refuses loopback.
const originIP = "127.0.0.1"

// newTestProvider builds a provider on a fresh range that allows exactly
// originIP as a destination, and CONNECT to connectPorts (none: 443 only),
// and closes it when the test ends.
func newTestProvider(t testing.TB, installation string, bits int, connectPorts ...int32) *Provider {
	t.Helper()
	cfg := Config{BindCIDR: nextRange(bits)}
	cfg.AllowedDestinations = []string{originIP + "/32"}
	cfg.ConnectPorts = connectPorts
	p, err := New(testProviderName, cfg, provider.Options{InstallationID: installation})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// logs captures a provider's log lines at every tier.
func logCtx(verbosity int) (context.Context, *testenv.LogLines) {
	l := &testenv.LogLines{}
	return l.Context(verbosity), l
}

// request is a valid request for a Proxy named proxyName.
func request(proxyName string, ranges ...string) provider.CreateRequest {
	uid := "uid-" + proxyName
	return provider.CreateRequest{
		Name:                provider.InstanceName("ns", proxyName, uid, "s"),
		Namespace:           "ns",
		ProxyName:           proxyName,
		UID:                 uid,
		Port:                testPort(),
		AllowedSourceRanges: ranges,
	}
}

func mustCreate(t testing.TB, p *Provider, req provider.CreateRequest) provider.Instance {
	t.Helper()
	inst, err := p.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create(%q): %v", req.Name, err)
	}
	return inst
}

// wantClass fails unless err carries class.
func wantClass(t testing.TB, what string, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Errorf("%s: error %v, want class %s", what, err, provider.ClassName(class))
	}
}

// bounded is p behind the method boundary the registry puts every provider
// behind, which names errors and writes the outcome lines.
func bounded(p *Provider) provider.Provider {
	return provider.WithBoundary(testProviderName, Type, p).Provider
}

// wantProviderError fails unless err is a *provider.Error naming our
// provider and op (so err came through bounded).
func wantProviderError(t testing.TB, err error, op string) {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is a %T, not a *provider.Error", err, err)
	}
	if pe.Provider != testProviderName || pe.Op != op {
		t.Errorf("error names provider %q op %q, want %q and %q", pe.Provider, pe.Op, testProviderName, op)
	}
}

// plant records an instance behind the provider's back, as the conformance
// Backend does: marks nil means no marks; port 0 means no listener (a
// Stopped instance).
func plant(t testing.TB, p *Provider, name string, marks *provider.Marks, port int32) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.instances[name]; ok {
		t.Fatalf("plant(%q): an instance with that name exists", name)
	}
	in := &instance{name: name, createdAt: time.Now().UTC()}
	if marks != nil {
		in.marks = *marks
	}
	if port > 0 {
		if err := p.start(context.Background(), logr.Discard(), in, port, &acl{}); err != nil {
			t.Fatalf("plant(%q): %v", name, err)
		}
	}
	p.instances[name] = in
}

// stopServer closes an instance's listener behind the provider's back and
// waits for it to drain; forget also drops the record.
func stopServer(t testing.TB, p *Provider, id string, forget bool) {
	t.Helper()
	name, err := parseID(id)
	if err != nil {
		t.Fatalf("stopServer(%q): %v", id, err)
	}
	p.mu.Lock()
	in, ok := p.instances[name]
	var srv *server
	if ok {
		p.release(in)
		srv, in.srv = in.srv, nil
		if forget {
			delete(p.instances, name)
		}
	}
	p.mu.Unlock()
	if srv != nil {
		srv.close()
		<-srv.finished
	}
}

func optsFor(installation string) provider.Options {
	return provider.Options{InstallationID: installation}
}

func itoa(port int32) string { return strconv.Itoa(int(port)) }

func mustAddr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("%q is not an IP: %v", s, err)
	}
	return a
}

// portOf is the port of a host:port or of a URL's host.
func portOf(t testing.TB, hostport string) int32 {
	t.Helper()
	if u, err := url.Parse(hostport); err == nil && u.Host != "" {
		hostport = u.Host
	}
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("%q has no port: %v", hostport, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}
