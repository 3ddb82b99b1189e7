package squid

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// The lines EchoProber adds, for a token file at path.
const (
	proberAllow = "http_access allow egress_prober egress_echo_method egress_echo_proto egress_echo_port egress_echo_path egress_echo_host decided_egress_echo"
	proberStrip = "request_header_access X-Egress-Probe deny all"
)

func proberACL(path string) string {
	return `acl egress_prober req_header X-Egress-Probe "` + path + `"`
}

// proberClients admit no loopback address the prober's asks come from.
var proberClients = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}

// writeTokenFile writes a new token's file into dir, readable by the user
// Squid drops to, and returns the token and the file's path.
func writeTokenFile(t *testing.T, dir string) (token, path string) {
	t.Helper()
	token, err := NewEchoProberToken()
	if err != nil {
		t.Fatal(err)
	}
	content, err := EchoProberTokenFile(token)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "echo-prober-token")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return token, path
}

// TestEchoProberToken: a new token is 64 lower-case hex characters and
// never the same twice; its file is the anchored expression of exactly
// that token; anything else is refused, without the value in the error.
func TestEchoProberToken(t *testing.T) {
	a, errA := NewEchoProberToken()
	b, errB := NewEchoProberToken()
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(a) || a == b {
		t.Errorf("tokens %q and %q: want two different ones of 64 lower-case hex characters", a, b)
	}
	content, err := EchoProberTokenFile(a)
	if err != nil || content != "^"+a+"$\n" {
		t.Errorf("EchoProberTokenFile = %q, %v; want ^<token>$ and a newline", content, err)
	}
	if got, ok := EchoProberTokenOf([]byte(content)); !ok || got != a {
		t.Errorf("EchoProberTokenOf(the file) = %q, %v; want the token back", got, ok)
	}
	for _, file := range []string{"", a, "^" + a, a + "$\n", "^" + a[:63] + "$\n", "^.*$\n"} {
		if got, ok := EchoProberTokenOf([]byte(file)); ok {
			t.Errorf("EchoProberTokenOf(%q) = %q: want refused", file, got)
		}
	}
	for _, bad := range []string{"", a[:63], a + "0", strings.ToUpper(a), a[:63] + "g", a[:62] + ".*", a[:63] + "\n",
		a[:31] + " " + a[32:], strings.Repeat("ä", 32)} {
		content, err := EchoProberTokenFile(bad)
		if err == nil || content != "" {
			t.Errorf("EchoProberTokenFile(%q) = %q, %v; want refused", bad, content, err)
			continue
		}
		if bad != "" && strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "token") {
			t.Errorf("EchoProberTokenFile(%q): %v; want an error naming the token, without its value", bad, err)
		}
	}
}

// TestConfig_EchoProber: with an echo, EchoProber reads the token from its
// file (never writing it into squid.conf), lets the token's ask of the
// echo through before the clients' rule and clientAuth (after the serving
// reporter's lines, when there are some), and strips the header from
// every request; the real `squid -k parse` takes each config without a
// warning. Without an echo it writes nothing.
func TestConfig_EchoProber(t *testing.T) {
	dir := t.TempDir()
	token, tokenFile := writeTokenFile(t, dir)
	passwords := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(passwords, []byte(clientauthtest.File(t, "alice", "pw")), 0o644); err != nil {
		t.Fatal(err)
	}
	withEcho := (&egress.Settings{EgressIPEcho: "http://192.0.2.10:8080/ip?format=text"}).Policy()
	const (
		servingDeny = "http_access deny serving_probe_client serving_probe_host decided_serving_probe"
		authDeny    = "http_access deny decided_client_auth !authenticated"
	)
	withAuth := slices.Concat(wantAccess[:1], []string{authDeny}, wantAccess[1:])
	for _, tc := range []struct {
		name                 string
		dest                 *egress.Policy
		prober, auth, report bool
		rules                []string
	}{
		{"echo, prober", withEcho, true, false, false, slices.Concat([]string{proberAllow}, wantAccess)},
		{"echo, prober, clientAuth", withEcho, true, true, false, slices.Concat([]string{proberAllow}, withAuth)},
		{"echo, prober, serving probe", withEcho, true, false, true, slices.Concat([]string{servingDeny, echoAllow, proberAllow}, wantAccess)},
		{"echo, prober, serving probe, clientAuth", withEcho, true, true, true, slices.Concat([]string{servingDeny, echoAllow, proberAllow}, withAuth)},
		{"no echo, prober", egress.Default(), true, false, false, wantAccess},
		{"no echo, prober, clientAuth, serving probe", egress.Default(), true, true, true, slices.Concat([]string{servingDeny}, withAuth)},
		{"echo, no prober", withEcho, false, false, false, wantAccess},
		{"echo, serving probe, no prober", withEcho, false, false, true, slices.Concat([]string{servingDeny, echoAllow}, wantAccess)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := Params{Port: 3128, Clients: proberClients, Destinations: tc.dest, PidFile: "/tmp/p", CoredumpDir: "/tmp",
				ServingProbe: tc.report}
			if tc.prober {
				sp.EchoProber = &EchoProber{TokenFile: tokenFile}
			}
			if tc.auth {
				sp.Auth = &Auth{PasswordFile: passwords}
			}
			conf := Config(sp)
			lines := strings.Split(conf, "\n")
			active := tc.prober && !tc.dest.Echo().IsZero()
			for _, l := range []string{proberACL(tokenFile), proberStrip} {
				if n := count(lines, l); active && n != 1 || !active && n != 0 {
					t.Errorf("%q written %d times, want %d:\n%s", l, n, map[bool]int{true: 1}[active], conf)
				}
			}
			if !active && (strings.Contains(conf, "egress_prober") || strings.Contains(conf, EchoProberHeader)) {
				t.Errorf("without an echo or a prober, the prober's lines:\n%s", conf)
			}
			if echoes := len(echoLines(conf)) > 0; echoes != (!tc.dest.Echo().IsZero() && (tc.prober || tc.report)) {
				t.Errorf("the echo's ACLs written: %v:\n%s", echoes, conf)
			}
			if strings.Contains(conf, token) {
				t.Errorf("the token is in squid.conf")
			}
			if got := httpAccess(conf); !slices.Equal(got, tc.rules) {
				t.Errorf("http_access rules\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.rules, "\n"))
			}
			out, err := squidtest.Parse(t, conf)
			if err != nil {
				t.Fatalf("squid -k parse refused the config: %v\n%s", err, out)
			}
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(strings.ToUpper(l), "WARNING") || strings.Contains(l, "ERROR") {
					t.Errorf("squid -k parse: %s", l)
				}
			}
		})
	}
}

func count(lines []string, l string) int {
	n := 0
	for _, x := range lines {
		if x == l {
			n++
		}
	}
	return n
}

// A token file squid.conf cannot name between quotes is a programming
// error in the provider: Config refuses it, naming the field.
func TestConfig_EchoProberTokenFilePath(t *testing.T) {
	dest := (&egress.Settings{EgressIPEcho: "http://192.0.2.10/ip"}).Policy()
	for _, path := range []string{"", "token", `/run/a"b`, "/run/a'b", "/run/a b", "/run/a#b", "/run/a\nacl x", `/run/a\b`} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "EchoProber.TokenFile") {
					t.Errorf("TokenFile %q: recovered %v, want a panic naming EchoProber.TokenFile", path, r)
				}
			}()
			Config(Params{Port: 3128, Destinations: dest, EchoProber: &EchoProber{TokenFile: path}})
		}()
	}
	// Without an echo the path is never written, so never checked.
	Config(Params{Port: 3128, EchoProber: &EchoProber{TokenFile: ""}})
}

// TestAccessModel_EchoProber: the model of Squid reads the token from its
// file and decides the prober's ask allowed by egress-echo from an address
// that is no client and without a password, while a request that differs
// in its token, path, port, method, scheme or host is decided as without
// the prober.
func TestAccessModel_EchoProber(t *testing.T) {
	dir := t.TempDir()
	token, tokenFile := writeTokenFile(t, dir)
	other, _ := NewEchoProberToken()
	dest := (&egress.Settings{EgressIPEcho: "http://192.0.2.10:8080/ip?format=text"}).Policy()
	e := dest.Echo()
	for _, auth := range []bool{false, true} {
		t.Run("clientAuth="+strconv.FormatBool(auth), func(t *testing.T) {
			config := func(prober *EchoProber) *squidtest.Access {
				sp := Params{Port: 3128, Clients: append(slices.Clone(proberClients), netip.MustParsePrefix("10.0.0.0/8")), Destinations: dest, EchoProber: prober}
				if auth {
					sp.Auth = &Auth{PasswordFile: "/unused"}
				}
				a, err := squidtest.ParseAccess(Config(sp))
				if err != nil {
					t.Fatalf("the model cannot read the config: %v", err)
				}
				return a
			}
			with, without := config(&EchoProber{TokenFile: tokenFile}), config(nil)
			header := func(vs ...string) http.Header { return http.Header{EchoProberHeader: vs} }
			ask := squidtest.Request{Client: netip.MustParseAddr("203.0.113.7"), Method: "GET", Scheme: "http", Host: e.Host, Port: e.Port,
				Path: e.Path, Addrs: []netip.Addr{e.Addr}, Header: header(token)}
			if allowed, notes := with.Decide(ask); !allowed || notes["decision"] != egress.DecisionAllowed || notes["rule"] != ruleEgressEcho {
				t.Errorf("the prober's ask: allowed %v, notes %v; want allowed by %s", allowed, notes, ruleEgressEcho)
			}
			if allowed, notes := without.Decide(ask); allowed || notes["rule"] != egress.RuleClientRanges {
				t.Errorf("the prober's ask without the prober: allowed %v, notes %v; want refused by %s", allowed, notes, egress.RuleClientRanges)
			}
			variants := map[string]func(*squidtest.Request){
				"no header":          func(r *squidtest.Request) { r.Header = nil },
				"another token":      func(r *squidtest.Request) { r.Header = header(other) },
				"the token twice":    func(r *squidtest.Request) { r.Header = header(token, token) },
				"a longer token":     func(r *squidtest.Request) { r.Header = header(token + "0") },
				"in capitals":        func(r *squidtest.Request) { r.Header = header(strings.ToUpper(token)) },
				"another path":       func(r *squidtest.Request) { r.Path = "/ip" },
				"another port":       func(r *squidtest.Request) { r.Port = e.Port + 1 },
				"POST":               func(r *squidtest.Request) { r.Method = "POST" },
				"https":              func(r *squidtest.Request) { r.Scheme = "https" },
				"CONNECT":            func(r *squidtest.Request) { r.Connect, r.Scheme, r.Path, r.Method = true, "", "", "" },
				"another host":       func(r *squidtest.Request) { r.Host = "other.example" },
				"an admitted client": func(r *squidtest.Request) { r.Client, r.Header = netip.MustParseAddr("10.1.2.3"), nil },
				"with a password too": func(r *squidtest.Request) {
					r.Client, r.Header, r.Authenticated = netip.MustParseAddr("10.1.2.3"), nil, true
				},
			}
			for _, name := range slices.Sorted(maps.Keys(variants)) {
				r := ask
				variants[name](&r)
				allowed, notes := with.Decide(r)
				wantAllowed, wantNotes := without.Decide(r)
				if allowed != wantAllowed || !maps.Equal(notes, wantNotes) {
					t.Errorf("%s: allowed %v by %v, without the prober %v by %v", name, allowed, notes, wantAllowed, wantNotes)
				}
				if allowed {
					t.Errorf("%s: allowed by %v", name, notes)
				}
			}
		})
	}
}

// TestRealSquid_EchoProber: the real Squid, admitting 198.51.100.0/24
// (config only: nothing is sent there) and 127.0.0.2, lets a GET of the
// echo's URL that carries the instance's token through from 127.0.0.1 and
// 127.0.0.3, which are no clients, with or without clientAuth and without
// a password: the echo answers the address Squid asked from and never sees
// the header. Without the token, with another one, or with the token for
// another path, port, host, scheme or method (CONNECT too), Squid refuses
// (403) and the echo is not asked. An admitted client's header is not
// forwarded either. The token never reaches Squid's logs, and Squid starts
// without a warning. A token file Squid cannot read refuses the prober.
func TestRealSquid_EchoProber(t *testing.T) {
	echo, asked := echoServer(t, "127.0.0.1")
	other, otherAsked := echoServer(t, "127.0.0.1")
	// A destination the entry allows, to see what an admitted client's
	// request carries.
	origin, _ := echoServer(t, allowedIP)
	echoURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(echo.port)) + echoPath
	e, ferr := egress.ParseEcho(echoURL, field.NewPath("egressIPEcho"))
	if ferr != nil {
		t.Fatal(ferr)
	}
	dest := (&egress.Settings{EgressIPEcho: echoURL, AllowedDestinations: []string{allowedIP + "/32"}}).Policy()
	if dest.Decide(egress.Destination{Scheme: "http", Host: e.Host, Port: e.Port, Addrs: []netip.Addr{e.Addr}}) == nil {
		t.Fatalf("the policy admits %s: the test needs the echo at a refused address", e.Addr)
	}
	wrong, err := NewEchoProberToken()
	if err != nil {
		t.Fatal(err)
	}
	const user, password = "alice", "alice's password"
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	asks := 0 // the echo's asks so far

	for _, tc := range []struct {
		name string
		auth bool
	}{{"clients only", false}, {"clientAuth", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dirs := squidtest.NewDirs(t)
			token, tokenFile := writeTokenFile(t, dirs.Run)
			sp := Params{
				ListenAddr: "127.0.0.1", Port: testenv.FreePort(t),
				Clients:      append(slices.Clone(proberClients), netip.MustParsePrefix(clientIP+"/32")),
				Destinations: dest,
				PidFile:      dirs.PidFile(), CoredumpDir: dirs.Run, EffectiveUser: dirs.EffectiveUser,
				EchoProber: &EchoProber{TokenFile: tokenFile},
			}
			if tc.auth {
				sp.Auth = &Auth{PasswordFile: filepath.Join(dirs.Run, "htpasswd")}
				if err := os.WriteFile(sp.Auth.PasswordFile, []byte(clientauthtest.File(t, user, password)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			proxy := squidtest.Addr(sp.ListenAddr, sp.Port)
			squidtest.Start(t, dirs, Config(sp), proxy)
			probe := http.Header{EchoProberHeader: {token}}

			// (a) The prober's ask, from addresses that are no clients,
			// with no password, and from an admitted client.
			for _, source := range []string{"127.0.0.1", "127.0.0.3", clientIP} {
				a := ask(t, proxy, source, "GET", e.URL, probe)
				if a.code != http.StatusOK || a.body != "127.0.0.1\n" {
					t.Errorf("GET %s with the token from %s: %+v, want 200 and 127.0.0.1", e.URL, source, a)
				}
				asks++
			}
			if got := asked(); len(got) != asks {
				t.Errorf("the echo was asked %q, want %d times", got, asks)
			}
			for _, h := range echo.headers() {
				if v := h.Values(EchoProberHeader); len(v) > 0 {
					t.Errorf("the echo received %s (%d values)", EchoProberHeader, len(v))
				}
			}

			// (b, c, d) Anything else is refused, from a source that is no
			// client: Squid answers 403 itself.
			otherURL := "http://" + net.JoinHostPort(e.Host, strconv.Itoa(other.port)) + echoPath
			for _, r := range []struct {
				why, method, target string
				header              http.Header
			}{
				{"no header", "GET", e.URL, nil},
				{"another token", "GET", e.URL, http.Header{EchoProberHeader: {wrong}}},
				{"the token twice", "GET", e.URL, http.Header{EchoProberHeader: {token, token}}},
				{"a longer token", "GET", e.URL, http.Header{EchoProberHeader: {token + "0"}}},
				{"a shorter token", "GET", e.URL, http.Header{EchoProberHeader: {token[1:]}}},
				{"the token in capitals", "GET", e.URL, http.Header{EchoProberHeader: {strings.ToUpper(token)}}},
				{"the token in another header", "GET", e.URL, http.Header{"X-Egress-Probe-Token": {token}}},
				{"another path", "GET", "http://" + e.HostPort() + "/ip", probe},
				{"another query", "GET", "http://" + e.HostPort() + "/ip?format=json", probe},
				{"another port", "GET", otherURL, probe},
				{"another host", "GET", "http://" + net.JoinHostPort("localhost", strconv.Itoa(int(e.Port))) + echoPath, probe},
				{"https", "GET", "https://" + e.HostPort() + echoPath, probe},
				{"POST", "POST", e.URL, probe},
				{"CONNECT", "CONNECT", e.HostPort(), probe},
			} {
				for _, source := range []string{"127.0.0.1", "127.0.0.3"} {
					if a := ask(t, proxy, source, r.method, r.target, r.header); a.code != http.StatusForbidden {
						t.Errorf("%s (%s %s from %s): %+v, want 403", r.why, r.method, r.target, source, a)
					}
				}
			}
			if got := asked(); len(got) != asks {
				t.Errorf("the echo was asked %q, want only the prober's %d asks", got, asks)
			}
			if got := otherAsked(); len(got) != 0 {
				t.Errorf("the server on another port was asked %q", got)
			}

			// (e) An admitted client still needs its password, and a
			// header it sends (whatever the value) does not leave.
			wantCode := http.StatusOK
			if tc.auth {
				wantCode = http.StatusProxyAuthRequired
			}
			if a := ask(t, proxy, clientIP, "GET", origin.URL+"/", nil); a.code != wantCode {
				t.Errorf("GET %s from admitted %s without a password: %+v, want %d", origin.URL, clientIP, a, wantCode)
			}
			for _, v := range []string{token, wrong} {
				h := http.Header{EchoProberHeader: {v}, "Proxy-Authorization": {basic}}
				if a := ask(t, proxy, clientIP, "GET", origin.URL+"/", h); a.code != http.StatusOK {
					t.Errorf("GET %s from admitted %s with a token header: %+v, want 200", origin.URL, clientIP, a)
				}
			}
			for _, h := range origin.headers() {
				if v := h.Values(EchoProberHeader); len(v) > 0 {
					t.Errorf("the origin received %s (%d values)", EchoProberHeader, len(v))
				}
			}

			lines := waitAccessLines(t, dirs, 3+2*14+3)
			if l, ok := squidtest.FindAccess(lines, map[string]string{"client": "127.0.0.3", "status": "200"}); !ok ||
				l["decision"] != egress.DecisionAllowed || l["rule"] != ruleEgressEcho || l["user"] != egress.NoValue {
				t.Errorf("the prober's ask is logged as %v, want allowed by %s with no user; access lines: %v", l, ruleEgressEcho, lines)
			}
			out, err := os.ReadFile(dirs.Output())
			if err != nil {
				t.Fatal(err)
			}
			// Squid's cache log is there, so a warning would be too.
			if !strings.Contains(string(out), "Accepting HTTP Socket connections") {
				t.Errorf("no cache log in Squid's output:\n%s", out)
			}
			if strings.Contains(string(out), token) || strings.Contains(string(out), wrong) {
				t.Errorf("a token is in Squid's output")
			}
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(strings.ToUpper(l), "WARNING") || strings.Contains(l, "ERROR") {
					t.Errorf("squid: %s", l)
				}
			}
		})
	}

	// A token file Squid cannot read (a Secret not mounted) leaves the
	// ACL empty: Squid starts, says so, and refuses the token.
	t.Run("token file missing", func(t *testing.T) {
		dirs := squidtest.NewDirs(t)
		token, err := NewEchoProberToken()
		if err != nil {
			t.Fatal(err)
		}
		sp := Params{
			ListenAddr: "127.0.0.1", Port: testenv.FreePort(t), Clients: proberClients, Destinations: dest,
			PidFile: dirs.PidFile(), CoredumpDir: dirs.Run, EffectiveUser: dirs.EffectiveUser,
			EchoProber: &EchoProber{TokenFile: filepath.Join(dirs.Run, "absent")},
		}
		proxy := squidtest.Addr(sp.ListenAddr, sp.Port)
		squidtest.Start(t, dirs, Config(sp), proxy)
		if a := ask(t, proxy, "127.0.0.1", "GET", e.URL, http.Header{EchoProberHeader: {token}}); a.code != http.StatusForbidden {
			t.Errorf("GET %s with a token and no token file: %+v, want 403", e.URL, a)
		}
		if got := asked(); len(got) != asks {
			t.Errorf("the echo was asked %q, want %d times", got, asks)
		}
		if out, _ := os.ReadFile(dirs.Output()); !strings.Contains(string(out), "empty ACL: acl egress_prober") {
			t.Errorf("Squid does not say the prober's ACL is empty:\n%s", out)
		}
	})
}

// ask sends one request through proxy from source, as written: method and
// target (an absolute URL, or host:port for CONNECT) with header's fields,
// and reads the answer.
func ask(t *testing.T, proxy, source, method, target string, header http.Header) answer {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 10 * time.Second}
	conn, err := d.Dial("tcp4", proxy)
	if err != nil {
		t.Fatalf("dial proxy from %s: %v", source, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	host := target
	if method != http.MethodConnect {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		host = u.Host
	}
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, host)
	if method == http.MethodPost {
		req.WriteString("Content-Length: 0\r\n")
	}
	if err := header.Write(&req); err != nil {
		t.Fatal(err)
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatalf("%s %s via %s: %v", method, target, proxy, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s via %s: %v", method, target, proxy, err)
	}
	defer resp.Body.Close()
	a := answer{code: resp.StatusCode, squidErr: resp.Header.Get("X-Squid-Error")}
	if method != http.MethodConnect {
		b, _ := io.ReadAll(resp.Body)
		a.body = string(b)
	}
	return a
}
