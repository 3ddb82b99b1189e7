package libvirt

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// sshFixture is a provider whose one host is the in-process SSH server,
// which forwards to the in-process libvirt RPC server: the production
// connector (credentials, TCP, SSH, streamlocal, libvirt connect) end to end.
type sshFixture struct {
	t          *testing.T
	rpc        *rpcServer
	sshd       *sshServer
	key        clientKey
	keyFile    string
	knownHosts string
	p          *Provider

	mu    sync.Mutex
	conns []*freezableConn
}

func newSSHFixture(t *testing.T, mutate func(*Config)) *sshFixture {
	t.Helper()
	f := &sshFixture{t: t, rpc: newRPCServer(t), sshd: newSSHServer(t, "virt"), key: newClientKey(t)}
	f.sshd.authorize(f.key.signer.PublicKey())
	dir := t.TempDir()
	f.keyFile, f.knownHosts = filepath.Join(dir, "ssh-privatekey"), filepath.Join(dir, "known_hosts")
	writeFile(t, f.keyFile, f.key.pem)
	writeFile(t, f.knownHosts, []byte(knownHostsLine(f.sshd.addr, f.sshd.hostKey())))
	cfg := Config{
		SSHKeyFile: f.keyFile, KnownHostsFile: f.knownHosts,
		Hosts: []Host{{Name: "h1", Address: f.sshd.addr, User: "virt", Socket: f.rpc.path, Bridge: "br0"}},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New("vms", cfg, provider.Options{InstallationID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	p.ssh.dialTCP = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		fc := &freezableConn{Conn: c, closed: make(chan struct{})}
		f.mu.Lock()
		f.conns = append(f.conns, fc)
		f.mu.Unlock()
		return fc, nil
	}
	t.Cleanup(func() { _ = p.Close() })
	f.p = p
	return f
}

func (f *sshFixture) dial(ctx context.Context) (backend, error) {
	return f.p.connect(ctx, f.p.hosts[0])
}

// mustDial dials and proves the connection reaches libvirt.
func (f *sshFixture) mustDial(ctx context.Context) backend {
	f.t.Helper()
	b, err := f.dial(ctx)
	if err != nil {
		f.t.Fatalf("dial: %v", err)
	}
	f.t.Cleanup(func() { _ = b.Close() })
	if name, err := b.ConnectGetHostname(ctx); err != nil || name != "rpc-host" {
		f.t.Fatalf("ConnectGetHostname over SSH: %q, %v", name, err)
	}
	return b
}

// wantRefusal asserts a Permanent ssh-stage refusal, reported Unauthorized
// with a message saying which.
func wantRefusal(t *testing.T, err error, refusal sshRefusal, text string) {
	t.Helper()
	de, ok := dialErrorOf(err)
	if !ok || de.Stage != stageSSH || de.Refusal != refusal {
		t.Fatalf("dial error %v: want an ssh-stage %q refusal", err, refusal)
	}
	if !errors.Is(err, provider.ErrPermanent) {
		t.Errorf("class %s, want Permanent: the same dial is refused again until somebody fixes it", provider.ClassName(err))
	}
	if r := checkReason(context.Background(), err); r != provider.ReasonUnauthorized {
		t.Errorf("check reason %s, want Unauthorized", r)
	}
	if !strings.Contains(err.Error(), text) {
		t.Errorf("message %q does not say %q", err, text)
	}
}

func TestSSHDialReachesTheConfiguredSocket(t *testing.T) {
	f := newSSHFixture(t, nil)
	f.mustDial(context.Background())
	if got := f.sshd.requestedSockets(); len(got) != 1 || got[0] != f.rpc.path {
		t.Fatalf("direct-streamlocal to %v, want exactly [%s]", got, f.rpc.path)
	}
}

func TestSSHKeyRefused(t *testing.T) {
	f := newSSHFixture(t, nil)
	f.sshd.authorize(newClientKey(t).signer.PublicKey())
	_, err := f.dial(context.Background())
	wantRefusal(t, err, refusalKey, "SSH key refused")
}

func TestSSHHostKeyMismatch(t *testing.T) {
	f := newSSHFixture(t, nil)
	writeFile(t, f.knownHosts, []byte(knownHostsLine(f.sshd.addr, newEd25519Signer(t).PublicKey())))
	_, err := f.dial(context.Background())
	wantRefusal(t, err, refusalMismatch, "SSH host key mismatch")
}

func TestSSHUnknownHost(t *testing.T) {
	f := newSSHFixture(t, nil)
	writeFile(t, f.knownHosts, []byte(knownHostsLine("192.0.2.7:22", f.sshd.hostKey())))
	_, err := f.dial(context.Background())
	wantRefusal(t, err, refusalUnknown, "SSH unknown host")
}

// The seed kvm cached the SSH material after the first load, so a rotated
// Secret needed a restart: here the key and known_hosts are read on every
// dial.
func TestGapSSHMaterialCachedUntilRestart(t *testing.T) {
	f := newSSHFixture(t, nil)
	ctx := context.Background()
	f.mustDial(ctx)

	// The client key rotates: the server accepts only the new one.
	next := newClientKey(t)
	f.sshd.authorize(next.signer.PublicKey())
	writeFile(t, f.keyFile, next.pem)
	f.mustDial(ctx)

	// The host key rotates, and known_hosts with it.
	hostKey := newEd25519Signer(t)
	f.sshd.setHostKeys(hostKey)
	writeFile(t, f.knownHosts, []byte(knownHostsLine(f.sshd.addr, hostKey.PublicKey())))
	f.mustDial(ctx)
}

// A host whose path died (no answer at all, no error either) is noticed by
// the keepalive: the connection is marked dead with the keepalive's reason,
// and the host table dials a new one.
func TestSSHKeepaliveDeadConnection(t *testing.T) {
	f := newSSHFixture(t, nil)
	f.p.ssh.keepalive = 20 * time.Millisecond
	ctx := context.Background()
	b, err := f.p.table.get(ctx, f.p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ConnectGetLibVersion(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.conns[0].freeze()
	f.mu.Unlock()
	awaitToken(t, "the keepalive marking the connection dead", b.Disconnected())
	_, err = b.ConnectGetLibVersion(ctx)
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "keepalive unanswered") {
		t.Fatalf("call on the dead connection: %v, want Transient naming the keepalive", err)
	}
	b2, err := f.p.table.get(ctx, f.p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	if b2 == b {
		t.Fatal("the table handed out the dead connection again")
	}
	if _, err := b2.ConnectGetLibVersion(ctx); err != nil {
		t.Fatalf("call on the redialled connection: %v", err)
	}
}

// A server with two host keys where known_hosts pins only the ed25519 one
// (what OpenSSH's ssh-keyscan users often keep): x/crypto prefers RSA over
// ed25519 by default, so without asking for the pinned type the server
// would present its RSA key, a false mismatch.
func TestSSHAsksForThePinnedHostKeyType(t *testing.T) {
	f := newSSHFixture(t, nil)
	ed := f.rsaAndEd25519HostKeys(t)
	writeFile(t, f.knownHosts, []byte(knownHostsLine(f.sshd.addr, ed.PublicKey())))
	f.mustDial(context.Background())
}

func TestSSHStreamlocalProhibited(t *testing.T) {
	f := newSSHFixture(t, nil)
	f.sshd.prohibitStreamlocal()
	_, err := f.dial(context.Background())
	de, ok := dialErrorOf(err)
	if !ok || de.Stage != stageSocket || !errors.Is(err, provider.ErrPermanent) {
		t.Fatalf("prohibited forward: %v, want a Permanent socket-stage dialError", err)
	}
	if r := checkReason(context.Background(), err); r != provider.ReasonForbidden {
		t.Fatalf("check reason %s, want Forbidden", r)
	}
}

// A socket path with nothing listening (libvirtd not running) is a
// Transient socket-stage failure: libvirtd may come back.
func TestSSHSocketNotListening(t *testing.T) {
	f := newSSHFixture(t, func(c *Config) { c.Hosts[0].Socket = "/nonexistent/libvirt-sock" })
	_, err := f.dial(context.Background())
	de, ok := dialErrorOf(err)
	if !ok || de.Stage != stageSocket || !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("no libvirtd: %v, want a Transient socket-stage dialError", err)
	}
	if r := checkReason(context.Background(), err); r != provider.ReasonUnreachable {
		t.Fatalf("check reason %s, want Unreachable", r)
	}
}

func TestSSHServerUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	f := newSSHFixture(t, func(c *Config) { c.Hosts[0].Address = addr })
	_, err = f.dial(context.Background())
	de, ok := dialErrorOf(err)
	if !ok || de.Stage != stageTCP || !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("refused TCP: %v, want a Transient tcp-stage dialError", err)
	}
	if r := checkReason(context.Background(), err); r != provider.ReasonUnreachable {
		t.Fatalf("check reason %s, want Unreachable", r)
	}
}

// A dial cut short by the caller's ctx during the handshake ends at once,
// Transient.
func TestSSHDialHonoursCtx(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan struct{}, 1)
	go func() { // accepts and says nothing: a handshake that never ends
		c, err := ln.Accept()
		if err == nil {
			accepted <- struct{}{}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	f := newSSHFixture(t, func(c *Config) { c.Hosts[0].Address = ln.Addr().String() })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := f.dial(ctx)
		errc <- err
	}()
	awaitToken(t, "the TCP connection", accepted)
	cancel()
	err = awaitErr(t, "the cancelled dial", errc)
	if !errors.Is(err, provider.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled dial: %v, want Transient wrapping context.Canceled", err)
	}
}

// Unusable credential files are Permanent credentials-stage errors
// (CredentialsUnavailable) that name the file and never quote it.
func TestGapCredentialParseErrorsCarryTheParsersText(t *testing.T) {
	const sentinel = "SENTINELsecretMATERIAL"
	for _, tc := range []struct {
		name     string
		key      func(t *testing.T, f *sshFixture) []byte // nil: leave as is
		known    func(t *testing.T, f *sshFixture) []byte
		removeKH bool
		removeK  bool
		want     string
	}{
		{name: "key missing", removeK: true, want: "does not exist"},
		{name: "known_hosts missing", removeKH: true, want: "does not exist"},
		// x/crypto quotes a PEM block's type back ("unsupported key type").
		{name: "key of an unknown PEM type", key: func(*testing.T, *sshFixture) []byte {
			return []byte("-----BEGIN " + sentinel + " PRIVATE KEY-----\nAAAA\n-----END " + sentinel + " PRIVATE KEY-----\n")
		}, want: "holds no private key"},
		{name: "key not a key", key: func(*testing.T, *sshFixture) []byte { return []byte(sentinel + "\n") }, want: "holds no private key"},
		{name: "key encrypted", key: func(t *testing.T, f *sshFixture) []byte { return encryptedKey(t) }, want: "encrypted with a passphrase"},
		{name: "known_hosts line 2 malformed", known: func(t *testing.T, f *sshFixture) []byte {
			return []byte(knownHostsLine(f.sshd.addr, f.sshd.hostKey()) + "somehost ssh-ed25519 " + sentinel + "\n")
		}, want: "line 2 is not a known_hosts entry"},
		// knownhosts quotes an unknown marker back ("unexpected marker").
		{name: "known_hosts unknown marker", known: func(t *testing.T, f *sshFixture) []byte {
			return []byte("@" + sentinel + " " + strings.TrimSuffix(knownHostsLine(f.sshd.addr, f.sshd.hostKey()), "\n") + "\n")
		}, want: "cannot be parsed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSSHFixture(t, nil)
			switch {
			case tc.removeK:
				_ = os.Remove(f.keyFile)
			case tc.removeKH:
				_ = os.Remove(f.knownHosts)
			case tc.key != nil:
				writeFile(t, f.keyFile, tc.key(t, f))
			case tc.known != nil:
				writeFile(t, f.knownHosts, tc.known(t, f))
			}
			var logs bytes.Buffer
			ctx := logr.NewContext(context.Background(), funcr.New(func(prefix, args string) {
				logs.WriteString(prefix + args + "\n")
			}, funcr.Options{Verbosity: 9}))
			_, err := f.dial(ctx)
			de, ok := dialErrorOf(err)
			if !ok || de.Stage != stageCredentials || !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("%v: want a Permanent credentials-stage dialError", err)
			}
			if r := checkReason(context.Background(), err); r != ReasonCredentialsUnavailable {
				t.Errorf("check reason %s, want CredentialsUnavailable", r)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %q does not say %q", err, tc.want)
			}
			for _, secret := range []string{sentinel, string(f.key.pem), pemBody(f.key.pem)} {
				if strings.Contains(err.Error(), secret) || strings.Contains(logs.String(), secret) {
					t.Errorf("key material reached the error or the log: %q / %q", err, logs.String())
				}
			}
			if len(f.sshd.requestedSockets()) != 0 {
				t.Error("a dial with unusable credentials reached the server")
			}
		})
	}
}

// encryptedKey is a passphrase-protected OpenSSH private key.
func encryptedKey(t *testing.T) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(k, "", []byte("passphrase"))
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block)
}

// pemBody is the base64 body of a PEM block: the key itself.
func pemBody(p []byte) string {
	b, _ := pem.Decode(p)
	if b == nil {
		return string(p)
	}
	lines := strings.Split(strings.TrimSpace(string(p)), "\n")
	return strings.Join(lines[1:len(lines)-1], "")
}

// insecureIgnoreHostKey is an explicit, warned choice: any host key is
// accepted, every dial logs a warning, and the Checker says so.
func TestSSHInsecureIgnoreHostKeyIsWarned(t *testing.T) {
	f := newSSHFixture(t, func(c *Config) { c.KnownHostsFile, c.InsecureIgnoreHostKey = "", true })
	writeFile(t, f.knownHosts, []byte(knownHostsLine(f.sshd.addr, newEd25519Signer(t).PublicKey()))) // ignored
	var logs bytes.Buffer
	var mu sync.Mutex
	ctx := logr.NewContext(context.Background(), funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + args + "\n")
	}, funcr.Options{Verbosity: 0}))
	f.mustDial(ctx)
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	if !strings.Contains(got, "SSH host key not verified") || !strings.Contains(got, `"host"="h1"`) {
		t.Fatalf("no V(0) warning naming the host in %q", got)
	}
	res := f.p.Check(context.Background())
	if !strings.Contains(res.Details["hostKeyCheck"], "insecureIgnoreHostKey") || !strings.Contains(res.Message, "not verified") {
		t.Fatalf("the check does not report the disabled host key check: %+v", res)
	}
}

// Hashed known_hosts entries (ssh-keygen -H) pin as well, key type
// selection included.
func TestSSHHashedKnownHosts(t *testing.T) {
	f := newSSHFixture(t, nil)
	ed := f.rsaAndEd25519HostKeys(t)
	line := knownhosts.Line([]string{knownhosts.HashHostname(knownhosts.Normalize(f.sshd.addr))}, ed.PublicKey()) + "\n"
	writeFile(t, f.knownHosts, []byte(line))
	f.mustDial(context.Background())
}

// rsaAndEd25519HostKeys gives the fixture's server an ed25519 and an RSA
// host key and returns the ed25519 one, the one a test pins: x/crypto
// prefers RSA unless the client asks for the pinned type.
func (f *sshFixture) rsaAndEd25519HostKeys(t *testing.T) ssh.Signer {
	t.Helper()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaSigner, err := ssh.NewSignerFromKey(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	ed := newEd25519Signer(t)
	f.sshd.setHostKeys(ed, rsaSigner)
	return ed
}
