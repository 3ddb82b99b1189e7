package squid

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestRealSquid_ServingProbe: the guest's reporter (the real script) asks
// the real Squid from 127.0.0.1, which is not an admitted client here;
// Squid answers it itself (403, its own error page), the report says
// serving, and the question is no access log line, while an admitted
// client's request is one. Without ServingProbe the same question is
// logged, so the check can fail.
func TestRealSquid_ServingProbe(t *testing.T) {
	origin, _ := testenv.CountingOrigin(t, allowedIP, "hello through squid", false)
	for _, probe := range []bool{true, false} {
		t.Run("ServingProbe="+strconv.FormatBool(probe), func(t *testing.T) {
			dirs := squidtest.NewDirs(t)
			sp := Params{
				ListenAddr: "127.0.0.1", Port: testenv.FreePort(t),
				Clients:      []netip.Prefix{netip.MustParsePrefix(clientIP + "/32")},
				Destinations: (&egress.Settings{AllowedDestinations: []string{allowedIP + "/32"}}).Policy(),
				PidFile:      dirs.PidFile(), CoredumpDir: dirs.Run, EffectiveUser: dirs.EffectiveUser,
				ServingProbe: probe,
			}
			proxy := squidtest.Addr(sp.ListenAddr, sp.Port)
			squidtest.Start(t, dirs, Config(sp), proxy)

			report := runReporter(t, sp.Port)
			if !report.Serving || report.Answered.IsZero() {
				t.Fatalf("the reporter's report with the real Squid: %+v", report)
			}
			// An admitted client's request, which is logged: once its line
			// is there, the reporter's would be too.
			if a := via(t, proxy, clientIP, origin.URL, false, nil); a.code != http.StatusOK {
				t.Fatalf("fetch from admitted %s: %+v", clientIP, a)
			}
			lines := waitAccessLines(t, dirs, 1)
			_, probed := squidtest.FindAccess(lines, map[string]string{"host": servingreport.ProbeHost})
			if probed == probe {
				t.Errorf("ServingProbe %v: the reporter's question logged: %v; access lines: %v", probe, probed, lines)
			}
		})
	}
	// The model agrees that the first line decides the question, so no
	// rule that resolves is reached.
	a, err := squidtest.ParseAccess(Config(Params{Port: 3128, Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ServingProbe: true}))
	if err != nil {
		t.Fatal(err)
	}
	allowed, notes := a.Decide(squidtest.Request{Client: netip.MustParseAddr("127.0.0.1"), Scheme: "http", Host: servingreport.ProbeHost, Port: 80})
	if allowed || notes["rule"] != ruleServingProbe {
		t.Errorf("the model decides the reporter's question: allowed %v, notes %v", allowed, notes)
	}
}

// echoPath is the echo's path in the tests: with a query, which Squid's
// urlpath_regex must match too.
const echoPath = "/ip?format=text"

// TestRealSquid_EgressEcho: the real reporter asks a loopback echo through
// the real Squid from 127.0.0.1, an address the policy refuses and a
// client the entry does not admit, and gets back the address Squid asked
// from; the ask is logged as egress-echo. The allow line is narrow: the
// same URL from an admitted client is refused by the policy (rule
// address), and from 127.0.0.1 the same server by another host, path,
// query or port is refused. Without the echo in the policy the reporter's
// ask is refused, so the test can fail.
func TestRealSquid_EgressEcho(t *testing.T) {
	for _, tc := range []struct {
		name string
		// ip is where the echo listens, and so what it answers; host is
		// the URL's host, ip when empty.
		ip, host string
		inPolicy bool
	}{
		{"IPv4 address host", "127.0.0.1", "", true},
		{"IPv6 address host", "::1", "", true},
		// localhost resolves to loopback from /etc/hosts: a name host,
		// matched as written, still refused to clients by its address.
		{"name host", "127.0.0.1", "localhost", true},
		// Squid lower-cases the request's host and drops a trailing dot.
		{"name host in capitals, with a trailing dot", "127.0.0.1", "LocalHost.", true},
		{"not in the policy", "127.0.0.1", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo, asked := echoServer(t, tc.ip)
			other, otherAsked := echoServer(t, tc.ip)
			host := tc.host
			if host == "" {
				host = tc.ip
			}
			echoURL := "http://" + net.JoinHostPort(host, strconv.Itoa(echo.port)) + echoPath
			e, ferr := egress.ParseEcho(echoURL, field.NewPath("egressIPEcho"))
			if ferr != nil {
				t.Fatal(ferr)
			}
			loggedHost := strings.TrimSuffix(strings.ToLower(e.Host), ".")
			settings := egress.Settings{}
			if tc.inPolicy {
				settings.EgressIPEcho = echoURL
			}
			dest := settings.Policy()
			ip := netip.MustParseAddr(tc.ip)
			if dest.Decide(egress.Destination{Scheme: "http", Host: tc.ip, Port: e.Port, Addrs: []netip.Addr{ip}}) == nil {
				t.Fatalf("the policy admits %s: the test needs the echo at a refused address", ip)
			}
			dirs := squidtest.NewDirs(t)
			sp := Params{
				ListenAddr: "127.0.0.1", Port: testenv.FreePort(t),
				Clients:      []netip.Prefix{netip.MustParsePrefix(clientIP + "/32")},
				Destinations: dest,
				PidFile:      dirs.PidFile(), CoredumpDir: dirs.Run, EffectiveUser: dirs.EffectiveUser,
				ServingProbe: true,
			}
			proxy := squidtest.Addr(sp.ListenAddr, sp.Port)
			squidtest.Start(t, dirs, Config(sp), proxy)

			report := runReporter(t, sp.Port, echoRequestURL(e))
			if !report.Serving {
				t.Fatalf("the reporter's report: %+v", report)
			}
			if !tc.inPolicy {
				if report.EgressIP != "" || !strings.HasPrefix(report.EgressError, "the echo answered: HTTP/1.1 403") {
					t.Errorf("without the echo in the policy: egress IP %q, error %q; want none and the echo answered 403", report.EgressIP, report.EgressError)
				}
				if got := asked(); len(got) != 0 {
					t.Errorf("without the echo in the policy the echo was asked %q", got)
				}
				lines := waitAccessLines(t, dirs, 1)
				if l, ok := squidtest.FindAccess(lines, map[string]string{"client": "127.0.0.1", "host": loggedHost, "status": "403"}); !ok || l["rule"] == ruleEgressEcho {
					t.Errorf("the refused ask's access line: %v; access lines: %v", l, lines)
				}
				return
			}
			if report.EgressIP != tc.ip || report.EgressConfirmed.IsZero() || report.EgressError != "" {
				t.Errorf("the report's egress: IP %q confirmed %v error %q; want %s, confirmed, no error", report.EgressIP, report.EgressConfirmed, report.EgressError, tc.ip)
			}
			if got := asked(); len(got) != 1 || got[0] != echoPath {
				t.Errorf("the echo was asked %q, want once for %q", got, echoPath)
			}

			// Narrow: the same URL from an admitted client is the
			// policy's to decide, and nothing else from 127.0.0.1 passes.
			if a := via(t, proxy, clientIP, e.URL, false, nil); a.code != http.StatusForbidden {
				t.Errorf("GET %s from admitted %s: %+v, want 403", e.URL, clientIP, a)
			}
			// The echo's server by another host: an address is not matched
			// through a name that resolves to it, nor a name through its
			// address.
			alias := "localhost"
			if !e.Addr.IsValid() {
				alias = tc.ip
			}
			refusedFromLoopback := []string{
				"http://" + net.JoinHostPort(alias, strconv.Itoa(int(e.Port))) + echoPath,
				"http://" + e.HostPort() + "/ip",                                          // another path
				"http://" + e.HostPort() + "/ip?format=json",                              // another query
				"http://" + e.HostPort() + echoPath + "&x=1",                              // a longer one
				"http://" + e.HostPort() + "/x" + echoPath,                                // the path inside another
				"http://" + net.JoinHostPort(e.Host, strconv.Itoa(other.port)) + echoPath, // another port
			}
			for _, u := range refusedFromLoopback {
				if a := via(t, proxy, "127.0.0.1", u, false, nil); a.code != http.StatusForbidden {
					t.Errorf("GET %s from 127.0.0.1: %+v, want 403", u, a)
				}
			}
			if got := asked(); len(got) != 1 {
				t.Errorf("the echo was asked %q, want only the reporter's ask", got)
			}
			if got := otherAsked(); len(got) != 0 {
				t.Errorf("the server on another port was asked %q", got)
			}
			lines := waitAccessLines(t, dirs, 2+len(refusedFromLoopback))
			// Squid logs an IPv6 host with its brackets %-encoded.
			if l, ok := squidtest.FindAccess(lines, map[string]string{"client": "127.0.0.1", "port": strconv.Itoa(int(e.Port)), "status": "200"}); !ok ||
				!strings.Contains(l["host"], loggedHost) || l["decision"] != egress.DecisionAllowed || l["rule"] != ruleEgressEcho {
				t.Errorf("the reporter's ask is logged as %v, want allowed by %s; access lines: %v", l, ruleEgressEcho, lines)
			}
			if l, ok := squidtest.FindAccess(lines, map[string]string{"client": clientIP}); !ok || l["status"] != "403" || l["rule"] != egress.RuleAddress {
				t.Errorf("the admitted client's ask is logged as %v, want 403 by %s", l, egress.RuleAddress)
			}
		})
	}
}

// loopbackEcho is an egress-IP echo on loopback.
type loopbackEcho struct {
	*httptest.Server
	port int
	// headers are the header fields of every request so far.
	headers func() []http.Header
}

// echoServer is an egress-IP echo listening on ip: it answers the caller's
// address as text; asked returns the path and query of every request so
// far (srv.headers their header fields). With no IPv6 loopback on the
// machine an IPv6 one skips the test.
func echoServer(t *testing.T, ip string) (srv loopbackEcho, asked func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		if netip.MustParseAddr(ip).Is6() {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Fatal(err)
	}
	var mu sync.Mutex
	var paths []string
	var headers []http.Header
	srv.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.RequestURI())
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host+"\n")
	}))
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	srv.port = ln.Addr().(*net.TCPAddr).Port
	srv.headers = func() []http.Header {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(headers)
	}
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(paths)
	}
}

// echoRequestURL is the URL the reporter is installed with for e
// (servingreport's unit): the Host header's host:port and the path.
func echoRequestURL(e egress.Echo) string { return "http://" + e.HostPort() + e.Path }

// runReporter runs the guest's reporter once against 127.0.0.1:port, with
// args after PORT and PUBLISH (an echo URL).
func runReporter(t *testing.T, port int32, args ...string) servingreport.Report {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "reporter")
	if err := os.WriteFile(script, []byte(servingreport.Reporter()), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "report")
	cmd := exec.Command("bash", append([]string{script, strconv.Itoa(int(port)), string(servingreport.PublishFile)}, args...)...)
	cmd.Env = append(os.Environ(), "EGRESS_PROXY_REPORT="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reporter: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := servingreport.Parse(string(raw))
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	return r
}

// waitAccessLines waits until Squid's output holds at least n access
// lines (Squid writes its log asynchronously).
func waitAccessLines(t *testing.T, dirs squidtest.Dirs, n int) []map[string]string {
	t.Helper()
	var lines []map[string]string
	testenv.EventuallyNil(t, "squid's access lines", func() error {
		out, err := os.ReadFile(dirs.Output())
		if err != nil {
			return err
		}
		if lines, err = squidtest.AccessLines(string(out)); err != nil {
			return err
		}
		if len(lines) < n {
			return fmt.Errorf("%d access lines in %s", len(lines), strings.TrimSpace(string(out)))
		}
		return nil
	})
	return lines
}
