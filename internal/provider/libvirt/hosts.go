package libvirt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// connector dials one host and returns its connection behind the seam;
// Provider.connect in production, a double in tests.
type connector func(ctx context.Context, h Host) (backend, error)

// hostTable keeps one pooled connection per host, dialled on first use and
// dialled again after it died. A dial runs under the host's one-slot
// semaphore, so concurrent callers share one dial, and a caller's wait for
// it ends with the caller's ctx.
type hostTable struct {
	connect connector

	mu      sync.Mutex
	closed  bool
	entries map[string]*hostEntry
}

type hostEntry struct {
	// slot is the semaphore; holding it guards b.
	slot chan struct{}
	b    backend
}

// errTableClosed is what a call gets after Close: the operator is shutting
// down or the entry was rebuilt, so it is Transient.
var errTableClosed = errors.New("the provider is closed")

func newHostTable(c connector) *hostTable {
	return &hostTable{connect: c, entries: map[string]*hostEntry{}}
}

func (t *hostTable) entry(name string) (*hostEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, provider.Errorf(provider.ErrTransient, "connecting to host %s: %w", name, errTableClosed)
	}
	e, ok := t.entries[name]
	if !ok {
		e = &hostEntry{slot: make(chan struct{}, 1)}
		t.entries[name] = e
	}
	return e, nil
}

// get returns h's pooled connection, dialling it when there is none or it
// died. The connection is shared: callers never Close it.
func (t *hostTable) get(ctx context.Context, h Host) (backend, error) {
	e, err := t.entry(h.Name)
	if err != nil {
		return nil, err
	}
	select {
	case e.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, provider.Errorf(provider.ErrTransient, "waiting for the connection to host %s: %w", h.Name, ctx.Err())
	}
	defer func() { <-e.slot }()
	if e.b != nil {
		select {
		case <-e.b.Disconnected():
			_ = e.b.Close()
			e.b = nil
		default:
			return e.b, nil
		}
	}
	b, err := t.connect(ctx, h)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed { // Close ran during the dial: do not keep what it cannot see
		_ = b.Close()
		return nil, provider.Errorf(provider.ErrTransient, "connecting to host %s: %w", h.Name, errTableClosed)
	}
	e.b = b
	return b, nil
}

// fresh dials a dedicated connection to h, which the caller closes: the
// Checker's probe (which must not depend on, or disturb, the pooled one)
// and, later, an image upload (which must not hold the pooled one for
// minutes).
func (t *hostTable) fresh(ctx context.Context, h Host) (backend, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, provider.Errorf(provider.ErrTransient, "connecting to host %s: %w", h.Name, errTableClosed)
	}
	return t.connect(ctx, h)
}

// Close closes every pooled connection; later gets fail Transient. It
// waits for a dial in progress (at most the dial budget; the registry calls
// Close once the calls inside the provider ended, so there is none then).
func (t *hostTable) Close() error {
	t.mu.Lock()
	t.closed = true
	entries := make([]*hostEntry, 0, len(t.entries))
	for _, e := range t.entries {
		entries = append(entries, e)
	}
	t.mu.Unlock()
	for _, e := range entries {
		e.slot <- struct{}{}
		if e.b != nil {
			_ = e.b.Close()
			e.b = nil
		}
		<-e.slot
	}
	return nil
}

func (t *hostTable) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("hostTable(%d hosts)", len(t.entries))
}
