package registry

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// configMapDir lays out a directory the way the kubelet mounts a
// ConfigMap: the file is a symlink through ..data to a timestamped
// directory, and an update swaps ..data atomically.
type configMapDir struct {
	t    *testing.T
	dir  string
	gen  int
	path string
}

func newConfigMapDir(t *testing.T, content string) *configMapDir {
	c := &configMapDir{t: t, dir: t.TempDir()}
	c.path = filepath.Join(c.dir, "providers.yaml")
	c.swap(content)
	if err := os.Symlink(filepath.Join("..data", "providers.yaml"), c.path); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *configMapDir) swap(content string) {
	c.t.Helper()
	c.gen++
	ts := filepath.Join(c.dir, "..2026_11_30_"+string(rune('a'+c.gen)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "providers.yaml"), []byte(content), 0o644); err != nil {
		c.t.Fatal(err)
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
}

// results collects the watcher's outcomes.
type results struct {
	mu   sync.Mutex
	errs []error
	ch   chan struct{}
}

func (r *results) add(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

// next waits for the next outcome; the bound only stops a hung test.
func (r *results) next(t *testing.T) error {
	t.Helper()
	select {
	case <-r.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher reported nothing")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[len(r.errs)-1]
}

func TestWatcherReloadsOnConfigMapSwap(t *testing.T) {
	var built []*stub
	r := New(testTypes(&built), provider.Options{})
	cm := newConfigMapDir(t, "providers:\n- {name: a, type: plain}\n")
	res := &results{ch: make(chan struct{}, 10)}
	// A short resync covers a swap that lands before the watch is set up.
	w := &Watcher{Registry: r, Path: cm.path, Resync: 200 * time.Millisecond, Debounce: 10 * time.Millisecond, OnResult: res.add}
	if err := w.Load(); err != nil {
		t.Fatal(err)
	}
	a1, _ := r.Get("a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// A valid change adds b and keeps a as it was.
	cm.swap("providers:\n- {name: a, type: plain}\n- {name: b, type: plain}\n")
	if err := res.next(t); err != nil {
		t.Fatalf("valid change refused: %v", err)
	}
	if _, err := r.Get("b"); err != nil {
		t.Fatalf("b not added: %v", err)
	}
	if a2, _ := r.Get("a"); a2 != a1 {
		t.Error("unchanged a was rebuilt")
	}
	if v := testutil.ToFloat64(reloadSuccess); v != 1 {
		t.Errorf("reload gauge = %v", v)
	}

	// An invalid change is refused with its path; the old set runs on.
	cm.swap("providers:\n- {name: a, type: plain, plain: {size: 0}}\n")
	err := res.next(t)
	if err == nil || !strings.Contains(err.Error(), "providers[0].plain.size: Invalid value: 0") {
		t.Fatalf("invalid change: err = %v", err)
	}
	if _, err := r.Get("b"); err != nil {
		t.Error("an invalid change removed b")
	}
	if v := testutil.ToFloat64(reloadSuccess); v != 0 {
		t.Errorf("reload gauge after a refusal = %v", v)
	}

	// Fixing it applies again.
	cm.swap("providers:\n- {name: a, type: plain}\n")
	if err := res.next(t); err != nil {
		t.Fatalf("fixed change refused: %v", err)
	}
	if _, err := r.Get("b"); err == nil {
		t.Error("b still there after it left the config")
	}
}

// The periodic re-read picks up a change even when no event came, and
// re-reading unchanged content applies nothing.
func TestWatcherResyncWithoutEvents(t *testing.T) {
	var built []*stub
	r := New(testTypes(&built), provider.Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "providers.yaml")
	if err := os.WriteFile(path, []byte("providers:\n- {name: a, type: plain}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := &results{ch: make(chan struct{}, 10)}
	w := &Watcher{Registry: r, Path: path, OnResult: res.add}
	if err := w.Load(); err != nil {
		t.Fatal(err)
	}
	w.reload(discard())
	if len(res.errs) != 0 || len(built) != 1 {
		t.Fatalf("an unchanged file was applied: %d results, %d built", len(res.errs), len(built))
	}
	if err := os.WriteFile(path, []byte("providers:\n- {name: c, type: plain}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.reload(discard())
	if err := res.next(t); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get("c"); err != nil {
		t.Error("resync did not apply the change")
	}
}

func discard() logr.Logger { return logr.Discard() }
