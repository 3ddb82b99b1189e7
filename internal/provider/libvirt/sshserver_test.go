package libvirt

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// sshServer is an in-process SSH server (x/crypto/ssh) on 127.0.0.1 that
// serves what the provider needs of OpenSSH's sshd: public-key login for
// one user and the direct-streamlocal@openssh.com channel to a unix socket.
// Keepalive requests are answered with a refusal, as sshd does for any
// request it does not know.
//
// Knobs (all safe while running): setHostKeys (the keys it presents),
// authorize (the only client key it accepts), prohibitStreamlocal (refuse
// the channel as sshd does with AllowStreamLocalForwarding no).
type sshServer struct {
	t    testing.TB
	ln   net.Listener
	addr string
	user string

	mu          sync.Mutex
	hostKeys    []ssh.Signer
	authorized  map[string]bool
	prohibit    bool
	socketPaths []string
	conns       []net.Conn
}

func newSSHServer(t testing.TB, user string) *sshServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sshServer{t: t, ln: ln, addr: ln.Addr().String(), user: user, authorized: map[string]bool{}}
	s.setHostKeys(newEd25519Signer(t))
	go s.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
	return s
}

func (s *sshServer) setHostKeys(keys ...ssh.Signer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hostKeys = keys
}

func (s *sshServer) hostKey() ssh.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hostKeys[0].PublicKey()
}

// authorize makes key the only client key accepted.
func (s *sshServer) authorize(key ssh.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authorized = map[string]bool{string(key.Marshal()): true}
}

func (s *sshServer) prohibitStreamlocal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prohibit = true
}

func (s *sshServer) requestedSockets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.socketPaths...)
}

func (s *sshServer) config() *ssh.ServerConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if c.User() == s.user && s.authorized[string(key.Marshal())] {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("key not authorized")
		},
	}
	for _, k := range s.hostKeys {
		cfg.AddHostKey(k)
	}
	return cfg
}

func (s *sshServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		go s.handle(c)
	}
}

// streamLocalOpen is the direct-streamlocal@openssh.com channel's payload.
type streamLocalOpen struct {
	SocketPath string
	Reserved0  string
	Reserved1  uint32
}

func (s *sshServer) handle(c net.Conn) {
	sc, chans, reqs, err := ssh.NewServerConn(c, s.config())
	if err != nil {
		_ = c.Close()
		return
	}
	defer func() { _ = sc.Close() }()
	go func() {
		for r := range reqs {
			if r.WantReply {
				_ = r.Reply(false, nil) // sshd refuses requests it does not know
			}
		}
	}()
	for nc := range chans {
		if nc.ChannelType() != "direct-streamlocal@openssh.com" {
			_ = nc.Reject(ssh.UnknownChannelType, "only direct-streamlocal here")
			continue
		}
		var m streamLocalOpen
		if err := ssh.Unmarshal(nc.ExtraData(), &m); err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, "bad payload")
			continue
		}
		s.mu.Lock()
		s.socketPaths = append(s.socketPaths, m.SocketPath)
		prohibit := s.prohibit
		s.mu.Unlock()
		if prohibit {
			_ = nc.Reject(ssh.Prohibited, "administratively prohibited: open failed")
			continue
		}
		target, err := net.Dial("unix", m.SocketPath)
		if err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, "connect failed: "+err.Error())
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			_ = target.Close()
			continue
		}
		go ssh.DiscardRequests(creqs)
		go func() {
			_, _ = io.Copy(ch, target)
			_ = ch.CloseWrite()
			_ = ch.Close()
		}()
		go func() {
			_, _ = io.Copy(target, ch)
			_ = target.Close()
		}()
	}
}

func newEd25519Signer(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clientKey is a client key pair with its private key in OpenSSH form.
type clientKey struct {
	signer ssh.Signer
	pem    []byte
}

func newClientKey(t testing.TB) clientKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return clientKey{signer: s, pem: pem.EncodeToMemory(block)}
}

// knownHostsLine pins key for addr as OpenSSH writes it.
func knownHostsLine(addr string, key ssh.PublicKey) string {
	return knownhosts.Line([]string{knownhosts.Normalize(addr)}, key) + "\n"
}

// writeFile replaces a credential file atomically, as the kubelet swaps a
// Secret's files.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// freezableConn is a TCP connection whose path can die: once frozen it
// delivers nothing in either direction and reports no error, as a host
// that lost power or a NAT that dropped the flow.
type freezableConn struct {
	net.Conn
	mu     sync.Mutex
	frozen bool
	closed chan struct{}
	once   sync.Once
}

func (c *freezableConn) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
}

func (c *freezableConn) isFrozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen
}

func (c *freezableConn) Read(p []byte) (int, error) {
	for {
		if c.isFrozen() {
			<-c.closed
			return 0, net.ErrClosed
		}
		n, err := c.Conn.Read(p)
		if c.isFrozen() {
			continue // what arrived after the path died never arrives
		}
		return n, err
	}
}

func (c *freezableConn) Write(p []byte) (int, error) {
	if c.isFrozen() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *freezableConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
