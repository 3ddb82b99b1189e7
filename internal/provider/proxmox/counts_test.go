package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// opCounter counts the requests each provider operation makes, at the
// wire (under the instrumented transport).
type opCounter struct {
	mu sync.Mutex
	n  map[string]int
	// calls lists each op's requests, "METHOD path" with the UPID cut.
	calls map[string][]string
}

func (c *opCounter) wire(next http.RoundTripper) http.RoundTripper {
	return rtFunc(func(req *http.Request) (*http.Response, error) {
		op := httpobserve.OpOf(req.Context())
		path := strings.TrimPrefix(req.URL.Path, "/api2/json")
		if i := strings.Index(path, "/UPID:"); i >= 0 {
			path = path[:i] + "/<upid>" + path[strings.LastIndex(path, "/"):]
		}
		c.mu.Lock()
		c.n[op]++
		c.calls[op] = append(c.calls[op], req.Method+" "+path)
		c.mu.Unlock()
		return next.RoundTrip(req)
	})
}

func (c *opCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n, c.calls = map[string]int{}, map[string][]string{}
	return out
}

func (c *opCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := make([]string, 0, len(c.calls))
	for op := range c.calls {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "%s (%d): %s\n", op, len(c.calls[op]), strings.Join(c.calls[op], ", "))
	}
	return b.String()
}

// The request counts the note reports, measured at the wire per
// operation over one lifecycle (the fake's default task length: each task
// answers "running" to its first two status reads). Asserted: a running
// Get makes at most 3 (issue 22: the resources, the agent's interfaces,
// the guest's serving report) and reads the report, ListByTag 1,
// ListSecondary one per node plus 1.
func TestRequestCounts(t *testing.T) {
	e := newEnv(t)
	c := &opCounter{n: map[string]int{}, calls: map[string][]string{}}
	e.p.setWire(c.wire)
	e.p.window = 0
	ctx := context.Background()
	in, err := e.p.Create(ctx, request("proxy-count", "c1111111-2222-3333-4444-555555555555"))
	must(t, err)
	create := c.String()
	t.Logf("Create (the call):\n%s", create)
	c.take()
	testenv.EventuallyNil(t, "create step done", func() error {
		if e.p.steps.Running("proxy-count") {
			return errors.New("create step running")
		}
		return nil
	})
	t.Logf("create step (background):\n%s", c)
	c.take()
	got, err := e.p.Get(ctx, in.ID)
	must(t, err)
	if got.State != provider.StateRunning || got.Serving != provider.ServingAnswering {
		t.Fatalf("Get after the step = %+v, want Running and answering", got)
	}
	t.Logf("running Get:\n%s", c)
	c.mu.Lock()
	calls := strings.Join(c.calls[provider.OpGet], ", ")
	c.mu.Unlock()
	if n := c.take()[provider.OpGet]; n > 3 {
		t.Errorf("a running Get made %d requests, want at most 3: %s", n, calls)
	}
	if !strings.Contains(calls, "/agent/file-read") {
		t.Errorf("a running Get did not read the serving report: %s", calls)
	}
	_, err = e.p.ListByTag(ctx)
	must(t, err)
	t.Logf("ListByTag:\n%s", c)
	if n := c.take()[provider.OpList]; n != 1 {
		t.Errorf("ListByTag made %d requests, want 1", n)
	}
	_, err = e.p.ListSecondary(ctx)
	must(t, err)
	t.Logf("ListSecondary:\n%s", c)
	if n := c.take()[provider.OpListSecondary]; n != len(e.cfg.Nodes)+1 {
		t.Errorf("ListSecondary made %d requests, want %d", n, len(e.cfg.Nodes)+1)
	}
	must(t, e.p.Delete(ctx, in.ID))
	t.Logf("Delete (the call):\n%s", c)
	c.take()
	testenv.EventuallyNil(t, "delete step done", func() error {
		if e.p.dels.Running("proxy-count") {
			return errors.New("delete step running")
		}
		return nil
	})
	t.Logf("delete step (background):\n%s", c)
}
