package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

const (
	// originHost is where the demo origin listens. The providers config
	// (providers.yaml) must let the local provider's proxies reach it.
	originHost = "127.0.0.1"
	// originPrefix starts every answer of the demo origin; the fetch
	// through the proxy must return it.
	originPrefix = "hello from the demo origin, via "
	// fetchTimeout bounds the tries of the fetch: Ready may be reported a
	// moment before a listener takes connections.
	fetchTimeout = 5 * time.Second
	// closedTimeout bounds the wait for a deleted Proxy's listener to close.
	closedTimeout = 3 * time.Second
)

// origin is the server the demo fetches through the proxy; its answer
// names who connected, so the output shows the proxy in the path.
type origin struct {
	srv  *http.Server
	addr string
}

func (o *origin) url() string { return "http://" + o.addr + "/" }

func (d *demo) startOrigin(context.Context) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(originHost, "0"))
	if err != nil {
		return err
	}
	o := &origin{addr: ln.Addr().String()}
	o.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			via := r.Header.Get("X-Forwarded-For")
			if via == "" {
				via = r.RemoteAddr
			}
			d.out.say("origin: %s %s from %s", r.Method, r.URL.RequestURI(), r.RemoteAddr)
			_, _ = fmt.Fprintf(w, "%s%s\n", originPrefix, via) // a client gone mid-answer is the client's problem
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	d.origin = o
	go func() {
		if err := o.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			d.out.say("origin stopped serving: %v", err)
		}
	}()
	d.out.say("origin server on %s", o.url())
	return nil
}

func (o *origin) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return o.srv.Shutdown(ctx)
}

// fetch gets the origin through the proxy: a connection error is tried
// again, any answer but 200 and the origin's body fails the demo.
func (d *demo) fetch(ctx context.Context) error {
	proxyURL := &url.URL{Scheme: "http", Host: d.proxy.endpoint}
	target := d.origin.url()
	hc := &http.Client{
		Timeout: 10 * time.Second,
		// No keep-alive: an idle connection would hold the proxy's
		// listener busy when the Proxy is deleted.
		Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true},
	}
	d.out.say("GET %s through the proxy at %s", target, proxyURL)
	attempt := 0
	err := d.poll(ctx, "the fetch through the proxy", fetchTimeout, func() error {
		attempt++
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			d.out.say("  attempt %d: %v", attempt, err)
			return err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close() // read to the end or failed: nothing more to learn
		if err != nil {
			d.out.say("  attempt %d: reading the body: %v", attempt, err)
			return err
		}
		d.out.say("  %s", resp.Status)
		d.out.say("  body: %s", strings.TrimSpace(string(body)))
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), originPrefix) {
			return fatal(fmt.Errorf("the fetch through the proxy returned %s %q, not 200 and the origin's answer", resp.Status, strings.TrimSpace(string(body))))
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.fetched = true
	return nil
}

// checkEndpointClosed fails if the deleted Proxy's endpoint still takes
// connections: the operator dropped the finalizer only once the provider
// said the instance was gone, so its listener must be closed.
func (d *demo) checkEndpointClosed(ctx context.Context) error {
	err := d.poll(ctx, d.proxy.endpoint+" to refuse connections", closedTimeout, func() error {
		conn, err := net.DialTimeout("tcp", d.proxy.endpoint, time.Second)
		if err != nil {
			return nil
		}
		_ = conn.Close() // only the accept mattered
		return errors.New("it still accepts connections")
	})
	if errors.Is(err, errTimedOut) {
		return fmt.Errorf("Proxy %s is gone but %s still accepts connections", d.proxy.key, d.proxy.endpoint)
	}
	if err != nil {
		return err
	}
	d.out.say("checked: %s refuses connections now", d.proxy.endpoint)
	return nil
}

// checkNothingLeft fails if the manager, anything in its process group, or
// any process whose command line names this run's directory (the
// kube-apiserver and etcd, see testenv.WithDataDir) still runs. What it
// finds it kills, by PID, so a failed run leaves a clean machine.
func (d *demo) checkNothingLeft() error {
	var left []string
	mgrPID := 0
	if d.mgr != nil {
		mgrPID = d.mgr.pid
		if syscall.Kill(mgrPID, 0) == nil {
			left = append(left, fmt.Sprintf("the manager (pid %d)", mgrPID))
			_ = syscall.Kill(mgrPID, syscall.SIGKILL) // reported above either way
		}
	}
	found, err := childproc.KillLeftovers(d.tmp, mgrPID)
	if errors.Is(err, childproc.ErrNoProcfs) {
		d.out.say("no /proc here: only the manager's PID was checked")
		return nil
	}
	if err != nil {
		return err
	}
	left = append(left, found...)
	if len(left) > 0 {
		return fmt.Errorf("still running after teardown (now killed): %s", strings.Join(left, "; "))
	}
	if mgrPID > 0 {
		d.out.say("checked: the manager (pid %d) is gone, and no process refers to %s", mgrPID, d.tmp)
	} else {
		d.out.say("checked: no process refers to %s", d.tmp)
	}
	return nil
}
