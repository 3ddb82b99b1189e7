package libvirt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func TestClassifyRPC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		class error
	}{
		{"no domain", lvErr(libvirt.ErrNoDomain, "Domain not found"), provider.ErrNotFound},
		{"no volume", lvErr(libvirt.ErrNoStorageVol, "Storage volume not found"), provider.ErrNotFound},
		{"no metadata", lvErr(libvirt.ErrNoDomainMetadata, "metadata not found"), provider.ErrNotFound},
		{"no pool", lvErr(libvirt.ErrNoStoragePool, "Storage pool not found"), provider.ErrPermanent},
		{"no network", lvErr(libvirt.ErrNoNetwork, "Network not found"), provider.ErrPermanent},
		{"xml", lvErr(libvirt.ErrXMLError, "XML error: bad"), provider.ErrPermanent},
		{"xml detail", lvErr(libvirt.ErrXMLDetail, "XML error: detail"), provider.ErrPermanent},
		{"unsupported config", lvErr(libvirt.ErrConfigUnsupported, "unsupported configuration"), provider.ErrPermanent},
		{"invalid arg", lvErr(libvirt.ErrInvalidArg, "invalid argument"), provider.ErrPermanent},
		{"auth failed", lvErr(libvirt.ErrAuthFailed, "authentication failed"), provider.ErrPermanent},
		{"access denied", lvErr(libvirt.ErrAccessDenied, "access denied"), provider.ErrPermanent},
		{"pool full", lvErr(libvirt.ErrSystemError, "cannot allocate 10737418240 bytes in file '/var/lib/libvirt/images/x': No space left on device"), provider.ErrQuotaExceeded},
		{"no memory for qemu", lvErr(libvirt.ErrInternalError, "process exited while connecting to monitor: qemu: cannot set up guest memory 'pc.ram': Cannot allocate memory"), provider.ErrQuotaExceeded},
		{"quota", lvErr(libvirt.ErrOperationFailed, "write: Disk quota exceeded"), provider.ErrQuotaExceeded},
		{"timeout", lvErr(libvirt.ErrOperationTimeout, "Timed out during operation"), provider.ErrTransient},
		{"busy", lvErr(libvirt.ErrResourceBusy, "resource busy"), provider.ErrTransient},
		{"agent", lvErr(libvirt.ErrAgentUnresponsive, "Guest agent is not responding"), provider.ErrTransient},
		{"operation invalid", lvErr(libvirt.ErrOperationInvalid, "domain is not running"), provider.ErrTransient},
		{"internal", lvErr(libvirt.ErrInternalError, "internal error"), provider.ErrTransient},
		{"interrupted", libvirt.ErrInterrupted, provider.ErrTransient},
		{"socket gone", syscall.EINVAL, provider.ErrTransient},
		{"unknown procedure", libvirt.ErrUnsupported, provider.ErrPermanent},
		{"wrapped code", fmt.Errorf("while x: %w", lvErr(libvirt.ErrNoDomain, "gone")), provider.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := classifyRPC("DomainLookupByName", "h1", tc.err)
			if got := provider.ClassOf(err); got != tc.class {
				t.Fatalf("%v: class %v, want %v", err, got, tc.class)
			}
			if !strings.HasPrefix(err.Error(), "DomainLookupByName on host h1: ") && !strings.Contains(err.Error(), "DomainLookupByName on host h1: ") {
				t.Errorf("message %q does not name the RPC and the host", err)
			}
			// The boundary adds name and operation and keeps the class.
			wrapped := provider.Wrap("vms", provider.OpCreate, nil, err)
			if provider.ClassOf(wrapped) != tc.class || !strings.Contains(wrapped.Error(), `provider "vms": create: `) {
				t.Errorf("boundary wrap: %v (%s)", wrapped, provider.ClassName(wrapped))
			}
		})
	}
	if classifyRPC("X", "h", nil) != nil {
		t.Error("nil did not stay nil")
	}
}

func TestRPCErrorNamesTheCode(t *testing.T) {
	err := classifyRPC("StorageVolLookupByName", "beelink", lvErr(libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name 'x.qcow2' "))
	want := "StorageVolLookupByName on host beelink: Storage volume not found: no storage vol with matching name 'x.qcow2' (libvirt ErrNoStorageVol)"
	var re *rpcError
	if !errors.As(err, &re) || re.Error() != want {
		t.Fatalf("got %q\nwant %q", err, want)
	}
	if !hasCode(err, libvirt.ErrNoDomain, libvirt.ErrNoStorageVol) || hasCode(err, libvirt.ErrNoDomain) {
		t.Fatal("hasCode does not see the code")
	}
}

// A volume or domain that vanishes mid-create is Transient, never NotFound:
// plain wrapping cannot do that (the inner NotFound would still match).
func TestReclassifyDropsTheOldClass(t *testing.T) {
	gone := classifyRPC("StorageVolGetPath", "h1", lvErr(libvirt.ErrNoStorageVol, "Storage volume not found"))
	err := reclassify(gone, provider.ErrTransient, "the overlay vanished during create")
	if errors.Is(err, provider.ErrNotFound) || provider.ClassOf(err) != provider.ErrTransient {
		t.Fatalf("%v: class %s, NotFound still matches: %v", err, provider.ClassName(err), errors.Is(err, provider.ErrNotFound))
	}
	if !hasCode(err, libvirt.ErrNoStorageVol) || !strings.Contains(err.Error(), "the overlay vanished during create: StorageVolGetPath") {
		t.Fatalf("%q lost the cause", err)
	}
	// Plain wrapping would not do: the proof the helper is needed.
	naive := &provider.Error{Class: provider.ErrTransient, Err: gone}
	if provider.ClassOf(naive) != provider.ErrNotFound {
		t.Fatal("the naive wrap no longer keeps NotFound; reclassify may be redundant")
	}
	if reclassify(nil, provider.ErrTransient, "x") != nil {
		t.Fatal("nil did not stay nil")
	}
}

func TestCtxErrorIsTransientAndSaysTheConnectionStays(t *testing.T) {
	err := ctxError("DomainCreate", "h1", context.DeadlineExceeded)
	if !errors.Is(err, provider.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection stays up") {
		t.Fatalf("%v", err)
	}
}

func TestNewDialError(t *testing.T) {
	keyErrUnknown := fmt.Errorf("ssh: handshake failed: %w", &knownhosts.KeyError{})
	keyErrMismatch := fmt.Errorf("ssh: handshake failed: %w", &knownhosts.KeyError{Want: []knownhosts.KnownKey{{Key: probeKey}}})
	revoked := fmt.Errorf("ssh: handshake failed: %w", &knownhosts.RevokedError{})
	authText := errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain")
	for _, tc := range []struct {
		name    string
		stage   string
		err     error
		class   error
		refusal sshRefusal
		reason  string
	}{
		{"missing key", stageCredentials, provider.Errorf(provider.ErrPermanent, "SSH key file /k does not exist"), provider.ErrPermanent, refusalNone, ReasonCredentialsUnavailable},
		{"key read hiccup", stageCredentials, provider.Errorf(provider.ErrTransient, "reading SSH key file: EIO"), provider.ErrTransient, refusalNone, ReasonCredentialsUnavailable},
		{"tcp refused", stageTCP, syscall.ECONNREFUSED, provider.ErrTransient, refusalNone, provider.ReasonUnreachable},
		{"tcp budget", stageTCP, context.DeadlineExceeded, provider.ErrTransient, refusalNone, provider.ReasonUnreachable},
		{"key refused", stageSSH, authText, provider.ErrPermanent, refusalKey, provider.ReasonUnauthorized},
		{"unknown host", stageSSH, keyErrUnknown, provider.ErrPermanent, refusalUnknown, provider.ReasonUnauthorized},
		{"mismatch", stageSSH, keyErrMismatch, provider.ErrPermanent, refusalMismatch, provider.ReasonUnauthorized},
		{"revoked", stageSSH, revoked, provider.ErrPermanent, refusalRevoked, provider.ReasonUnauthorized},
		{"handshake EOF", stageSSH, errors.New("ssh: handshake failed: EOF"), provider.ErrTransient, refusalNone, provider.ReasonUnreachable},
		{"handshake cut by ctx", stageSSH, context.Canceled, provider.ErrTransient, refusalNone, provider.ReasonUnreachable},
		{"forward prohibited", stageSocket, &ssh.OpenChannelError{Reason: ssh.Prohibited, Message: "administratively prohibited"}, provider.ErrPermanent, refusalNone, provider.ReasonForbidden},
		{"socket missing", stageSocket, &ssh.OpenChannelError{Reason: ssh.ConnectionFailed, Message: "connect failed"}, provider.ErrTransient, refusalNone, provider.ReasonUnreachable},
		{"libvirt denied", stageLibvirt, lvErr(libvirt.ErrAccessDenied, "access denied"), provider.ErrPermanent, refusalNone, provider.ReasonForbidden},
		{"libvirt interrupted", stageLibvirt, libvirt.ErrInterrupted, provider.ErrTransient, refusalNone, provider.ReasonUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newDialError("h1", "192.0.2.10:22", tc.stage, tc.err)
			if got := provider.ClassOf(err); got != tc.class {
				t.Errorf("class %v, want %v: %v", got, tc.class, err)
			}
			de, ok := dialErrorOf(err)
			if !ok || de.Stage != tc.stage || de.Refusal != tc.refusal {
				t.Fatalf("dialError %+v, want stage %s refusal %q", de, tc.stage, tc.refusal)
			}
			if r := checkReason(context.Background(), err); r != tc.reason {
				t.Errorf("check reason %s, want %s", r, tc.reason)
			}
			if !strings.Contains(err.Error(), "connecting to host h1 (192.0.2.10:22), stage "+tc.stage) {
				t.Errorf("message %q does not name the host, address and stage", err)
			}
			if tc.refusal != refusalNone && !strings.Contains(err.Error(), string(tc.refusal)) {
				t.Errorf("message %q does not say %q", err, tc.refusal)
			}
			// An ended round is Timeout whatever the stage.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if r := checkReason(ctx, err); r != provider.ReasonTimeout {
				t.Errorf("check reason with the round's ctx ended: %s, want Timeout", r)
			}
		})
	}
}

func TestCheckReasonOfRPCErrors(t *testing.T) {
	bg := context.Background()
	for _, tc := range []struct {
		err    error
		reason string
	}{
		{classifyRPC("StoragePoolLookupByName", "h", lvErr(libvirt.ErrNoStoragePool, "no pool")), ReasonPoolNotFound},
		{classifyRPC("ConnectGetLibVersion", "h", lvErr(libvirt.ErrAccessDenied, "denied")), provider.ReasonForbidden},
		{classifyRPC("ConnectGetLibVersion", "h", lvErr(libvirt.ErrInternalError, "boom")), provider.ReasonAPIError},
		{classifyRPC("ConnectGetLibVersion", "h", libvirt.ErrInterrupted), provider.ReasonUnreachable},
		{ctxError("ConnectGetLibVersion", "h", context.DeadlineExceeded), provider.ReasonUnreachable},
	} {
		if r := checkReason(bg, tc.err); r != tc.reason {
			t.Errorf("checkReason(%v) = %s, want %s", tc.err, r, tc.reason)
		}
	}
}
