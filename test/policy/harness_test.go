package policy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/local"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// catch is the catch servers: one HTTP server on each catch address's
// plain and connect ports, recording which request (by the ID in its
// path) reached which address, and the headers it arrived with.
type catch struct {
	mu      sync.Mutex
	reached map[string][]string // request ID -> addr:port
	headers map[string]http.Header
}

func startCatch(t *testing.T) *catch {
	t.Helper()
	c := &catch{reached: map[string][]string{}, headers: map[string]http.Header{}}
	for _, a := range catchAddrs {
		for _, port := range []int{plainPort, connectPort} {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				t.Fatalf("catch server: %v", err)
			}
			where := ln.Addr().String()
			srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := strings.TrimPrefix(r.URL.Path, "/")
				c.mu.Lock()
				c.reached[id] = append(c.reached[id], where)
				c.headers[id] = r.Header.Clone()
				c.mu.Unlock()
				_, _ = io.WriteString(w, "caught")
			})}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
		}
	}
	return c
}

// by is where request id arrived, and with which headers.
func (c *catch) by(id string) ([]string, http.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reached[id], c.headers[id]
}

// startSquid runs the real Squid with the configuration generated for
// settings, admitting loopback clients, and returns its address and the
// model of its access rules.
func startSquid(t *testing.T, policy *egress.Policy, htpasswd string) (string, *squidtest.Access, squidLog) {
	t.Helper()
	dirs := squidtest.NewDirs(t)
	sp := squid.Params{ListenAddr: "127.0.0.1", Port: testenv.FreePort(t),
		Clients: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Destinations: policy,
		PidFile: dirs.PidFile(), CoredumpDir: dirs.Run, EffectiveUser: dirs.EffectiveUser}
	if htpasswd != "" {
		sp.Auth = &squid.Auth{PasswordFile: filepath.Join(dirs.Run, "htpasswd")}
		if err := os.WriteFile(sp.Auth.PasswordFile, []byte(htpasswd), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := squid.Config(sp)
	addr := squidtest.Addr(sp.ListenAddr, sp.Port)
	squidtest.Start(t, dirs, conf, addr)
	access, err := squidtest.ParseAccess(conf)
	if err != nil {
		t.Fatalf("the model of Squid cannot read the generated config: %v", err)
	}
	return addr, access, squidLog(dirs.Output())
}

// startLocal runs one local provider instance under settings, admitting
// loopback clients, and returns its address and its access log.
func startLocal(t *testing.T, settings egress.Settings, rules []egress.DestinationRule, htpasswd, bind string) (string, localLog) {
	t.Helper()
	p, err := local.New("differential", local.Config{BindCIDR: bind, Settings: settings}, provider.Options{InstallationID: "differential"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	req := provider.CreateRequest{Name: provider.InstanceName("ns", "p", "uid", "s"), Namespace: "ns", ProxyName: "p", UID: "uid",
		Port: testenv.FreePort(t), AllowedSourceRanges: []string{"127.0.0.0/8"}, Destinations: rules,
		ClientAuth: provider.Sensitive(htpasswd)}
	logs := localLog{&testenv.LogLines{}}
	inst, err := p.Create(logs.Context(1), req)
	if err != nil || inst.State != provider.StateRunning {
		t.Fatalf("local Create: %+v %v", inst, err)
	}
	return squidtest.Addr(inst.IP, req.Port), logs
}

// outcome is what one proxy did with one request.
type outcome struct {
	// class is passed (the catch server answered through the proxy),
	// refused (403 from the proxy, or Squid's 501 for a scheme it does not
	// speak) or failed (another 5xx: the proxy tried and could not
	// connect); anything else is "status N".
	class   string
	status  int
	body    string
	header  http.Header
	reached []string
}

// send asks proxy for p, with id as the path, and extra header lines; it
// reads the answer (for a CONNECT that passes, the catch server's answer
// through the tunnel).
func send(t *testing.T, proxy string, p probe, id string, c *catch, extra ...string) outcome {
	t.Helper()
	conn, err := net.DialTimeout("tcp", proxy, 10*time.Second)
	if err != nil {
		t.Fatalf("dial proxy %s: %v", proxy, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	hostPort := net.JoinHostPort(p.host, strconv.Itoa(int(p.port)))
	br := bufio.NewReader(conn)
	head := strings.Join(extra, "")
	if p.connect {
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", hostPort, hostPort, head)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("%s via %s: %v", p, proxy, err)
		}
		if resp.StatusCode != http.StatusOK {
			return finish(resp, id, c)
		}
		fmt.Fprintf(conn, "GET /%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", id, hostPort)
	} else {
		fmt.Fprintf(conn, "GET %s://%s/%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n", p.scheme, hostPort, id, hostPort, head)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s via %s: %v", p, proxy, err)
	}
	return finish(resp, id, c)
}

func finish(resp *http.Response, id string, c *catch) outcome {
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	o := outcome{status: resp.StatusCode, body: string(body), header: resp.Header}
	switch {
	case resp.StatusCode == http.StatusOK && o.body == "caught":
		o.class = "passed"
	case resp.StatusCode == http.StatusProxyAuthRequired:
		o.class = "auth"
	case resp.StatusCode == http.StatusForbidden, resp.StatusCode == http.StatusNotImplemented:
		// 501: Squid refuses a scheme it does not speak (gopher) before
		// its access rules, without trying.
		o.class = "refused"
	case resp.StatusCode >= 500:
		o.class = "failed"
	default:
		o.class = fmt.Sprintf("status %d", resp.StatusCode)
	}
	o.reached, _ = c.by(id)
	return o
}
