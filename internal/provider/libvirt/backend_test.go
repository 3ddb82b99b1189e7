package libvirt

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// rpcConnector dials the in-process RPC server and runs the real adapter
// over it, counting dials.
type rpcConnector struct {
	srv     *rpcServer
	budgets budgets
	mu      sync.Mutex
	dials   int
}

func (c *rpcConnector) connect(ctx context.Context, h Host) (backend, error) {
	conn, err := c.srv.dial()
	if err != nil {
		return nil, newDialError(h.Name, c.srv.path, stageTCP, err)
	}
	b, err := connectLibvirt(ctx, h.Name, c.srv.path, conn, c.budgets)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.dials++
	c.mu.Unlock()
	return b, nil
}

func (c *rpcConnector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}

var testHost = Host{Name: "h1", Address: "127.0.0.1", User: "root", Socket: DefaultSocket, Pool: DefaultPool, Bridge: "br0"}

// longBudgets never expire within a test, unless a test overrides one RPC.
func longBudgets(rpc map[string]time.Duration) budgets {
	return budgets{dial: time.Hour, call: time.Hour, upload: time.Hour, rpc: rpc}
}

// awaitErr waits for a call's result; the bound only stops a hung test.
func awaitErr(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// awaitToken waits for one token (a call that arrived or was answered).
func awaitToken(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatalf("%s did not happen", what)
	}
}

func assertAlive(t *testing.T, b backend) {
	t.Helper()
	select {
	case <-b.Disconnected():
		t.Fatal("the connection is dead")
	default:
	}
}

// The earlier providers' cancellation gap (kvm: a cancelled call closes the shared
// connection; kvm2: a cancelled call kills the pooled connection once):
// here a cancelled Create stops waiting at once and a concurrent Get on the
// same host, on the same pooled connection, is unharmed, before and after,
// with no redial.
func TestGapCancellingOneCallCutsOffTheOthers(t *testing.T) {
	srv := newRPCServer(t)
	conn := &rpcConnector{srv: srv, budgets: longBudgets(nil)}
	table := newHostTable(conn.connect)
	t.Cleanup(func() { _ = table.Close() })
	held := srv.hold(procDomainCreate)
	ctx := context.Background()

	createCtx, cancel := context.WithCancel(ctx)
	createErr := make(chan error, 1)
	go func() {
		b, err := table.get(createCtx, testHost)
		if err != nil {
			createErr <- err
			return
		}
		createErr <- b.DomainCreate(createCtx, libvirt.Domain{Name: "proxy-a"})
	}()
	awaitToken(t, "DomainCreate reaching the host", held.arrived)

	var pooled backend
	get := func(when string) {
		t.Helper()
		b, err := table.get(ctx, testHost)
		if err != nil {
			t.Fatalf("Get %s: %v", when, err)
		}
		if pooled == nil {
			pooled = b
		} else if b != pooled {
			t.Fatalf("Get %s ran on a new connection: the pooled one was lost", when)
		}
		d, err := b.DomainLookupByName(ctx, "proxy-b")
		if err != nil || d.Name != "proxy-b" {
			t.Fatalf("Get %s: %+v, %v", when, d, err)
		}
		assertAlive(t, b)
	}
	get("while Create is held")

	cancel()
	err := awaitErr(t, "the cancelled Create", createErr)
	if !errors.Is(err, provider.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Create: %v (class %s), want Transient wrapping context.Canceled", err, provider.ClassName(err))
	}
	get("after Create was cancelled, its call still held by the host")

	// The host answers the abandoned call late: the answer is read and
	// dropped, and the connection goes on serving.
	held.open()
	awaitToken(t, "the late answer to the abandoned DomainCreate", srv.answered[procDomainCreate])
	get("after the abandoned call's late answer")

	if n := conn.count(); n != 1 {
		t.Errorf("%d dials, want 1: the cancel must not cost the host its connection", n)
	}
}

// Only a call that outlives its hard budget marks the connection dead:
// then, and only then, the other calls on it fail Transient (naming the
// call that wedged it), and the next call dials a new connection.
func TestOverlongCallKillsConnectionNextCallRedials(t *testing.T) {
	srv := newRPCServer(t)
	conn := &rpcConnector{srv: srv, budgets: longBudgets(map[string]time.Duration{"DomainCreate": 50 * time.Millisecond})}
	table := newHostTable(conn.connect)
	t.Cleanup(func() { _ = table.Close() })
	ctx := context.Background()
	srv.hold(procDomainCreate) // never answered
	heldHostname := srv.hold(procConnectGetHost)

	b, err := table.get(ctx, testHost)
	if err != nil {
		t.Fatal(err)
	}
	otherErr := make(chan error, 1)
	go func() {
		_, err := b.ConnectGetHostname(ctx)
		otherErr <- err
	}()
	awaitToken(t, "ConnectGetHostname reaching the host", heldHostname.arrived)

	err = b.DomainCreate(ctx, libvirt.Domain{Name: "proxy-a"})
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "DomainCreate outlived its budget") {
		t.Fatalf("overlong DomainCreate: %v (class %s), want Transient naming its budget", err, provider.ClassName(err))
	}
	err = awaitErr(t, "the other call on the wedged connection", otherErr)
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "DomainCreate outlived its budget") {
		t.Fatalf("other call on the wedged connection: %v (class %s), want Transient naming DomainCreate", err, provider.ClassName(err))
	}
	select {
	case <-b.Disconnected():
	default:
		t.Fatal("the wedged connection is not marked dead")
	}
	if _, err := b.DomainLookupByName(ctx, "proxy-b"); !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("a call on the dead connection: %v, want Transient", err)
	}

	heldHostname.open()
	b2, err := table.get(ctx, testHost)
	if err != nil {
		t.Fatal(err)
	}
	if b2 == b {
		t.Fatal("the table handed out the dead connection again")
	}
	if name, err := b2.ConnectGetHostname(ctx); err != nil || name != "rpc-host" {
		t.Fatalf("call on the redialled connection: %q, %v", name, err)
	}
	if n := conn.count(); n != 2 {
		t.Errorf("%d dials, want 2 (the first, and one redial)", n)
	}
}

// A ctx that ended before the call sends nothing to the host.
func TestEndedCtxSendsNothing(t *testing.T) {
	srv := newRPCServer(t)
	conn := &rpcConnector{srv: srv, budgets: longBudgets(nil)}
	b, err := conn.connect(context.Background(), testHost)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.DomainLookupByName(ctx, "x"); !errors.Is(err, provider.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Fatalf("call with an ended ctx: %v, want Transient wrapping context.Canceled", err)
	}
	if n := srv.count(procDomainLookup); n != 0 {
		t.Fatalf("%d DomainLookupByName reached the host", n)
	}
	assertAlive(t, b)
}

// libvirt's answer is classified where it arrives, with the code named in
// the message.
func TestLibvirtErrorClassifiedAtSource(t *testing.T) {
	for _, tc := range []struct {
		code  libvirt.ErrorNumber
		msg   string
		class error
	}{
		{libvirt.ErrNoDomain, "Domain not found: no domain with matching name 'x'", provider.ErrNotFound},
		{libvirt.ErrAccessDenied, "access denied: 'domain.read' not permitted", provider.ErrPermanent},
		{libvirt.ErrOperationTimeout, "Timed out during operation: cannot acquire state change lock", provider.ErrTransient},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			srv := newRPCServer(t)
			srv.fail(procDomainLookup, tc.code, tc.msg)
			conn := &rpcConnector{srv: srv, budgets: longBudgets(nil)}
			b, err := conn.connect(context.Background(), testHost)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			_, err = b.DomainLookupByName(context.Background(), "x")
			if provider.ClassOf(err) != tc.class {
				t.Fatalf("%v: class %s, want %v", err, provider.ClassName(err), tc.class)
			}
			if !hasCode(err, tc.code) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "DomainLookupByName on host h1") {
				t.Fatalf("error %q does not carry the code, the message, the RPC and the host", err)
			}
			assertAlive(t, b) // an answer, even an error, is a live connection
		})
	}
}

// A host that drops the connection (libvirtd restarted) fails the calls in
// flight Transient, and the table redials for the next one.
func TestDroppedConnectionFailsCallsInFlightAndRedials(t *testing.T) {
	srv := newRPCServer(t)
	conn := &rpcConnector{srv: srv, budgets: longBudgets(nil)}
	table := newHostTable(conn.connect)
	t.Cleanup(func() { _ = table.Close() })
	ctx := context.Background()
	held := srv.hold(procDomainCreate)
	b, err := table.get(ctx, testHost)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- b.DomainCreate(ctx, libvirt.Domain{Name: "proxy-a"}) }()
	awaitToken(t, "DomainCreate reaching the host", held.arrived)
	srv.closeConns()
	if err := awaitErr(t, "the call in flight", errc); !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("call in flight on a dropped connection: %v, want Transient", err)
	}
	awaitToken(t, "the connection marked dead", b.Disconnected())
	b2, err := table.get(ctx, testHost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b2.ConnectGetLibVersion(ctx); err != nil {
		t.Fatalf("call on the redialled connection: %v", err)
	}
	if n := conn.count(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// A libvirt refusal during connect is a libvirt-stage dialError, classified
// by its code.
func TestConnectLibvirtRefusal(t *testing.T) {
	srv := newRPCServer(t)
	srv.fail(procConnectOpen, libvirt.ErrAccessDenied, "access denied: 'connect.write' not permitted")
	conn := &rpcConnector{srv: srv, budgets: longBudgets(nil)}
	_, err := conn.connect(context.Background(), testHost)
	de, ok := dialErrorOf(err)
	if !ok || de.Stage != stageLibvirt || !errors.Is(err, provider.ErrPermanent) {
		t.Fatalf("refused connect: %v, want a Permanent libvirt-stage dialError", err)
	}
	if r := checkReason(context.Background(), err); r != provider.ReasonForbidden {
		t.Fatalf("check reason %s, want Forbidden", r)
	}
}

func TestBudgetsForRPC(t *testing.T) {
	b := budgets{call: time.Minute, upload: time.Hour, rpc: map[string]time.Duration{"DomainCreate": time.Second}}
	for rpc, want := range map[string]time.Duration{
		"DomainLookupByName": time.Minute, "StorageVolUpload": time.Hour, "DomainCreate": time.Second,
	} {
		if got := b.forRPC(rpc); got != want {
			t.Errorf("forRPC(%s) = %s, want %s", rpc, got, want)
		}
	}
}

// An abandoned upload's source is read no further once its caller's ctx
// ended, so the stream ends instead of running on to its budget.
func TestUploadSourceStopsWithCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &ctxReader{ctx: ctx, r: strings.NewReader("image bytes")}
	buf := make([]byte, 5)
	if n, err := r.Read(buf); n != 5 || err != nil {
		t.Fatalf("read before the cancel: %d, %v", n, err)
	}
	cancel()
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("read after the cancel: %d, %v", n, err)
	}
}
