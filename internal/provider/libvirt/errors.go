package libvirt

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Errors are classified once, where they arise: every seam call returns a
// *provider.Error whose class comes from classifyRPC (libvirt's error code,
// a dead connection, the caller's ctx), and every dial failure one from
// newDialError (its stage and, for SSH, which refusal). The method boundary
// only adds the provider name and the operation.

// rpcError is a failed seam call: which RPC, on which host, and why. It
// unwraps to go-libvirt's own error (a libvirt.Error carries the code).
type rpcError struct {
	RPC  string
	Host string
	Err  error
}

func (e *rpcError) Error() string {
	var le libvirt.Error
	if errors.As(e.Err, &le) {
		return fmt.Sprintf("%s on host %s: %s (libvirt %s)", e.RPC, e.Host, strings.TrimSpace(le.Message), libvirt.ErrorNumber(le.Code))
	}
	return fmt.Sprintf("%s on host %s: %v", e.RPC, e.Host, e.Err)
}

func (e *rpcError) Unwrap() error { return e.Err }

// classifyRPC gives a failed RPC its class. nil stays nil.
func classifyRPC(rpc, host string, err error) error {
	if err == nil {
		return nil
	}
	return &provider.Error{Class: classOfRPC(err), Err: &rpcError{RPC: rpc, Host: host, Err: err}}
}

// classOfRPC is the class of an error go-libvirt returned.
func classOfRPC(err error) error {
	if code, ok := libvirtCode(err); ok {
		return classOfCode(code, err)
	}
	switch {
	case errors.Is(err, libvirt.ErrUnsupported):
		// The host's libvirt does not know the procedure: it is too old,
		// and stays so until somebody upgrades it.
		return provider.ErrPermanent
	default:
		// libvirt.ErrInterrupted (the connection closed under the call),
		// a socket error, the caller's ctx: try again.
		return provider.ErrTransient
	}
}

// permanentCodes are libvirt's answers that the same request gets again
// until somebody changes the host or the config: a missing pool or network,
// XML or an argument the host refuses, a refused login or permission.
var permanentCodes = map[libvirt.ErrorNumber]bool{
	libvirt.ErrNoStoragePool:        true,
	libvirt.ErrNoNetwork:            true,
	libvirt.ErrXMLError:             true,
	libvirt.ErrXMLDetail:            true,
	libvirt.ErrNoSupport:            true,
	libvirt.ErrInvalidArg:           true,
	libvirt.ErrConfigUnsupported:    true,
	libvirt.ErrArgumentUnsupported:  true,
	libvirt.ErrOperationUnsupported: true,
	libvirt.ErrNoName:               true,
	libvirt.ErrAuthFailed:           true,
	libvirt.ErrAuthCancelled:        true,
	libvirt.ErrAuthUnavailable:      true,
	libvirt.ErrAccessDenied:         true,
}

// Messages of a host out of room. libvirt passes the system's strerror
// through ErrSystemError, ErrInternalError or ErrOperationFailed, so the
// text is what tells a full pool or a host without memory from a passing
// failure.
var quotaMessages = []string{"No space left on device", "Disk quota exceeded", "Cannot allocate memory"}

func classOfCode(code libvirt.ErrorNumber, err error) error {
	switch {
	case code == libvirt.ErrNoDomain, code == libvirt.ErrNoStorageVol, code == libvirt.ErrNoDomainMetadata:
		// What was looked up is not there (for metadata: not ours). Inside
		// Create the caller turns this into Transient (vanished, see
		// reclassify): Create never answers NotFound.
		return provider.ErrNotFound
	case permanentCodes[code]:
		return provider.ErrPermanent
	}
	msg := err.Error()
	for _, q := range quotaMessages {
		if strings.Contains(msg, q) {
			return provider.ErrQuotaExceeded
		}
	}
	// Timeouts, a busy resource, an unresponsive agent, an internal error:
	// the contract's default.
	return provider.ErrTransient
}

// libvirtCode is the libvirt error code err carries, if any.
func libvirtCode(err error) (libvirt.ErrorNumber, bool) {
	var le libvirt.Error
	if errors.As(err, &le) {
		return libvirt.ErrorNumber(le.Code), true
	}
	return 0, false
}

// hasCode says whether err carries one of the libvirt codes.
func hasCode(err error, codes ...libvirt.ErrorNumber) bool {
	code, ok := libvirtCode(err)
	if !ok {
		return false
	}
	for _, c := range codes {
		if code == c {
			return true
		}
	}
	return false
}

// reclassify gives an already classified error another class, dropping the
// old one: provider.Wrap keeps the innermost class, and ClassOf matches
// NotFound before Transient, so wrapping alone could not turn a NotFound
// into a Transient. Create uses it for a volume or domain that vanished
// under it. The message gains what.
func reclassify(err error, class error, what string) error {
	if err == nil {
		return nil
	}
	inner := err
	var pe *provider.Error
	if errors.As(err, &pe) {
		inner = pe.Err
	}
	return &provider.Error{Class: class, Err: fmt.Errorf("%s: %w", what, inner)}
}

// ctxError is the Transient error of a call whose caller's ctx ended.
func ctxError(rpc, host string, err error) error {
	return &provider.Error{Class: provider.ErrTransient, Err: &rpcError{RPC: rpc, Host: host,
		Err: fmt.Errorf("stopped waiting (the connection stays up for other callers): %w", err)}}
}

// The stages of a dial, in order. A failure names its stage: the Checker's
// reason and the class follow from it.
const (
	stageCredentials = "credentials" // reading the key and known_hosts
	stageTCP         = "tcp"         // reaching the SSH server
	stageSSH         = "ssh"         // SSH handshake and authentication
	stageSocket      = "socket"      // the direct-streamlocal channel to the libvirt socket
	stageLibvirt     = "libvirt"     // libvirt's own connect (auth list, open)
)

// sshRefusal says which way SSH refused us, for the message and the
// Checker's Unauthorized.
type sshRefusal string

const (
	refusalNone     sshRefusal = ""
	refusalKey      sshRefusal = "key refused"
	refusalMismatch sshRefusal = "host key mismatch"
	refusalUnknown  sshRefusal = "unknown host"
	refusalRevoked  sshRefusal = "host key revoked"
)

// dialError is a failed dial: the host, the stage, and (for the ssh stage)
// which refusal.
type dialError struct {
	Host    string
	Address string
	Stage   string
	Refusal sshRefusal
	Err     error
}

func (e *dialError) Error() string {
	what := ""
	switch e.Refusal {
	case refusalKey:
		what = "SSH key refused: the server does not accept the configured key for this user; "
	case refusalMismatch:
		what = "SSH host key mismatch: the server's key differs from the one pinned in known_hosts (a re-installed host, or somebody in between); "
	case refusalUnknown:
		what = "SSH unknown host: known_hosts has no key for this address (add the host's key, e.g. from ssh-keyscan checked against the host); "
	case refusalRevoked:
		what = "SSH host key revoked in known_hosts; "
	}
	return fmt.Sprintf("connecting to host %s (%s), stage %s: %s%v", e.Host, e.Address, e.Stage, what, e.Err)
}

func (e *dialError) Unwrap() error { return e.Err }

// newDialError classifies a dial failure once. SSH refusals (key refused,
// host key mismatch, unknown host) and unusable credentials are Permanent:
// the same dial is refused again until somebody fixes the key, known_hosts
// or the host, and the Checker then reports Unauthorized or
// CredentialsUnavailable, whose turn to Healthy releases the latch. A
// refused channel to the socket is Permanent when sshd prohibits
// forwarding; unreachable servers, dropped handshakes and a libvirtd that
// is not running are Transient. A dial cut short by ctx is Transient.
func newDialError(host, address, stage string, err error) error {
	de := &dialError{Host: host, Address: address, Stage: stage, Err: err}
	class := provider.ErrTransient
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	case stage == stageCredentials:
		var pe *provider.Error
		if errors.As(err, &pe) {
			class = pe.Class
		} else {
			class = provider.ErrPermanent
		}
	case stage == stageSSH:
		if de.Refusal = refusalOf(err); de.Refusal != refusalNone {
			class = provider.ErrPermanent
		}
	case stage == stageSocket:
		var oce *ssh.OpenChannelError
		if errors.As(err, &oce) && oce.Reason == ssh.Prohibited {
			class = provider.ErrPermanent
		}
	case stage == stageLibvirt:
		class = classOfRPC(err)
	}
	// The dialError is the message; the class must not come from a
	// provider.Error inside it, so strip one.
	var pe *provider.Error
	if errors.As(err, &pe) {
		de.Err = pe.Err
	}
	return &provider.Error{Class: class, Err: de}
}

// refusalOf says which SSH refusal err is, if any. x/crypto/ssh wraps the
// host key callback's error with %w; authentication failure has no type,
// only its text, which x/crypto has kept since its first release.
func refusalOf(err error) sshRefusal {
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case errors.As(err, &re):
		return refusalRevoked
	case errors.As(err, &ke) && len(ke.Want) > 0:
		return refusalMismatch
	case errors.As(err, &ke):
		return refusalUnknown
	case strings.Contains(err.Error(), "ssh: unable to authenticate"):
		return refusalKey
	}
	return refusalNone
}

// dialErrorOf finds the dialError in err.
func dialErrorOf(err error) (*dialError, bool) {
	var de *dialError
	ok := errors.As(err, &de)
	return de, ok
}
