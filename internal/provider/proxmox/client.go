package proxmox

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// client is the thin PVE client: one method per endpoint, ctx on every
// request, the token file read per request, the CA file reloaded when its
// modification time or size changes.
type client struct {
	base      string
	tokenFile string
	caFile    string
	insecure  bool
	timeout   time.Duration
	wrap      func(http.RoundTripper) http.RoundTripper

	mu     sync.Mutex
	caStat [2]int64
	hc     *http.Client
}

func (c *client) httpClient(ctx context.Context) (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var stat [2]int64
	var pool *x509.CertPool
	if c.caFile != "" {
		fi, err := os.Stat(c.caFile)
		if err != nil {
			return nil, provider.Errorf(provider.ErrTransient, "CA file: %w", err)
		}
		stat = [2]int64{fi.ModTime().UnixNano(), fi.Size()}
		if c.hc != nil && stat == c.caStat {
			return c.hc, nil
		}
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, provider.Errorf(provider.ErrTransient, "CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, provider.Errorf(provider.ErrPermanent, "CA file %s holds no PEM certificate", c.caFile)
		}
	} else if c.hc != nil {
		return c.hc, nil
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, InsecureSkipVerify: c.insecure, MinVersion: tls.VersionTLS12}, //nolint:gosec // explicit, warned setting
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	var rt http.RoundTripper = tr
	if c.wrap != nil {
		rt = c.wrap(rt)
	}
	rt = observeTransport(rt)
	if c.insecure {
		// New has no logger (the registry's constructor takes none), so
		// the warning goes out when the client is built: on the first
		// request, and again after a CA reload.
		logger(ctx).Info(insecureLine, "url", c.base)
	}
	if c.hc != nil {
		if old, ok := c.hc.Transport.(interface{ CloseIdleConnections() }); ok {
			old.CloseIdleConnections()
		}
	}
	c.hc = &http.Client{Transport: rt, Timeout: c.timeout}
	c.caStat = stat
	return c.hc, nil
}

func (c *client) token() (string, error) {
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", provider.Errorf(provider.ErrTransient, "token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	t = strings.TrimPrefix(t, "PVEAPIToken=")
	if !strings.Contains(t, "!") || !strings.Contains(t, "=") || strings.ContainsAny(t, "\r\n") {
		return "", provider.Errorf(provider.ErrPermanent, "token file %s does not hold user@realm!id=secret", c.tokenFile)
	}
	return t, nil
}

// do sends one request: GET and DELETE parameters in the query (PVE
// answers 501 to a DELETE body), POST and PUT as a form. out receives data.
func (c *client) do(ctx context.Context, method, path string, params url.Values, out any) error {
	var body io.Reader
	u := c.base + path
	ct := ""
	if method == http.MethodGet || method == http.MethodDelete {
		if len(params) > 0 {
			u += "?" + params.Encode()
		}
	} else if len(params) > 0 {
		body = strings.NewReader(params.Encode())
		ct = "application/x-www-form-urlencoded"
	}
	return c.send(ctx, method, u, body, ct, out)
}

func (c *client) send(ctx context.Context, method, u string, body io.Reader, ct string, out any) error {
	hc, err := c.httpClient(ctx)
	if err != nil {
		return err
	}
	tok, err := c.token()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return provider.Errorf(provider.ErrPermanent, "building request: %w", err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+tok)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return classifyTransport(ctx, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return classifyTransport(ctx, err)
	}
	if resp.StatusCode != http.StatusOK {
		return classifyAPI(decodeError(resp.StatusCode, resp.Status, raw))
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	_ = json.Unmarshal(raw, &env)
	if out != nil && len(env.Data) > 0 && string(env.Data) != "null" {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return provider.Errorf(provider.ErrTransient, "decoding PVE answer: %w", err)
		}
	}
	return nil
}

// resource is one entry of /cluster/resources?type=vm.
type resource struct {
	VMID     int     `json:"vmid"`
	Node     string  `json:"node"`
	Name     string  `json:"name"`
	Status   string  `json:"status"`
	Template int     `json:"template"`
	Tags     string  `json:"tags"`
	Lock     string  `json:"lock"`
	Type     string  `json:"type"`
	Uptime   float64 `json:"uptime"`
}

func (c *client) resources(ctx context.Context) ([]resource, error) {
	var rs []resource
	err := c.do(ctx, http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}}, &rs)
	return rs, err
}

func vmPath(node string, vmid int) string { return "/nodes/" + node + "/qemu/" + strconv.Itoa(vmid) }

func (c *client) config(ctx context.Context, node string, vmid int) (map[string]any, error) {
	var cfg map[string]any
	err := c.do(ctx, http.MethodGet, vmPath(node, vmid)+"/config", nil, &cfg)
	return cfg, err
}

// upid runs a call that answers a task's UPID.
func (c *client) upid(ctx context.Context, method, path string, params url.Values) (string, error) {
	var u string
	err := c.do(ctx, method, path, params, &u)
	return u, err
}

type taskStatus struct {
	Status     string `json:"status"`
	ExitStatus string `json:"exitstatus"`
}

func (c *client) task(ctx context.Context, node, upid string) (taskStatus, error) {
	var ts taskStatus
	err := c.do(ctx, http.MethodGet, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil, &ts)
	return ts, err
}

// taskLog reads the task's log lines after the first start (PVE numbers
// them from 1; start skips that many), so a long task's log is read once,
// not again on every poll: a clone's qemu-img progress grows by a line per
// percent, and a read from 0 with a limit would stop at the first lines.
func (c *client) taskLog(ctx context.Context, node, upid string, start int) ([]string, error) {
	var lines []struct {
		T string `json:"t"`
	}
	if err := c.do(ctx, http.MethodGet, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/log", url.Values{"start": {strconv.Itoa(start)}, "limit": {"500"}}, &lines); err != nil {
		return nil, err
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.T
	}
	return out, nil
}

// upload sends an ISO with a Content-Length (PVE refuses chunked bodies).
func (c *client) upload(ctx context.Context, node, storage, filename string, data []byte) (string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("content", "iso")
	fw, err := mw.CreateFormFile("filename", filename)
	if err != nil {
		return "", provider.Errorf(provider.ErrPermanent, "building upload: %w", err)
	}
	_, _ = fw.Write(data)
	_ = mw.Close()
	var u string
	err = c.send(ctx, http.MethodPost, c.base+"/nodes/"+node+"/storage/"+storage+"/upload", bytes.NewReader(buf.Bytes()), mw.FormDataContentType(), &u)
	return u, err
}
