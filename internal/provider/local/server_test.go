package local

// Every test here sends traffic to loopback addresses only: the instances
// listen in 127.64.0.0/10 and every origin is an httptest server or a
// listener on 127.0.0.1.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

func proxyAddr(inst provider.Instance) string { return net.JoinHostPort(inst.IP, itoa(testPort())) }

// proxyClient is an HTTP client that uses inst as its proxy.
func proxyClient(t testing.TB, inst provider.Instance, base *http.Transport) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	if base != nil {
		tr = base.Clone()
	}
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr(inst)})
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// rawRequest writes one request to the proxy by hand, for full control of
// the headers, and reads the answer.
func rawRequest(t *testing.T, inst provider.Instance, raw string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp4", proxyAddr(inst))
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	method, _, _ := strings.Cut(raw, " ")
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestForwardPlainHTTP(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Method", r.Method)
		fmt.Fprintf(w, "%s %s body=%s", r.URL.Path, r.URL.RawQuery, body)
	}))
	defer origin.Close()
	p := newTestProvider(t, testInstallation, 24)
	client := proxyClient(t, mustCreate(t, p, request("plain")), nil)

	resp, err := client.Get(origin.URL + "/path?q=1")
	if err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "/path q=1 body=" {
		t.Errorf("GET = %d %q", resp.StatusCode, body)
	}

	resp, err = client.Post(origin.URL+"/upload", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatalf("POST through the proxy: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Method") != "POST" || string(body) != "/upload  body=payload" {
		t.Errorf("POST = %q (method %q)", body, resp.Header.Get("X-Method"))
	}
}

// Hop-by-hop headers stop at the proxy both ways; end-to-end ones pass but
// for the forwarding headers (egress.HiddenRequestHeaders), which would
// tell the destination about the clients and their networks, and the proxy
// adds none of its own.
func TestForwardHopByHopHeaders(t *testing.T) {
	seen := make(chan http.Header, 1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "hop")
		w.Header().Set("X-Resp-End", "end")
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	p := newTestProvider(t, testInstallation, 24)
	inst := mustCreate(t, p, request("hops"))
	host := strings.TrimPrefix(origin.URL, "http://")

	resp, body := rawRequest(t, inst, "GET "+origin.URL+"/ HTTP/1.1\r\n"+
		"Host: "+host+"\r\n"+
		"Connection: X-Hop\r\n"+
		"X-Hop: hop\r\n"+
		"Proxy-Connection: keep-alive\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"X-End: end\r\n"+
		"X-Forwarded-For: 192.0.2.7\r\n"+
		"X-Forwarded-Host: intranet.internal\r\n"+
		"X-Forwarded-Proto: https\r\n"+
		"Forwarded: for=192.0.2.7;host=intranet.internal\r\n"+
		"Via: 1.1 inner-proxy\r\n"+
		"\r\n")
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("response %d %q", resp.StatusCode, body)
	}
	got := <-seen
	for _, h := range []string{"X-Hop", "Proxy-Connection", "Proxy-Authorization", "Keep-Alive"} {
		if v := got.Get(h); v != "" {
			t.Errorf("origin received hop-by-hop %s: %q", h, v)
		}
	}
	if got.Get("X-End") != "end" {
		t.Errorf("origin lost end-to-end X-End: %v", got)
	}
	for _, h := range egress.HiddenRequestHeaders {
		if v := got.Values(h); len(v) != 0 {
			t.Errorf("origin got %s %q, want it removed", h, v)
		}
	}
	if v := resp.Header.Get("X-Resp-Hop"); v != "" {
		t.Errorf("client received the origin's hop-by-hop X-Resp-Hop: %q", v)
	}
	if resp.Header.Get("X-Resp-End") != "end" {
		t.Errorf("client lost end-to-end X-Resp-End: %v", resp.Header)
	}
}

// HTTPS goes through a CONNECT tunnel, end to end TLS with the origin.
func TestConnectTunnelTLS(t *testing.T) {
	origin := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls=%t", r.TLS != nil)
	}))
	defer origin.Close()
	ctx, logs := logCtx(2)
	p := newTestProvider(t, testInstallation, 24, portOf(t, origin.URL))
	inst, err := p.Create(ctx, request("tls"))
	if err != nil {
		t.Fatal(err)
	}
	client := proxyClient(t, inst, origin.Client().Transport.(*http.Transport))
	for i := range 2 { // the second request reuses the tunnel
		resp, err := client.Get(origin.URL + "/")
		if err != nil {
			t.Fatalf("GET %d through the tunnel: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "tls=true" {
			t.Errorf("GET %d = %d %q", i, resp.StatusCode, body)
		}
	}
	target := strings.TrimPrefix(origin.URL, "https://")
	if lines := logs.Find("tunnel open", `"target"="`+target+`"`); len(lines) != 1 {
		t.Errorf("want one tunnel to %s in the log, found %q", target, lines)
	}
}

// A client outside allowedSourceRanges gets 403 for plain requests and
// CONNECT alike, the origin is never reached, and the refusal is logged at
// V(1) with the source address.
func TestACLRefusesClientOutsideRanges(t *testing.T) {
	var hits atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer origin.Close()
	ctx, logs := logCtx(1)
	p := newTestProvider(t, testInstallation, 24)
	// The test client is on loopback, so 10.0.0.0/8 alone excludes it.
	inst, err := p.Create(ctx, request("acl", "10.0.0.0/8"))
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(origin.URL, "http://")
	for _, raw := range []string{
		"GET " + origin.URL + "/ HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
		"CONNECT " + host + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
	} {
		method, _, _ := strings.Cut(raw, " ")
		resp, body := rawRequest(t, inst, raw)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "allowedSourceRanges") {
			t.Errorf("%s from outside the ranges = %d %q, want 403 with a reason", method, resp.StatusCode, body)
		}
		lines := logs.Find("refused client outside allowedSourceRanges", `"method"="`+method+`"`)
		if len(lines) != 1 || !strings.Contains(lines[0], `"source"="127.`) || !strings.Contains(lines[0], `"level"=1`) {
			t.Errorf("want one V(1) refusal of %s naming the source, found %q", method, lines)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the origin was reached %d times", n)
	}

	// Adopting with the request's new ranges applies them at once.
	req := request("acl")
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatalf("adopting with loopback-only ranges: %v", err)
	}
	resp, err := proxyClient(t, inst, nil).Get(origin.URL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after adoption with default ranges: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestACLAllows(t *testing.T) {
	cases := []struct {
		ranges []string
		allow  []string
		refuse []string
	}{
		{
			ranges: nil, // loopback only, never everyone
			allow:  []string{"127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1"},
			refuse: []string{"10.1.2.3", "192.168.1.1", "0.0.0.0", "::", "2001:db8::1"},
		},
		{
			ranges: []string{"10.0.0.0/8"},
			allow:  []string{"10.1.2.3", "::ffff:10.1.2.3"},
			refuse: []string{"127.0.0.1", "::1", "11.0.0.1"},
		},
		{
			ranges: []string{"10.0.0.0/8", "2001:db8::/32"},
			allow:  []string{"10.9.9.9", "2001:db8::1"},
			refuse: []string{"127.0.0.1"},
		},
		{
			ranges: []string{"10.0.0.5/32"}, // one host, as written
			allow:  []string{"10.0.0.5"},
			refuse: []string{"10.0.0.4", "10.9.9.9"},
		},
		{
			ranges: []string{"0.0.0.0/1"},
			allow:  []string{"127.0.0.1", "100.0.0.1"},
			refuse: []string{"203.0.113.9", "::1"},
		},
	}
	for _, tc := range cases {
		a, bad := parseACL(egress.Default(), provider.CreateRequest{AllowedSourceRanges: tc.ranges})
		if len(bad) > 0 {
			t.Fatalf("parseACL(%q): %v", tc.ranges, bad)
		}
		for _, s := range tc.allow {
			if !a.allows(netip.MustParseAddr(s)) {
				t.Errorf("ranges %q refuse %s", tc.ranges, s)
			}
		}
		for _, s := range tc.refuse {
			if a.allows(netip.MustParseAddr(s)) {
				t.Errorf("ranges %q admit %s", tc.ranges, s)
			}
		}
	}
	// Ranges that together admit every address of a family are an open
	// proxy, refused as a /0 is.
	for _, ranges := range [][]string{{"0.0.0.0/0"}, {"0.0.0.0/1", "128.0.0.0/1"}, {"::/1", "8000::/1", "10.0.0.0/8"}} {
		if _, bad := parseACL(egress.Default(), provider.CreateRequest{AllowedSourceRanges: ranges}); len(bad) != 1 ||
			!strings.Contains(bad[0], "allowedSourceRanges") || !strings.Contains(bad[0], "open proxy") {
			t.Errorf("parseACL(%q): %q, want one refusal naming allowedSourceRanges as an open proxy", ranges, bad)
		}
	}
}

// openTunnel opens a CONNECT tunnel through inst to target.
func openTunnel(t *testing.T, inst provider.Instance, target string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp4", proxyAddr(inst))
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return conn, br
}

// echoServer echoes on 127.0.0.1 and reports each connection's end.
func echoServer(t *testing.T) (addr string, ended <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(c, c)
				c.Close()
				done <- struct{}{}
			}()
		}
	}()
	return ln.Addr().String(), done
}

// Delete ends an open CONNECT tunnel on both sides before it returns.
func TestDeleteEndsOpenTunnel(t *testing.T) {
	target, ended := echoServer(t)
	p := newTestProvider(t, testInstallation, 24, portOf(t, target))
	inst := mustCreate(t, p, request("tunnel"))
	conn, br := openTunnel(t, inst, target)
	io.WriteString(conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the tunnel: %q %v", buf, err)
	}

	if err := p.Delete(context.Background(), inst.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	// Delete returned only after the handler, so the client side is closed
	// already: the read ends instead of waiting for data.
	if n, err := br.Read(buf); err == nil {
		t.Errorf("read on the tunnel after Delete returned %d bytes and no error", n)
	}
	<-ended // and the origin side was closed too
	if _, err := p.Get(context.Background(), inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want NotFound", err)
	}
}

// Delete cancels a forwarded request in flight: the origin sees its request
// context end and the client does not get a success.
func TestDeleteCancelsInFlightRequest(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(cancelled)
	}))
	defer origin.Close()
	p := newTestProvider(t, testInstallation, 24)
	inst := mustCreate(t, p, request("inflight"))
	client := proxyClient(t, inst, nil)
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Get(origin.URL)
		done <- result{resp, err}
	}()
	<-started
	if err := p.Delete(context.Background(), inst.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	<-cancelled
	if r := <-done; r.err == nil {
		r.resp.Body.Close()
		if r.resp.StatusCode == http.StatusOK {
			t.Errorf("the request in flight succeeded across Delete")
		}
	}
}

func TestUpstreamUnreachableIsBadGateway(t *testing.T) {
	// A loopback port nobody listens on: listen, note it, close.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := newTestProvider(t, testInstallation, 24, portOf(t, dead))
	inst := mustCreate(t, p, request("unreachable"))

	resp, err := proxyClient(t, inst, nil).Get("http://" + dead + "/")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || string(body) != textCannotReach+"\n" {
		t.Errorf("GET to a dead origin = %d %q, want 502 and the fixed text (no address, no dial error)", resp.StatusCode, body)
	}
	resp, body2 := rawRequest(t, inst, "CONNECT "+dead+" HTTP/1.1\r\nHost: "+dead+"\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT to a dead origin = %d %q, want 502", resp.StatusCode, body2)
	}
}

func TestNonProxyRequestsAreBadRequests(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	inst := mustCreate(t, p, request("origin-form"))
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: " + proxyAddr(inst) + "\r\n\r\n",
		"CONNECT 127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", // no port
	} {
		if resp, body := rawRequest(t, inst, raw); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q = %d %q, want 400", strings.SplitN(raw, "\r\n", 2)[0], resp.StatusCode, body)
		}
	}
	// Another scheme is the policy's refusal, as Squid's web_protos rule
	// makes it (it would speak FTP, logging in as "Squid@").
	if resp, body := rawRequest(t, inst, "GET ftp://127.0.0.1/file HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); resp.StatusCode != http.StatusForbidden || body != textRefused+"\n" {
		t.Errorf("GET ftp://127.0.0.1/file = %d %q, want 403 and the policy's refusal", resp.StatusCode, body)
	}
}

// BenchmarkForwardHTTP measures plain requests through one instance to a
// loopback origin over kept-alive connections. Allocations count the
// client, the proxy and the origin, all in this process.
func BenchmarkForwardHTTP(b *testing.B) {
	payload := strings.Repeat("x", 1024)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, payload)
	}))
	defer origin.Close()
	p := newTestProvider(b, testInstallation, 24)
	client := proxyClient(b, mustCreate(b, p, request("bench")), nil)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Get(origin.URL)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n != int64(len(payload)) {
			b.Fatalf("got %d, %d bytes", resp.StatusCode, n)
		}
	}
}

// Each instance reaches a loopback origin from its own address, for plain
// requests and tunnels alike, so two Proxies show two egress IPs.
func TestEgressFromInstanceAddress(t *testing.T) {
	seen := make(chan string, 4)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		seen <- host
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	tlsOrigin := httptest.NewTLSServer(origin.Config.Handler)
	defer tlsOrigin.Close()

	p := newTestProvider(t, testInstallation, 24, portOf(t, tlsOrigin.URL))
	for _, name := range []string{"egress-a", "egress-b"} {
		inst := mustCreate(t, p, request(name))
		pool := x509.NewCertPool()
		pool.AddCert(tlsOrigin.Certificate())
		client := proxyClient(t, inst, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
		for _, url := range []string{origin.URL, tlsOrigin.URL} {
			resp, err := client.Get(url)
			if err != nil {
				t.Fatalf("%s via %s: %v", url, inst.IP, err)
			}
			resp.Body.Close()
			if got := <-seen; got != inst.IP {
				t.Errorf("%s via instance %s: origin saw %s", url, inst.IP, got)
			}
		}
	}
}

// TestIdleInstanceHoldsNoForwarder: an instance that never forwarded a
// plain request holds no reverse proxy or transport (a fleet's listeners
// mostly sit idle, and each pair is a few KiB), and no HTTP/2 server state;
// the first request makes them.
func TestIdleInstanceHoldsNoForwarder(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer origin.Close()
	p := newTestProvider(t, testInstallation, 24)
	inst := mustCreate(t, p, request("idle"))
	srv := func() *server {
		p.mu.Lock()
		defer p.mu.Unlock()
		name, _ := parseID(inst.ID)
		return p.instances[name].srv
	}()
	srv.fwdMu.Lock()
	made := srv.forward != nil || srv.transport != nil
	srv.fwdMu.Unlock()
	if made {
		t.Error("a new instance holds a forwarder before any request")
	}
	if srv.hs.TLSNextProto == nil {
		t.Error("the server would set up HTTP/2 (TLSNextProto is nil)")
	}
	resp, err := proxyClient(t, inst, nil).Get(origin.URL)
	if err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("GET = %d %q", resp.StatusCode, body)
	}
	srv.fwdMu.Lock()
	made = srv.forward != nil && srv.transport != nil
	srv.fwdMu.Unlock()
	if !made {
		t.Error("the first request made no forwarder")
	}
}
