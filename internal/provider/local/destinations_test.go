package local

// Every connection here goes to loopback. The refused destinations include
// private addresses: the proxy must refuse them before dialling, which the
// test's dial seam records (and, as a safety net, it refuses to dial
// anything outside loopback itself, so a broken policy fails the test
// without a packet leaving the host). Host names resolve through a fake
// resolver, never the system's.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// connectStatus sends CONNECT target through inst and returns the status
// of the answer without reading a tunnel's (endless) body.
func connectStatus(t *testing.T, inst provider.Instance, target string) int {
	t.Helper()
	conn, err := net.Dial("tcp4", proxyAddr(inst))
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return resp.StatusCode
}

// netSeams records every lookup and dial of a provider's instances.
type netSeams struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr // the fake DNS
	flips   map[string][]netip.Addr // a second answer, for rebinding
	lookups map[string]int
	dials   []netip.AddrPort
}

func (n *netSeams) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lookups[host]++
	if second, ok := n.flips[host]; ok && n.lookups[host] > 1 {
		return second, nil
	}
	addrs, ok := n.names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

func (n *netSeams) dial(ctx context.Context, remote netip.AddrPort, local netip.Addr) (net.Conn, error) {
	n.mu.Lock()
	n.dials = append(n.dials, remote)
	n.mu.Unlock()
	if !remote.Addr().IsLoopback() {
		return nil, fmt.Errorf("test safety net: refusing to dial %s outside loopback", remote)
	}
	d := net.Dialer{}
	if local.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
	}
	return d.DialContext(ctx, "tcp", remote.String())
}

func (n *netSeams) snapshot() ([]netip.AddrPort, map[string]int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := map[string]int{}
	for k, v := range n.lookups {
		l[k] = v
	}
	return append([]netip.AddrPort(nil), n.dials...), l
}

// TestDestinationsDeniedByDefault: the local provider's proxy refuses, with
// a 403 naming why and before any dial, destinations in loopback,
// link-local, private, shared and unique-local ranges (as IP literals, as
// names that resolve there, and as names with one such address among
// allowed ones), plain requests to unsafe ports and CONNECT to any port but
// the connect ports; the destination the entry allows passes, dialled at
// the address that was checked.
func TestDestinationsDeniedByDefault(t *testing.T) {
	const allowedIP = "127.0.0.5"
	plain, plainHits := testenv.CountingOrigin(t, allowedIP, "allowed origin", false)
	secure, secureHits := testenv.CountingOrigin(t, allowedIP, "allowed tls origin", true)
	denied, deniedHits := testenv.CountingOrigin(t, "127.0.0.1", "loopback origin", false)
	plainPort, securePort, deniedPort := portOf(t, plain.URL), portOf(t, secure.URL), portOf(t, denied.URL)

	cfg := Config{BindCIDR: nextRange(24)}
	cfg.AllowedDestinations = []string{allowedIP + "/32"}
	cfg.ConnectPorts = []int32{443, securePort}
	p, err := New(testProviderName, cfg, optsFor(testInstallation))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	a := func(s ...string) []netip.Addr {
		out := make([]netip.Addr, len(s))
		for i, x := range s {
			out[i] = netip.MustParseAddr(x)
		}
		return out
	}
	seams := &netSeams{
		names: map[string][]netip.Addr{
			"allowed.test": a(allowedIP),
			"flip.test":    a(allowedIP),
			"localhost":    a("127.0.0.1", "::1"),
			"inside.test":  a("10.1.2.3"),
			"rebind.test":  a(allowedIP, "10.0.0.1"), // one internal address among allowed ones
		},
		// Asked again, flip.test would point inside: a proxy that resolved
		// twice (check, then dial by name) would be steered there.
		flips:   map[string][]netip.Addr{"flip.test": a("10.0.0.1")},
		lookups: map[string]int{},
	}
	p.upstream.lookup, p.upstream.dial = seams.lookup, seams.dial
	ctx, logs := logCtx(1)
	inst, err := p.Create(ctx, request("dest"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(secure.Certificate())
	// httptest's certificate names example.com, not 127.0.0.5.
	client := proxyClient(t, inst, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"}})
	get := func(target string) (int, string) {
		t.Helper()
		resp, err := client.Get(target)
		if err != nil {
			t.Fatalf("GET %s through the proxy: %v", target, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	// Permitted: the address the entry allows, as a literal and by name,
	// plain and through CONNECT.
	for _, target := range []string{plain.URL + "/", fmt.Sprintf("http://allowed.test:%d/", plainPort), fmt.Sprintf("http://flip.test:%d/", plainPort)} {
		if code, body := get(target); code != http.StatusOK || body != "allowed origin" {
			t.Errorf("GET %s (allowed destination) = %d %q, want 200 and the page", target, code, body)
		}
	}
	if code, body := get(secure.URL + "/"); code != http.StatusOK || body != "allowed tls origin" {
		t.Errorf("GET %s through CONNECT (allowed destination and port) = %d %q", secure.URL, code, body)
	}
	dialsBefore, _ := seams.snapshot()

	// Refused with 403 before any dial.
	for _, tc := range []struct{ target, why string }{
		{denied.URL + "/", "127.0.0.0/8, loopback"},
		{fmt.Sprintf("http://localhost:%d/", deniedPort), "127.0.0.0/8, loopback"},
		{fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", deniedPort), "127.0.0.0/8, loopback"},
		{fmt.Sprintf("http://[::1]:%d/", deniedPort), "::1/128, loopback"},
		{fmt.Sprintf("http://0.0.0.0:%d/", deniedPort), "0.0.0.0/32"},
		{"http://10.0.0.1/", "10.0.0.0/8, private-use, RFC 1918"},
		{"http://[64:ff9b::7f00:1]/", "64:ff9b::/96, NAT64"},
		{"http://198.51.100.7/", "198.51.100.0/24, documentation"},
		{"http://nowhere.test/", "the name does not resolve"},
		{"http://172.16.0.1/", "172.16.0.0/12"},
		{"http://192.168.1.1/", "192.168.0.0/16"},
		{"http://100.64.0.1/", "100.64.0.0/10"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.0.0/16, link-local (cloud metadata"},
		{"http://[fd00:ec2::254]/", "fc00::/7"},
		{"http://[fe80::1]/", "fe80::/10"},
		{"http://inside.test/", "10.0.0.0/8"},
		{fmt.Sprintf("http://rebind.test:%d/", plainPort), "10.0.0.0/8"},
		{"http://" + allowedIP + ":25/", "not one of the ports plain requests may reach"},
	} {
		code, body := get(tc.target)
		want := textRefused
		if strings.Contains(tc.why, "does not resolve") {
			want = textUnresolved
		}
		// The client reads the fixed text of the refusal's class; why,
		// with the addresses, is for the log only.
		if code != http.StatusForbidden || body != want+"\n" {
			t.Errorf("GET %s = %d %q, want 403 %q", tc.target, code, body, want)
		}
		if len(logs.Find("refused destination", tc.why)) == 0 {
			t.Errorf("GET %s: no V(1) line says %q", tc.target, tc.why)
		}
	}
	for _, tc := range []string{
		net.JoinHostPort(allowedIP, fmt.Sprint(plainPort)), // allowed address, not a connect port
		"127.0.0.1:443", "10.0.0.1:443", "[fd00::1]:443", "rebind.test:443", "inside.test:443",
	} {
		if code := connectStatus(t, inst, tc); code != http.StatusForbidden {
			t.Errorf("CONNECT %s = %d, want 403", tc, code)
		}
	}

	dials, lookups := seams.snapshot()
	if len(dials) != len(dialsBefore) {
		t.Errorf("refused destinations were dialled: %v", dials[len(dialsBefore):])
	}
	for _, d := range dials {
		if d.Addr() != netip.MustParseAddr(allowedIP) || (d.Port() != uint16(plainPort) && d.Port() != uint16(securePort)) {
			t.Errorf("dialled %s; only the allowed origins may be", d)
		}
	}
	if len(dialsBefore) == 0 {
		t.Errorf("no dial recorded for the permitted fetches: the seam is not in the path")
	}
	if lookups["flip.test"] != 1 || lookups["rebind.test"] != 2 || lookups["allowed.test"] != 1 {
		t.Errorf("lookups %v: want every name resolved once per request (rebind.test twice: GET and CONNECT)", lookups)
	}
	if n := deniedHits.Load(); n != 0 {
		t.Errorf("the loopback origin nobody allowed was reached %d times", n)
	}
	if plainHits.Load() != 3 || secureHits.Load() != 1 {
		t.Errorf("allowed origins reached %d and %d times, want 3 and 1", plainHits.Load(), secureHits.Load())
	}
	if lines := logs.Find("refused destination", `"target"="10.0.0.1"`, "RFC 1918"); len(lines) != 1 || !strings.Contains(lines[0], `"level"=1`) {
		t.Errorf("want one V(1) line for the refused 10.0.0.1 naming why, found %q", lines)
	}
}

// An entry that allows nothing refuses this host's own origins: the
// default entry, as deployed, is no way into the host.
func TestDestinationsDeniedByDefault_DefaultEntry(t *testing.T) {
	origin, hits := testenv.CountingOrigin(t, "127.0.0.1", "loopback origin", false)
	p, err := New(testProviderName, Config{BindCIDR: nextRange(24)}, optsFor(testInstallation))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ctx, logs := logCtx(1)
	inst, err := p.Create(ctx, request("default"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := proxyClient(t, inst, nil).Get(origin.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || string(body) != textRefused+"\n" {
		t.Errorf("GET %s with the default entry = %d %q, want 403 and the refusal's fixed text", origin.URL, resp.StatusCode, body)
	}
	if len(logs.Find("refused destination", "allowedDestinations")) == 0 {
		t.Errorf("GET %s with the default entry: no V(1) line points at allowedDestinations", origin.URL)
	}
	if code := connectStatus(t, inst, origin.Listener.Addr().String()); code != http.StatusForbidden {
		t.Errorf("CONNECT %s with the default entry = %d, want 403", origin.Listener.Addr(), code)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the origin was reached %d times", n)
	}
}
