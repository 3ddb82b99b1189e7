package conformance

import (
	"net"
	"testing"
	"time"

	libvirtrpc "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
)

// connectRelay is go-libvirt on the relay's socket, directly (the
// provider reaches it through sshd; the framing is the same).
func connectRelay(t *testing.T, r *libvirthost.Relay) *libvirtrpc.Libvirt {
	t.Helper()
	c, err := net.Dial("unix", r.Path)
	if err != nil {
		t.Fatal(err)
	}
	l := libvirtrpc.NewWithDialer(dialers.NewAlreadyConnected(c))
	if err := l.ConnectToURI(libvirtrpc.QEMUSystem); err != nil {
		t.Fatalf("connect through the relay: %v", err)
	}
	t.Cleanup(func() { _ = l.Disconnect() })
	return l
}

// The suite's knobs work on the real wire: the relay forwards to the real
// libvirtd, answers a matched call with the error it was given (without
// forwarding it), and holds a matched call until released, while other
// calls on the same connection go on.
func TestRelayOnTheRealHost(t *testing.T) {
	h := libvirthost.Require(t)
	r := libvirthost.NewRelay(t, h.Socket)
	l := connectRelay(t, r)

	version, err := l.ConnectGetLibVersion()
	if err != nil || version == 0 {
		t.Fatalf("ConnectGetLibVersion through the relay: %d, %v", version, err)
	}

	injected := libvirtrpc.Error{Code: uint32(libvirtrpc.ErrAccessDenied), Message: "injected by the relay test"}
	r.FailNext(libvirthost.ProceduresMentioning("relay-test-domain", libvirthost.ProcDomainLookupByName), injected)
	if _, err := l.DomainLookupByName("another-domain"); !libvirthost.IsError(err, libvirtrpc.ErrNoDomain) {
		t.Fatalf("a lookup the rule does not match: %v, want libvirtd's own no-domain answer", err)
	}
	_, err = l.DomainLookupByName("relay-test-domain")
	if !libvirthost.IsError(err, libvirtrpc.ErrAccessDenied) || err.Error() != injected.Message {
		t.Fatalf("the matched lookup: %v, want the injected %v", err, injected)
	}
	if _, err := l.DomainLookupByName("relay-test-domain"); !libvirthost.IsError(err, libvirtrpc.ErrNoDomain) {
		t.Fatalf("the lookup after the one-shot rule: %v, want libvirtd's own answer", err)
	}

	gate := r.Hold(libvirthost.Procedures(libvirthost.ProcDomainLookupByName), true)
	held := make(chan error, 1)
	go func() {
		_, err := l.DomainLookupByName("held-domain")
		held <- err
	}()
	select {
	case <-gate.Arrived():
	case <-time.After(30 * time.Second):
		t.Fatal("the lookup never reached the hold")
	}
	if _, err := l.ConnectGetHostname(); err != nil {
		t.Fatalf("another call while one is held: %v", err)
	}
	select {
	case err := <-held:
		t.Fatalf("the held lookup returned before its release: %v", err)
	default:
	}
	gate.Release(&libvirtrpc.Error{Code: uint32(libvirtrpc.ErrOperationFailed), Message: "released with an error"})
	if err := <-held; !libvirthost.IsError(err, libvirtrpc.ErrOperationFailed) {
		t.Fatalf("the held lookup after its release with an error: %v", err)
	}

	// A one-shot hold released before its call arrives (the suite releases
	// a create step's hold as soon as Create returned) answers that call
	// as released.
	early := r.Hold(libvirthost.ProceduresMentioning("early-domain", libvirthost.ProcDomainLookupByName), true)
	early.Release(&libvirtrpc.Error{Code: uint32(libvirtrpc.ErrOperationFailed), Message: "released before the call"})
	if _, err := l.DomainLookupByName("early-domain"); !libvirthost.IsError(err, libvirtrpc.ErrOperationFailed) {
		t.Fatalf("a call after its hold's release with an error: %v, want the release's answer", err)
	}
	if _, err := l.DomainLookupByName("early-domain"); !libvirthost.IsError(err, libvirtrpc.ErrNoDomain) {
		t.Fatalf("the next call, the one-shot hold used: %v, want libvirtd's own answer", err)
	}
	if n := r.Calls(libvirthost.ProcDomainLookupByName); n != 6 {
		t.Errorf("the relay counted %d lookups, want 6", n)
	}
}
