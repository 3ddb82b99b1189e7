package libvirt

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// DefaultKeepalive is how often an idle SSH connection is probed with a
// keepalive@openssh.com request, and how long an answer may take: a host
// that went away (rebooted, cable pulled, a NAT that dropped the flow) is
// noticed within two intervals instead of at the next call's budget.
const DefaultKeepalive = 15 * time.Second

// sshAuth is how the provider logs in: the files the config names, read on
// every dial and never cached, so a rotated Secret takes effect at the next
// dial without a restart.
type sshAuth struct {
	keyFile        string
	knownHostsFile string
	insecure       bool
}

// hostKeyPolicy says how host keys are checked, for the Checker's details.
func (a sshAuth) hostKeyPolicy() string {
	if a.insecure {
		return "disabled (insecureIgnoreHostKey): any server is accepted"
	}
	return "pinned by " + a.knownHostsFile
}

// clientConfig reads the key and known_hosts and builds the SSH client
// config for one dial of user to hostport. Every error is a credentials
// error that names the file and never quotes its content.
func (a sshAuth) clientConfig(user, hostport string) (*ssh.ClientConfig, error) {
	signer, err := loadSigner(a.keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}}
	if a.insecure {
		cfg.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // the config's explicit, warned choice
		return cfg, nil
	}
	cb, err := loadKnownHosts(a.knownHostsFile)
	if err != nil {
		return nil, err
	}
	cfg.HostKeyCallback = cb
	cfg.HostKeyAlgorithms = pinnedAlgorithms(cb, hostport)
	return cfg, nil
}

// loadSigner reads and parses the private key. A missing, unreadable or
// unparseable key is Permanent: the same dial fails until somebody fixes the
// Secret, and the Checker says CredentialsUnavailable meanwhile.
func loadSigner(file string) (ssh.Signer, error) {
	data, err := readCredential("SSH key", file)
	if err != nil {
		return nil, err
	}
	defer clear(data) // the key's bytes live no longer than the parse
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		// The parser's text is not passed on: it can quote what it found.
		var pme *ssh.PassphraseMissingError
		if errors.As(err, &pme) {
			return nil, provider.Errorf(provider.ErrPermanent,
				"SSH key file %s is encrypted with a passphrase; the provider needs an unencrypted key", file)
		}
		return nil, provider.Errorf(provider.ErrPermanent,
			"SSH key file %s holds no private key in OpenSSH or PEM form", file)
	}
	return signer, nil
}

// loadKnownHosts reads known_hosts. A line that does not parse is named by
// its number only, never quoted.
func loadKnownHosts(file string) (ssh.HostKeyCallback, error) {
	data, err := readCredential("known_hosts", file)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if _, _, _, _, _, err := ssh.ParseKnownHosts(line); err != nil {
			return nil, provider.Errorf(provider.ErrPermanent,
				"known_hosts file %s: line %d is not a known_hosts entry", file, n)
		}
	}
	if sc.Err() != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "known_hosts file %s: a line is longer than 1 MiB", file)
	}
	cb, err := knownhosts.New(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, credentialReadError("known_hosts", file, err)
		}
		return nil, provider.Errorf(provider.ErrPermanent,
			"known_hosts file %s cannot be parsed (a host pattern or marker is malformed)", file)
	}
	return cb, nil
}

// readCredential reads a mounted credential file.
func readCredential(what, file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, credentialReadError(what, file, err)
	}
	return data, nil
}

func credentialReadError(what, file string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return provider.Errorf(provider.ErrPermanent,
			"%s file %s does not exist (is the Secret holding it mounted? see docs/libvirt-provider.md)", what, file)
	case errors.Is(err, fs.ErrPermission):
		return provider.Errorf(provider.ErrPermanent, "%s file %s is not readable by the operator", what, file)
	default:
		return provider.Errorf(provider.ErrTransient, "reading %s file: %w", what, err)
	}
}

// probeKey is a key no host has (the public half of an all-zero seed): the
// host key callback, asked about it, lists every key pinned for the host.
var probeKey = func() ssh.PublicKey {
	pub, err := ssh.NewPublicKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public())
	if err != nil {
		panic(err)
	}
	return pub
}()

// pinnedAlgorithms lists the host key algorithms of the keys known_hosts
// pins for hostport, so the server is asked for a key type we can check.
// Without it a server offering several host keys may present one that is
// not pinned, which would look like a mismatch. Nil (the library's
// default) when nothing is pinned: the handshake then fails as unknown.
func pinnedAlgorithms(cb ssh.HostKeyCallback, hostport string) []string {
	err := cb(hostport, &net.TCPAddr{IP: net.IPv4zero}, probeKey)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			algos = append(algos, a)
		}
	}
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512)
			add(ssh.KeyAlgoRSASHA256)
			add(ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return algos
}

// sshDialer opens the SSH transport to a host's libvirt socket.
type sshDialer struct {
	auth sshAuth
	// keepalive is the probe interval; 0 means DefaultKeepalive.
	keepalive time.Duration
	// dialTCP reaches the SSH server; a net.Dialer in production.
	dialTCP func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newSSHDialer(auth sshAuth) *sshDialer {
	var d net.Dialer
	return &sshDialer{auth: auth, keepalive: DefaultKeepalive, dialTCP: d.DialContext}
}

// dial reads the credentials, connects and authenticates to h's SSH
// server and opens the direct-streamlocal channel to h's libvirt socket,
// all within ctx. The channel is returned as a net.Conn; closing it closes
// the SSH connection. Every error is a classified dialError.
func (d *sshDialer) dial(ctx context.Context, h Host) (*sshSocket, error) {
	hostport, err := sshAddress(h.Address)
	if err != nil { // Validate refused this already
		return nil, newDialError(h.Name, h.Address, stageTCP, provider.Errorf(provider.ErrPermanent, "%v", err))
	}
	cfg, err := d.auth.clientConfig(h.User, hostport)
	if err != nil {
		return nil, newDialError(h.Name, hostport, stageCredentials, err)
	}
	if d.auth.insecure {
		logr.FromContextOrDiscard(ctx).Info("WARNING: SSH host key not verified (insecureIgnoreHostKey is set): anyone on the path can impersonate this host",
			"host", h.Name, "address", hostport)
	}
	tcp, err := d.dialTCP(ctx, "tcp", hostport)
	if err != nil {
		return nil, newDialError(h.Name, hostport, stageTCP, err)
	}
	// The handshake takes no ctx: closing the socket ends it.
	stop := context.AfterFunc(ctx, func() { _ = tcp.Close() })
	c, chans, reqs, err := ssh.NewClientConn(tcp, hostport, cfg)
	if !stop() {
		if err == nil {
			_ = c.Close()
		}
		_ = tcp.Close()
		return nil, newDialError(h.Name, hostport, stageSSH, ctx.Err())
	}
	if err != nil {
		_ = tcp.Close()
		return nil, newDialError(h.Name, hostport, stageSSH, err)
	}
	client := ssh.NewClient(c, chans, reqs)
	ch, err := client.DialContext(ctx, "unix", h.Socket)
	if err != nil {
		_ = client.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, newDialError(h.Name, hostport, stageSocket, err)
	}
	s := &sshSocket{Conn: ch, client: client, closed: make(chan struct{})}
	go s.watch()
	interval := d.keepalive
	if interval <= 0 {
		interval = DefaultKeepalive
	}
	go s.keepalive(interval)
	return s, nil
}

// sshSocket is the channel to the libvirt socket, owning its SSH
// connection: Close closes both, and a connection that dies (keepalive
// unanswered, the server gone) closes the channel, which go-libvirt sees as
// the end of its connection.
type sshSocket struct {
	net.Conn
	client *ssh.Client

	once   sync.Once
	closed chan struct{}
	mu     sync.Mutex
	why    error
}

// Close closes the channel and the SSH connection.
func (s *sshSocket) Close() error {
	s.fail(errors.New("closed by the provider"))
	return nil
}

// cause says why the connection ended (nil while it is up).
func (s *sshSocket) cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.why
}

// fail ends the connection once, recording why.
func (s *sshSocket) fail(why error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.why = why
		s.mu.Unlock()
		close(s.closed)
		_ = s.Conn.Close()
		_ = s.client.Close()
	})
}

// watch records the SSH connection's own end (the server closed it, a read
// failed).
func (s *sshSocket) watch() {
	err := s.client.Wait()
	if err == nil {
		err = errors.New("closed by the server")
	}
	s.fail(fmt.Errorf("SSH connection ended: %w", err))
}

// keepalive probes the server every interval and ends the connection when
// a probe fails or goes unanswered for an interval. Any answer counts, the
// refusal of an unknown request included (OpenSSH's answer).
func (s *sshSocket) keepalive(interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-tick.C:
		}
		answer := make(chan error, 1)
		go func() {
			_, _, err := s.client.SendRequest("keepalive@openssh.com", true, nil)
			answer <- err
		}()
		wait := time.NewTimer(interval)
		select {
		case err := <-answer:
			wait.Stop()
			if err != nil {
				s.fail(fmt.Errorf("SSH keepalive failed: %w", err))
				return
			}
		case <-wait.C:
			s.fail(fmt.Errorf("SSH keepalive unanswered for %s: the host or the path to it is gone", interval))
			return
		case <-s.closed:
			wait.Stop()
			return
		}
	}
}
