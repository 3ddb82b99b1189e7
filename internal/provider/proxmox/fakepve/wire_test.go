package fakepve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
)

// rawHeaderLines sends req on its own connection and returns the status
// line and the header lines in the order they came.
func rawHeaderLines(t *testing.T, e *env, raw string) (lines []string, body []byte) {
	t.Helper()
	conn, err := tls.Dial("tcp", e.s.Host(), &tls.Config{RootCAs: e.s.CertPool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	n := -1
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading headers: %v (so far %q)", err, lines)
		}
		l = strings.TrimRight(l, "\r\n")
		if l == "" {
			break
		}
		lines = append(lines, l)
		if strings.HasPrefix(l, "Content-Length: ") {
			fmt.Sscanf(l, "Content-Length: %d", &n)
		}
	}
	if n >= 0 {
		body = make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
	} else {
		body, _ = io.ReadAll(br)
	}
	return lines, body
}

func headerNames(lines []string) []string {
	var out []string
	for _, l := range lines[1:] {
		k, _, _ := strings.Cut(l, ":")
		out = append(out, k)
	}
	return out
}

// The reason phrase is the message's first line, written by the fake
// itself on the hijacked connection, with the headers in HTTP::Headers'
// order (general, response, entity) and "Connection: close" on errors.
func TestReasonPhraseAndHeaderOrder(t *testing.T) {
	e := newEnv(t)
	req := "GET /api2/json/nodes/pve1/qemu/999/config HTTP/1.1\r\nHost: x\r\nAuthorization: " + e.tok + "\r\n\r\n"
	lines, body := rawHeaderLines(t, e, req)
	if lines[0] != "HTTP/1.1 500 Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist" {
		t.Fatalf("status line %q", lines[0])
	}
	want := "Cache-Control Connection Date Pragma Server Content-Length Content-Type Expires"
	if got := strings.Join(headerNames(lines), " "); got != want {
		t.Fatalf("headers %s, want %s", got, want)
	}
	if lines[2] != "Connection: close" || lines[4] != "Pragma: no-cache" || lines[5] != "Server: pve-api-daemon/3.0" ||
		lines[1] != "Cache-Control: max-age=0" {
		t.Fatalf("header values %q", lines)
	}
	if string(body) != `{"data":null,"message":"Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist\n"}` {
		t.Fatalf("body %s", body)
	}

	// A message of several lines: its first is the reason, the body keeps all.
	e.s.FailNext(Fault{Path: "version", Err: die("first line\nsecond line\n")})
	r := e.do("GET", "/version", nil)
	if r.line != "500 first line" || r.json(t)["message"] != "first line\nsecond line\n" {
		t.Fatalf("multi-line message: %q %s", r.line, r.body)
	}

	// A 200 keeps the connection; its headers are the same set.
	lines, _ = rawHeaderLines(t, e, "GET /api2/json/version HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: "+e.tok+"\r\n\r\n")
	if lines[0] != "HTTP/1.1 200 OK" || lines[2] != "Connection: close" {
		t.Fatalf("200 asked to close: %q", lines)
	}
	lines, _ = rawHeaderLines(t, e, "GET /api2/json/version HTTP/1.0\r\nHost: x\r\nAuthorization: "+e.tok+"\r\n\r\n")
	if lines[0] != "HTTP/1.0 200 OK" || lines[2] != "Connection: close" {
		t.Fatalf("HTTP/1.0 request: %q (PVE echoes the protocol and keeps no 1.0 connection)", lines)
	}
}

func TestKeepAliveAndCloseAfterErrors(t *testing.T) {
	e := newEnv(t)
	var reused []bool
	get := func(path string) int {
		req, _ := http.NewRequest("GET", e.s.URL()+path, nil)
		req.Header.Set("Authorization", e.tok)
		req = req.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}))
		resp, err := e.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && resp.Header.Get("Connection") != "Keep-Alive" {
			t.Fatalf("200 with Connection %q", resp.Header.Get("Connection"))
		}
		return resp.StatusCode
	}
	get("/version")
	get("/version")
	get("/nodes/pve1/qemu/999/config") // 500: closes
	get("/version")
	if fmt.Sprint(reused) != "[false true true false]" {
		t.Fatalf("connection reuse %v, want [false true true false]: kept after 200s, closed after the error", reused)
	}

	// pveproxy serves at most 100 requests on one connection.
	conn, err := tls.Dial("tcp", e.s.Host(), &tls.Config{RootCAs: e.s.CertPool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(conn, "GET /api2/json/version HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n\r\n", e.tok)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.ReadAll(resp.Body)
		// net/http moves "Connection: close" into resp.Close.
		if c := resp.Header.Get("Connection"); (i < 100 && c != "Keep-Alive") || (i == 100 && !resp.Close) {
			t.Fatalf("request %d: Connection %q, close %v", i, c, resp.Close)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the 100th answer the connection is still open: %v", err)
	}
}

func TestGzipAboveOneKiB(t *testing.T) {
	w := DefaultWorld()
	for id := 101; id < 110; id++ {
		w.VMs = append(w.VMs, VM{VMID: id, Node: "pve1", Config: []KV{{"name", fmt.Sprintf("egress-%d", id)}}})
	}
	e := newEnv(t, WithWorld(w))
	lines, body := rawHeaderLines(t, e, "GET /api2/json/cluster/resources HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nAuthorization: "+e.tok+"\r\n\r\n")
	if !contains(lines, "Content-Encoding: gzip") {
		t.Fatalf("a %d-byte answer to a gzip client is not compressed: %q", len(body), lines)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if len(plain) <= 1024 || !bytes.HasPrefix(plain, []byte(`{"data":[{"id":"qemu/101"`)) {
		t.Fatalf("gunzipped body %.60s (%d bytes)", plain, len(plain))
	}
	lines, _ = rawHeaderLines(t, e, "GET /api2/json/version HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nAuthorization: "+e.tok+"\r\n\r\n")
	if contains(lines, "Content-Encoding: gzip") {
		t.Fatalf("a small answer is compressed: %q", lines)
	}
	// Go's transport asks for gzip itself and decodes it.
	if r := e.ok("GET", "/cluster/resources", nil); !bytes.HasPrefix(r.body, []byte(`{"data":[`)) {
		t.Fatalf("through net/http: %.40s", r.body)
	}
}

func contains(lines []string, l string) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}

// Tokens: none is "401 No ticket", anything that does not verify "401
// Authentication failed!", both without a body; the log names the token
// tried, never its secret.
func TestTokenAuth(t *testing.T) {
	e := newEnv(t)
	secret := e.s.TokenSecret(DefaultTokenID)
	cases := []struct{ auth, line string }{
		{"", "401 No ticket"},
		{"Bearer x", "401 No ticket"},
		{"PVEAPIToken=" + DefaultTokenID + "=wrong-secret", "401 Authentication failed!"},
		{"PVEAPIToken=" + DefaultTokenID, "401 Authentication failed!"},
		{"PVEAPIToken=root@pam!other=" + secret, "401 Authentication failed!"},
		{"PVEAPIToken=rootpam!egress-operator=" + secret, "401 Authentication failed!"},
		{"PVEAPIToken=" + DefaultTokenID + "=" + secret, "200 OK"},
		{"PVEAPIToken " + DefaultTokenID + "=" + secret, "200 OK"},
	}
	for _, c := range cases {
		r := e.doAuth("GET", "/version", nil, c.auth)
		if r.line != c.line {
			t.Errorf("Authorization %q: %s, want %s", strings.ReplaceAll(c.auth, secret, "<secret>"), r.line, c.line)
		}
		if r.status == 401 && (len(r.body) != 0 || r.header.Get("Content-Type") != "") {
			t.Errorf("401 with a body %q or Content-Type %q", r.body, r.header.Get("Content-Type"))
		}
	}
	if r := e.doAuth("GET", "/version", nil, "PVEAuthCookie=PVE:root@pam:4EEC61E2::sig"); r.line != "401 Authentication failed!" {
		t.Errorf("a ticket: %s", r.line)
	}
	for _, r := range e.s.Requests() {
		if strings.Contains(fmt.Sprintf("%+v", r), secret) {
			t.Fatalf("the request log holds the token secret: %+v", r)
		}
	}
	if got := e.s.Requests()[len(cases)-1].TokenID; got != DefaultTokenID {
		t.Fatalf("TokenID %q", got)
	}
}

// pve-http-server's own rules for bodies: no chunked requests, no body on
// GET or DELETE, only form or JSON bodies (multipart only for uploads).
func TestBodyRules(t *testing.T) {
	e := newEnv(t)
	pr, pw := io.Pipe()
	go func() {
		fmt.Fprint(pw, "newid=101")
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", e.s.URL()+"/nodes/pve1/qemu/9000/clone", pr)
	req.Header.Set("Authorization", e.tok)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if r := e.send(req); r.line != "501 chunked transfer encoding not supported" || len(r.body) != 0 {
		t.Fatalf("chunked POST: %s %q", r.line, r.body)
	}

	req, _ = http.NewRequest("DELETE", e.s.URL()+"/nodes/pve1/qemu/9000", strings.NewReader("purge=1"))
	req.Header.Set("Authorization", e.tok)
	if r := e.send(req); r.line != "501 Unexpected content for method 'DELETE'" {
		t.Fatalf("DELETE with a body: %s (its parameters go in the query)", r.line)
	}

	req, _ = http.NewRequest("POST", e.s.URL()+"/nodes/pve1/qemu/9000/clone", strings.NewReader("newid=101"))
	req.Header.Set("Authorization", e.tok)
	req.Header.Set("Content-Type", "text/plain")
	if r := e.send(req); r.line != "506 upload 'Content-Type 'text/plain' not implemented" {
		t.Fatalf("text/plain body: %s", r.line)
	}

	req, _ = http.NewRequest("POST", e.s.URL()+"/nodes/pve1/qemu/9000/clone", strings.NewReader(`{"newid":101,"name":"egress-j","full":true}`))
	req.Header.Set("Authorization", e.tok)
	req.Header.Set("Content-Type", "application/json")
	if r := e.send(req); r.status != 200 {
		t.Fatalf("JSON body: %s %s", r.line, r.body)
	}
	if keys := e.s.Requests()[len(e.s.Requests())-1].FormKeys; strings.Join(keys, ",") != "full,name,newid" {
		t.Fatalf("logged form keys %v", keys)
	}

	big := strings.Repeat("x", maxPost+1)
	if r := e.do("POST", "/nodes/pve1/qemu/9000/config", form("description", big)); r.line != "501 for data too large" {
		t.Fatalf("a body over 64 KiB: %s", r.line)
	}
}

func TestUnknownPathsAndMethods(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/nodes/pve1/nope", nil)
	if r.line != "501 Method 'GET /nodes/pve1/nope' not implemented" ||
		string(r.body) != `{"data":null,"message":"Method 'GET /nodes/pve1/nope' not implemented"}` {
		t.Fatalf("unknown path: %s %s", r.line, r.body)
	}
	if r := e.do("POST", "/version", form("x", "1")); r.line != "501 Method 'POST /version' not implemented" {
		t.Fatalf("unknown method on a known path: %s", r.line)
	}
	if r := e.do("PATCH", "/version", nil); r.line != "501 method 'PATCH' not available" {
		t.Fatalf("PATCH: %s", r.line)
	}
	req, _ := http.NewRequest("GET", "https://"+e.s.Host()+"/api2/extjs/version", nil)
	req.Header.Set("Authorization", e.tok)
	if r := e.send(req); r.line != "501 no formatter for uri /version, extjs" {
		t.Fatalf("extjs: %s", r.line)
	}
	req, _ = http.NewRequest("GET", "https://"+e.s.Host()+"/favicon.ico", nil)
	if r := e.send(req); r.line != "501 no such file '/favicon.ico'" {
		t.Fatalf("outside /api2: %s", r.line)
	}
	if r := e.ok("GET", "//nodes//pve1/qemu/9000/config/", nil); r.dataMap(t)["template"] != float64(1) {
		t.Fatalf("empty path fragments are skipped as find_handler does: %s", r.body)
	}
	if r := e.do("GET", "/nodes/pve1/qemu/9000/config", form("node", "pve2")); r.status != 400 ||
		r.json(t)["errors"].(map[string]any)["node"] != "duplicate parameter (already defined in URI) with conflicting values!" {
		t.Fatalf("a parameter contradicting the path: %s %s", r.line, r.body)
	}
}

// Calls for another node are proxied: an unknown name fails its address
// lookup, an offline node is pveproxy's bare 595 (or 596).
func TestNodeProxy(t *testing.T) {
	w := DefaultWorld()
	w.Nodes = []string{"pve1", "pve2"}
	w.VMs = append(w.VMs, VM{VMID: 201, Node: "pve2", Running: true, Config: []KV{{"name", "egress-b"}, {"tags", "egress-operator"}}})
	e := newEnv(t, WithWorld(w))
	if r := e.do("GET", "/nodes/pve9/status", nil); r.line != "500 hostname lookup 'pve9' failed - failed to get address info for: pve9: Name or service not known" {
		t.Fatalf("unknown node: %s", r.line)
	}
	e.ok("GET", "/nodes/pve2/qemu/201/status/current", nil)
	e.s.SetNodeOffline("pve2", &Error{})
	r := e.do("GET", "/nodes/pve2/qemu/201/status/current", nil)
	if r.line != "595 No route to host" || len(r.body) != 0 || r.header.Get("Content-Type") != "" {
		t.Fatalf("offline node: %s %q %q", r.line, r.body, r.header.Get("Content-Type"))
	}
	e.s.SetNodeOffline("pve2", Unreachable(596, "Connection timed out"))
	if r := e.do("GET", "/nodes/pve2/tasks/UPID:pve2:00000001:00000002:00000003:qmstart:201:root@pam!egress-operator:/status", nil); r.line != "596 Connection timed out" {
		t.Fatalf("offline node, 596: %s", r.line)
	}
	var node, guest map[string]any
	for _, x := range e.ok("GET", "/cluster/resources", nil).data(t).([]any) {
		m := x.(map[string]any)
		switch m["id"] {
		case "node/pve2":
			node = m
		case "qemu/201":
			guest = m
		}
	}
	if node["status"] != "offline" || guest["status"] != "unknown" || guest["name"] != nil || guest["tags"] != "egress-operator" {
		t.Fatalf("resources with pve2 offline: node %v guest %v", node, guest)
	}
	e.ok("GET", "/nodes/pve1/status", nil)
	e.s.SetNodeOffline("pve2", nil)
	e.ok("GET", "/nodes/pve2/qemu/201/status/current", nil)
}

// The fake's certificate verifies through CertPool or the PEM a CA file
// holds; a client without it fails verification as against a PVE with its
// self-signed certificate.
func TestTLSVerification(t *testing.T) {
	e := newEnv(t)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(e.s.CACertPEM()) {
		t.Fatal("CACertPEM is not a PEM certificate")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("GET", e.s.URL()+"/version", nil)
	req.Header.Set("Authorization", e.tok)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("with the PEM: %v", err)
	}
	resp.Body.Close()
	bare := &http.Client{Transport: &http.Transport{}}
	defer bare.CloseIdleConnections()
	_, err = bare.Get(e.s.URL() + "/version")
	var uerr x509.UnknownAuthorityError
	if !errors.As(err, &uerr) {
		t.Fatalf("without the CA: %v, want an x509.UnknownAuthorityError", err)
	}
}
