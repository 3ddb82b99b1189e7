package libvirt

import (
	"context"
	"errors"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

var fakeHostConfig = Host{Name: "h1", Address: "192.0.2.1", User: "virt", Socket: DefaultSocket, Pool: DefaultPool, Bridge: "br0"}

// Concurrent callers share one dial.
func TestHostTableSharesOneDial(t *testing.T) {
	h := newFakeHost("h1")
	h.dialGate = newFakeGate()
	table := newHostTable(h.connect)
	t.Cleanup(func() { _ = table.Close() })
	const callers = 5
	got := make(chan backend, callers)
	errs := make(chan error, callers)
	for range callers {
		go func() {
			b, err := table.get(context.Background(), fakeHostConfig)
			if err != nil {
				errs <- err
				return
			}
			got <- b
		}()
	}
	awaitToken(t, "the dial", h.dialGate.arrived)
	h.dialGate.open()
	var first backend
	for range callers {
		select {
		case err := <-errs:
			t.Fatal(err)
		case b := <-got:
			if first == nil {
				first = b
			} else if b != first {
				t.Fatal("callers got different connections")
			}
		}
	}
	if dials, _ := h.counts(); dials != 1 {
		t.Fatalf("%d dials, want 1", dials)
	}
}

// A caller waiting for another's dial stops waiting when its ctx ends.
func TestHostTableWaitEndsWithCtx(t *testing.T) {
	h := newFakeHost("h1")
	h.dialGate = newFakeGate()
	table := newHostTable(h.connect)
	t.Cleanup(func() { _ = table.Close() })
	first := make(chan error, 1)
	go func() {
		_, err := table.get(context.Background(), fakeHostConfig)
		first <- err
	}()
	awaitToken(t, "the first caller's dial", h.dialGate.arrived)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := table.get(ctx, fakeHostConfig); !errors.Is(err, provider.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter with an ended ctx: %v, want Transient wrapping context.Canceled", err)
	}
	h.dialGate.open()
	if err := awaitErr(t, "the first caller", first); err != nil {
		t.Fatal(err)
	}
}

func TestHostTableRedialsADeadConnection(t *testing.T) {
	h := newFakeHost("h1")
	table := newHostTable(h.connect)
	t.Cleanup(func() { _ = table.Close() })
	ctx := context.Background()
	b1, err := table.get(ctx, fakeHostConfig)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := table.get(ctx, fakeHostConfig); b != b1 {
		t.Fatal("a live connection was not reused")
	}
	b1.(*fakeConn).kill()
	b2, err := table.get(ctx, fakeHostConfig)
	if err != nil || b2 == b1 {
		t.Fatalf("after the death: %v, same connection %v", err, b2 == b1)
	}
	if dials, _ := h.counts(); dials != 2 {
		t.Fatalf("%d dials, want 2", dials)
	}
}

// A failed dial is not cached: the next caller dials again.
func TestHostTableDialFailureIsNotCached(t *testing.T) {
	h := newFakeHost("h1")
	h.dialErr = newDialError("h1", "192.0.2.1:22", stageTCP, errors.New("connection refused"))
	table := newHostTable(h.connect)
	t.Cleanup(func() { _ = table.Close() })
	if _, err := table.get(context.Background(), fakeHostConfig); !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("%v, want the dial's Transient error", err)
	}
	h.mu.Lock()
	h.dialErr = nil
	h.mu.Unlock()
	if _, err := table.get(context.Background(), fakeHostConfig); err != nil {
		t.Fatal(err)
	}
}

func TestHostTableFreshIsDedicated(t *testing.T) {
	h := newFakeHost("h1")
	table := newHostTable(h.connect)
	t.Cleanup(func() { _ = table.Close() })
	ctx := context.Background()
	pooled, err := table.get(ctx, fakeHostConfig)
	if err != nil {
		t.Fatal(err)
	}
	f1, err := table.fresh(ctx, fakeHostConfig)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := table.fresh(ctx, fakeHostConfig)
	if err != nil {
		t.Fatal(err)
	}
	if f1 == pooled || f2 == pooled || f1 == f2 {
		t.Fatal("fresh handed out a shared connection")
	}
	_ = f1.Close()
	if b, _ := table.get(ctx, fakeHostConfig); b != pooled {
		t.Fatal("closing a fresh connection disturbed the pooled one")
	}
}

func TestHostTableClose(t *testing.T) {
	h := newFakeHost("h1")
	table := newHostTable(h.connect)
	pooled, err := table.get(context.Background(), fakeHostConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pooled.Disconnected():
	default:
		t.Fatal("Close left the pooled connection open")
	}
	if _, err := table.get(context.Background(), fakeHostConfig); !errors.Is(err, provider.ErrTransient) || !errors.Is(err, errTableClosed) {
		t.Fatalf("get after Close: %v", err)
	}
	if _, err := table.fresh(context.Background(), fakeHostConfig); !errors.Is(err, errTableClosed) {
		t.Fatalf("fresh after Close: %v", err)
	}
}
