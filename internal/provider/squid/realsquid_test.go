package squid

// Every test here sends traffic to loopback only. The refused destinations
// include private addresses: Squid must refuse them in http_access, before
// any connection (the 403 page says ERR_ACCESS_DENIED). As a safety net,
// the test config routes every request for a non-loopback destination that
// got past http_access to a loopback catch peer instead of the network, so
// a broken rule fails the test without a packet leaving the host.

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// Addresses of the test: the admitted client, the one destination the
// entry allows, and an address nobody allowed.
const (
	clientIP  = "127.0.0.2"
	allowedIP = "127.0.0.5"
	deniedIP  = "127.0.0.1"
)

// safetyNet is appended to the generated config in tests only: anything
// for a non-loopback destination goes to the loopback catch peer.
func safetyNet(catchPort string) string {
	return strings.Join([]string{
		"# test only: never a direct connection outside loopback",
		"cache_peer 127.0.0.1 parent " + catchPort + " 0 no-query no-digest no-netdb-exchange name=catch",
		"acl test_loopback_dst dst 127.0.0.0/8 ::1",
		"always_direct allow test_loopback_dst",
		"never_direct allow all",
		"",
	}, "\n")
}

type answer struct {
	code      int
	squidErr  string // X-Squid-Error: why Squid answered itself
	body      string
	transport error
}

// via sends one request through the proxy from source: a GET of target,
// or, with connect, a CONNECT to target (host:port) whose status is read.
func via(t *testing.T, proxy, source, target string, connect bool, tlsConf *tls.Config) answer {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 10 * time.Second}
	if connect {
		conn, err := d.Dial("tcp4", proxy)
		if err != nil {
			t.Fatalf("dial proxy: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT %s via %s: %v", target, proxy, err)
		}
		return answer{code: resp.StatusCode, squidErr: resp.Header.Get("X-Squid-Error")}
	}
	c := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}),
			DialContext: d.DialContext, DisableKeepAlives: true, TLSClientConfig: tlsConf},
		Timeout: 30 * time.Second,
	}
	resp, err := c.Get(target)
	if err != nil {
		return answer{transport: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, squidErr: resp.Header.Get("X-Squid-Error"), body: string(b)}
}

// TestDestinationsDeniedByDefault_RealSquid: with the generated config,
// the real Squid refuses loopback, private, link-local and unique-local
// destinations and CONNECT to any port but the allowed ones, in
// http_access, while the destination the entry allows passes.
func TestDestinationsDeniedByDefault_RealSquid(t *testing.T) {
	plain, plainHits := testenv.CountingOrigin(t, allowedIP, "allowed origin", false)
	secure, secureHits := testenv.CountingOrigin(t, allowedIP, "allowed tls origin", true)
	deniedSrv, deniedHits := testenv.CountingOrigin(t, deniedIP, "loopback origin", false)
	denied := deniedSrv.URL
	catch, catchHits := testenv.CountingOrigin(t, "127.0.0.1", "caught", false)
	deniedPort := strings.TrimPrefix(denied, "http://"+deniedIP+":")
	_, catchPort, _ := net.SplitHostPort(strings.TrimPrefix(catch.URL, "http://"))
	_, securePort, _ := net.SplitHostPort(strings.TrimPrefix(secure.URL, "https://"))
	_, plainPort, _ := net.SplitHostPort(strings.TrimPrefix(plain.URL, "http://"))

	connectPort, err := strconv.Atoi(securePort)
	if err != nil {
		t.Fatal(err)
	}
	settings := egress.Settings{AllowedDestinations: []string{allowedIP + "/32"}, ConnectPorts: []int32{443, int32(connectPort)}}
	if errs := settings.Validate(nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	dirs := squidtest.NewDirs(t)
	sp := Params{
		ListenAddr: "127.0.0.1", Port: testenv.FreePort(t),
		Clients:      []netip.Prefix{netip.MustParsePrefix(clientIP + "/32")},
		Destinations: settings.Policy(),
		PidFile:      dirs.PidFile(), CoredumpDir: dirs.Run, EffectiveUser: dirs.EffectiveUser,
	}
	proxy := squidtest.Addr(sp.ListenAddr, sp.Port)
	squidtest.Start(t, dirs, Config(sp)+safetyNet(catchPort), proxy)

	// Permitted: the address the entry allows, plain and through CONNECT.
	if a := via(t, proxy, clientIP, plain.URL+"/", false, nil); a.code != http.StatusOK || a.body != "allowed origin" {
		t.Errorf("GET %s (allowed destination): %+v, want 200 and the page", plain.URL, a)
	}
	pool := x509.NewCertPool()
	pool.AddCert(secure.Certificate())
	// httptest's certificate names example.com, not 127.0.0.5.
	tlsConf := &tls.Config{RootCAs: pool, ServerName: "example.com"}
	if a := via(t, proxy, clientIP, secure.URL+"/", false, tlsConf); a.code != http.StatusOK || a.body != "allowed tls origin" {
		t.Errorf("GET %s through CONNECT (allowed destination and port): %+v, want 200 and the page", secure.URL, a)
	}

	// Refused in http_access: Squid answers 403 ERR_ACCESS_DENIED itself.
	for _, tc := range []struct {
		target  string
		connect bool
	}{
		{denied + "/", false},                                    // loopback, not allowed
		{"http://localhost:" + deniedPort + "/", false},          // a name that resolves to loopback
		{"http://[::ffff:127.0.0.1]:" + deniedPort + "/", false}, // IPv4-mapped loopback
		{"http://[::1]:" + deniedPort + "/", false},
		{"http://10.0.0.1/", false},
		{"http://172.16.0.1/", false},
		{"http://192.168.1.1/", false},
		{"http://100.64.0.1/", false},
		{"http://169.254.169.254/latest/meta-data/", false},
		{"http://[fd00:ec2::254]/", false},
		{"http://[fe80::1]/", false},
		{"http://0.0.0.0:" + deniedPort + "/", false},
		{"10.0.0.1:443", true},
		{"[fd00::1]:443", true},
		{net.JoinHostPort(deniedIP, deniedPort), true},
		{net.JoinHostPort(allowedIP, plainPort), true}, // allowed address, not a connect port
		{"http://" + allowedIP + ":25/", false},        // allowed address, not a safe port
		{"http://" + net.JoinHostPort(allowedIP, "22") + "/", false},
	} {
		a := via(t, proxy, clientIP, tc.target, tc.connect, nil)
		if a.code != http.StatusForbidden || !strings.HasPrefix(a.squidErr, "ERR_ACCESS_DENIED") {
			t.Errorf("%s (connect=%t): %d %q %v, want 403 ERR_ACCESS_DENIED from http_access", tc.target, tc.connect, a.code, a.squidErr, a.transport)
		}
	}
	// A client outside the admitted range is refused, even to the allowed
	// destination.
	if a := via(t, proxy, deniedIP, plain.URL+"/", false, nil); a.code != http.StatusForbidden {
		t.Errorf("GET from %s (not an admitted client): %+v, want 403", deniedIP, a)
	}

	if n := deniedHits.Load(); n != 0 {
		t.Errorf("the loopback origin nobody allowed was reached %d times", n)
	}
	if n := catchHits.Load(); n != 0 {
		t.Errorf("%d requests for non-loopback destinations got past http_access (caught by the test's peer)", n)
	}
	if plainHits.Load() != 1 || secureHits.Load() != 1 {
		t.Errorf("allowed origins reached %d and %d times, want once each", plainHits.Load(), secureHits.Load())
	}
}

// TestRealSquid_Clients: the same rules forward for an admitted source and
// refuse any other.
func TestRealSquid_Clients(t *testing.T) {
	origin, _ := testenv.CountingOrigin(t, allowedIP, "hello through squid", false)
	dirs := squidtest.NewDirs(t)
	sp := Params{
		ListenAddr: "127.0.0.1", Port: testenv.FreePort(t),
		// Only 127.0.0.2 is admitted; 127.0.0.1 is not.
		Clients:      []netip.Prefix{netip.MustParsePrefix(clientIP + "/32")},
		Destinations: (&egress.Settings{AllowedDestinations: []string{allowedIP + "/32"}}).Policy(),
		PidFile:      dirs.PidFile(), CoredumpDir: dirs.Run, EffectiveUser: dirs.EffectiveUser,
	}
	proxy := squidtest.Addr(sp.ListenAddr, sp.Port)
	squidtest.Start(t, dirs, Config(sp), proxy)
	if a := via(t, proxy, clientIP, origin.URL, false, nil); a.code != http.StatusOK || a.body != "hello through squid" {
		t.Errorf("fetch from admitted %s: %+v, want 200 and the page", clientIP, a)
	}
	if a := via(t, proxy, "127.0.0.1", origin.URL, false, nil); a.code != http.StatusForbidden {
		t.Errorf("fetch from 127.0.0.1 (not in allowedSourceRanges): %+v, want 403", a)
	}
}
