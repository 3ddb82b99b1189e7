package registry

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// askProxy sends one request on conn and reads the answer: a relative
// request, which the local proxy refuses (400) without dialling anything,
// so the connection stays open for the next one.
func askProxy(conn net.Conn, r *bufio.Reader) error {
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: proxy\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		return fmt.Errorf("status %d, want 400 from the forward proxy", resp.StatusCode)
	}
	_, err = bufio.NewReader(resp.Body).WriteTo(discardWriter{})
	return err
}

type discardWriter struct{}

func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// TestConfigReloadKeepsLocalInstancesOfUnchangedEntry: item 10, "a config
// reload does not restart every local instance of an unchanged entry". An
// instance of a local entry keeps its listener, and a client its open
// connection, across reloads that leave the entry's settings as they were:
// the same file again (the kubelet's resync), the file reformatted, the
// entry's default written out, and a change to another entry only.
func TestConfigReloadKeepsLocalInstancesOfUnchangedEntry(t *testing.T) {
	r := New(DefaultTypes(), provider.Options{InstallationID: "reload-keep"})
	t.Cleanup(r.Close)
	const initial = "providers:\n- {name: keep, type: local}\n- {name: other, type: local, local: {bindCIDR: 127.0.106.0/24}}\n"
	cm := newConfigMapDir(t, initial)
	res := &results{ch: make(chan struct{}, 10)}
	w := &Watcher{Registry: r, Path: cm.path, OnResult: res.add}
	if err := w.Load(); err != nil {
		t.Fatal(err)
	}
	before, err := r.Get("keep")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	port := testenv.FreePort(t)
	inst, err := before.Provider.Create(ctx, provider.CreateRequest{
		Name: provider.InstanceName("ns", "web", "uid-web", "s"), Namespace: "ns", ProxyName: "web",
		UID: "uid-web", Port: port,
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp4", net.JoinHostPort(inst.IP, fmt.Sprint(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	br := bufio.NewReader(conn)
	if err := askProxy(conn, br); err != nil {
		t.Fatalf("before any reload: %v", err)
	}

	for _, step := range []struct {
		what, content string
		applied       bool // false: the watcher sees the same bytes and applies nothing
	}{
		{"the same file again", initial, false},
		{"the file reformatted", "# reformatted\nproviders:\n  - name: keep\n    type: local\n  - type: local\n    name: other\n    local:\n      bindCIDR: \"127.0.106.0/24\"\n", true},
		{"the default written out", "providers:\n- {name: keep, type: local, local: {bindCIDR: 127.0.100.0/24}}\n- {name: other, type: local, local: {bindCIDR: 127.0.106.0/24}}\n", true},
		{"an empty block", "providers:\n- {name: keep, type: local, local: {}}\n- {name: other, type: local, local: {bindCIDR: 127.0.106.0/24}}\n", true},
		{"only another entry changed", "providers:\n- {name: keep, type: local}\n- {name: other, type: local, local: {bindCIDR: 127.0.107.0/24}}\n", true},
	} {
		cm.swap(step.content)
		w.reload(discard())
		if step.applied {
			if err := res.next(t); err != nil {
				t.Fatalf("%s: refused: %v", step.what, err)
			}
		}
		after, err := r.Get("keep")
		if err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if after != before {
			t.Errorf("%s: the unchanged entry was rebuilt", step.what)
		}
		got, err := after.Provider.Get(ctx, inst.ID)
		if err != nil || got.State != provider.StateRunning || got.IP != inst.IP {
			t.Errorf("%s: Get(%s) = %+v, %v; want Running at %s", step.what, inst.ID, got, err, inst.IP)
		}
		if err := askProxy(conn, br); err != nil {
			t.Fatalf("%s: the open client connection was cut: %v", step.what, err)
		}
	}
}

// blockingStub is a provider whose Get blocks until released, so a test can
// hold a call in flight across an Apply.
type blockingStub struct {
	stub
	entered chan struct{}
	release chan struct{}
	// closedDuringCall is set when Close ran while a call was inside.
	inside, closedDuringCall atomic.Bool
}

func newBlockingStub(name string) *blockingStub {
	return &blockingStub{stub: stub{name: name}, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (b *blockingStub) Get(ctx context.Context, _ string) (provider.Instance, error) {
	b.inside.Store(true)
	defer b.inside.Store(false)
	b.entered <- struct{}{}
	select {
	case <-b.release:
		return provider.Instance{ID: "held"}, nil
	case <-ctx.Done():
		return provider.Instance{}, ctx.Err()
	}
}

func (b *blockingStub) Close() error {
	if b.inside.Load() {
		b.closedDuringCall.Store(true)
	}
	return b.stub.Close()
}

// blockingTypes has one type, "held", whose every build is recorded.
func blockingTypes(built *[]*blockingStub) map[string]Type {
	return map[string]Type{
		"held": descriptor.TypeOf(parseStub, func(name string, c stubConfig, _ provider.Options) (*blockingStub, error) {
			b := newBlockingStub(name)
			b.size = c.Size
			*built = append(*built, b)
			return b, nil
		}, 0),
	}
}

// TestChangedEntryClosedOnlyAfterInFlightCallsEnd: item 10, "a changed
// entry is closed only after its in-flight calls end". A reconcile inside
// a call on the old provider of a replaced (and of a removed) entry
// finishes on an open provider; the old provider is closed once that call
// returned.
func TestChangedEntryClosedOnlyAfterInFlightCallsEnd(t *testing.T) {
	for _, tc := range []struct{ what, next string }{
		{"replaced", "providers:\n- {name: a, type: held, held: {size: 2}}\n"},
		{"removed", "providers: []\n"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var built []*blockingStub
			r := New(blockingTypes(&built), provider.Options{})
			t.Cleanup(r.Close)
			if err := r.Apply(entries(t, r, "providers:\n- {name: a, type: held}\n")); err != nil {
				t.Fatal(err)
			}
			e, err := r.Get("a")
			if err != nil {
				t.Fatal(err)
			}
			old := built[0]
			done := make(chan error, 1)
			go func() {
				_, err := e.Provider.Get(context.Background(), "id")
				done <- err
			}()
			<-old.entered

			if err := r.Apply(entries(t, r, tc.next)); err != nil {
				t.Fatal(err)
			}
			if old.closed.Load() {
				t.Fatal("the old provider was closed while a call was still inside it")
			}
			close(old.release)
			if err := <-done; err != nil {
				t.Fatalf("the in-flight call failed: %v", err)
			}
			testenv.Eventually(t, "the old provider closed once its call ended", old.closed.Load)
			if old.closedDuringCall.Load() {
				t.Error("Close ran while the call was inside the provider")
			}
		})
	}
}

// The drain is bounded: a call that never ends does not keep a replaced
// provider open past DrainTimeout, and a line says it was closed anyway.
// Close, at shutdown, ends every drain at once.
func TestDrainIsBounded(t *testing.T) {
	for _, tc := range []struct {
		what  string
		drain time.Duration
		end   func(r *Registry)
		log   bool
	}{
		{"past DrainTimeout", time.Millisecond, func(*Registry) {}, true},
		{"at Close", time.Hour, func(r *Registry) { r.Close() }, false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var built []*blockingStub
			r := New(blockingTypes(&built), provider.Options{})
			var logged atomic.Int32
			var line atomic.Value
			r.Log = funcr.New(func(_, args string) { line.Store(args); logged.Add(1) }, funcr.Options{})
			r.DrainTimeout = tc.drain
			t.Cleanup(r.Close)
			if err := r.Apply(entries(t, r, "providers:\n- {name: a, type: held}\n")); err != nil {
				t.Fatal(err)
			}
			e, _ := r.Get("a")
			old := built[0]
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = e.Provider.Get(context.Background(), "id") // ends only on release
			}()
			t.Cleanup(func() { close(old.release); <-done })
			<-old.entered

			if err := r.Apply(entries(t, r, "providers: []\n")); err != nil {
				t.Fatal(err)
			}
			tc.end(r)
			testenv.Eventually(t, "the stuck provider closed anyway", old.closed.Load)
			if tc.log {
				testenv.Eventually(t, "a line saying so", func() bool { return logged.Load() == 1 })
				if s, _ := line.Load().(string); !strings.Contains(s, `"provider"="a"`) || !strings.Contains(s, `"inFlight"=1`) {
					t.Errorf("log line %s, want the provider and the calls in flight", s)
				}
			} else if logged.Load() != 0 {
				t.Errorf("Close logged %d lines", logged.Load())
			}
		})
	}
}
