package fakepve

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// env is a started fake and a plain net/http client that verifies its
// certificate against the fake's pool (not InsecureSkipVerify).
type env struct {
	t   *testing.T
	s   *Server
	hc  *http.Client
	tok string
}

func newEnv(t *testing.T, opts ...Option) *env {
	t.Helper()
	s := New(opts...).Start()
	t.Cleanup(s.Close)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.CertPool()}}}
	t.Cleanup(hc.CloseIdleConnections)
	return &env{t: t, s: s, hc: hc, tok: s.Token()}
}

// reply is one answer as the client saw it.
type reply struct {
	status int
	line   string // "500 Configuration file ... does not exist"
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

// data is the answer's "data".
func (r reply) data(t *testing.T) any {
	t.Helper()
	return r.json(t)["data"]
}

func (r reply) dataMap(t *testing.T) map[string]any {
	t.Helper()
	m, ok := r.data(t).(map[string]any)
	if !ok {
		t.Fatalf("data is %T (%s), want an object", r.data(t), r.body)
	}
	return m
}

func (r reply) dataString(t *testing.T) string {
	t.Helper()
	s, ok := r.data(t).(string)
	if !ok {
		t.Fatalf("data is %T (%s), want a string", r.data(t), r.body)
	}
	return s
}

// do sends method path (below /api2/json) with form values as the body of
// POST/PUT and the query otherwise, authenticated with the env's token.
func (e *env) do(method, path string, form url.Values) reply {
	e.t.Helper()
	return e.doAuth(method, path, form, e.tok)
}

func (e *env) doAuth(method, path string, form url.Values, auth string) reply {
	e.t.Helper()
	u := e.s.URL() + path
	var body io.Reader
	if form != nil && (method == http.MethodPost || method == http.MethodPut) {
		body = strings.NewReader(form.Encode())
	} else if form != nil {
		u += "?" + form.Encode()
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return e.send(req)
}

func (e *env) send(req *http.Request) reply {
	e.t.Helper()
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, line: resp.Status, header: resp.Header, body: b}
}

// ok fails the test unless the answer is 200 and returns it.
func (e *env) ok(method, path string, form url.Values) reply {
	e.t.Helper()
	r := e.do(method, path, form)
	if r.status != http.StatusOK {
		e.t.Fatalf("%s %s: %s %s", method, path, r.line, r.body)
	}
	return r
}

// upload posts a multipart ISO upload as PVE takes it: content, then the
// file part named "filename".
func (e *env) upload(node, storage, content, filename string, data []byte) reply {
	e.t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	_ = mw.WriteField("content", content)
	fw, err := mw.CreateFormFile("filename", filename)
	if err != nil {
		e.t.Fatal(err)
	}
	_, _ = fw.Write(data)
	_ = mw.Close()
	req, err := http.NewRequest(http.MethodPost, e.s.URL()+"/nodes/"+node+"/storage/"+storage+"/upload", bytes.NewReader(b.Bytes()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", e.tok)
	return e.send(req)
}

// wait polls the task's status until it stopped and returns its exitstatus.
func (e *env) wait(node, upid string) string {
	e.t.Helper()
	for i := 0; i < 1000; i++ {
		st := e.ok("GET", "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil).dataMap(e.t)
		if st["status"] == "stopped" {
			return st["exitstatus"].(string)
		}
	}
	e.t.Fatalf("task %s never stopped", upid)
	return ""
}

// waitOK waits for the task and fails unless it succeeded.
func (e *env) waitOK(node, upid string) {
	e.t.Helper()
	if ex := e.wait(node, upid); ex != "OK" && !strings.HasPrefix(ex, "WARNINGS: ") {
		e.t.Fatalf("task %s: %s", upid, ex)
	}
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}
