// Package libvirthost gives tests the libvirt test host that
// hack/libvirt/up.sh brings up: a real libvirtd and OpenSSH server inside a
// network namespace with no route out, described by an env file.
//
// Require decides whether a test runs. Without an env file (neither
// $LIBVIRT_TEST_ENV nor DefaultEnvFile exists) the test is skipped with a
// message saying how to bring the host up. Once an env file is there,
// nothing is skipped: a malformed file, a test running outside the host's
// namespace, a missing guest image or a failed dial fails the test, so a
// broken host can never pass as an absent one.
package libvirthost

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// EnvVar names the env file; hack/libvirt/run.sh sets it.
const EnvVar = "LIBVIRT_TEST_ENV"

// DefaultEnvFile is where up.sh writes the env file of the default host
// (LIBVIRT_TEST_NAME and LIBVIRT_TEST_STATE unset).
const DefaultEnvFile = "/run/egress-proxies-operator/libvirt-test/egress-lv/libvirt-test.env"

// Host is one test host, as its env file describes it.
type Host struct {
	Name  string // LIBVIRT_TEST_NAME
	NetNS string // LIBVIRT_TEST_NETNS: the namespace everything runs in
	State string // LIBVIRT_TEST_STATE: up.sh's state dir

	SSHAddr       string // LIBVIRT_TEST_SSH_ADDR: sshd, on the namespace's loopback
	SSHUser       string // LIBVIRT_TEST_SSH_USER
	SSHKey        string // LIBVIRT_TEST_SSH_KEY: the client's private key
	SSHKnownHosts string // LIBVIRT_TEST_SSH_KNOWN_HOSTS: sshd's pinned host key

	Socket string // LIBVIRT_TEST_SOCKET: libvirtd's socket, for direct-streamlocal
	URI    string // LIBVIRT_TEST_URI

	Pool     string // LIBVIRT_TEST_POOL: a dir pool, running
	PoolPath string // LIBVIRT_TEST_POOL_PATH
	Bridge   string // LIBVIRT_TEST_BRIDGE: IP-less, no uplink

	// DomainType is "qemu" (emulation) unless hardware virtualisation
	// really works on this machine ("kvm").
	DomainType string // LIBVIRT_TEST_DOMAIN_TYPE

	LogDir     string // LIBVIRT_TEST_LOG_DIR: libvirtd.log, sshd.log
	QEMULogDir string // LIBVIRT_TEST_QEMU_LOG_DIR: QEMU's per-domain logs; consoles may go here
	GuestDir   string // LIBVIRT_TEST_GUEST_DIR: build-guest.sh's cache dir
}

// fields maps the env file's keys to Host's fields; every key is required.
func (h *Host) fields() map[string]*string {
	return map[string]*string{
		"LIBVIRT_TEST_NAME":            &h.Name,
		"LIBVIRT_TEST_NETNS":           &h.NetNS,
		"LIBVIRT_TEST_STATE":           &h.State,
		"LIBVIRT_TEST_SSH_ADDR":        &h.SSHAddr,
		"LIBVIRT_TEST_SSH_USER":        &h.SSHUser,
		"LIBVIRT_TEST_SSH_KEY":         &h.SSHKey,
		"LIBVIRT_TEST_SSH_KNOWN_HOSTS": &h.SSHKnownHosts,
		"LIBVIRT_TEST_SOCKET":          &h.Socket,
		"LIBVIRT_TEST_URI":             &h.URI,
		"LIBVIRT_TEST_POOL":            &h.Pool,
		"LIBVIRT_TEST_POOL_PATH":       &h.PoolPath,
		"LIBVIRT_TEST_BRIDGE":          &h.Bridge,
		"LIBVIRT_TEST_DOMAIN_TYPE":     &h.DomainType,
		"LIBVIRT_TEST_LOG_DIR":         &h.LogDir,
		"LIBVIRT_TEST_QEMU_LOG_DIR":    &h.QEMULogDir,
		"LIBVIRT_TEST_GUEST_DIR":       &h.GuestDir,
	}
}

// Parse reads an env file: KEY=VALUE lines, blank lines and # comments.
// Every key Host knows must be there and non-empty; others are ignored.
func Parse(data []byte) (*Host, error) {
	h := &Host{}
	fields := h.fields()
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not KEY=VALUE", n, line)
		}
		if f, known := fields[k]; known {
			*f = v
			seen[k] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var missing []string
	for k, f := range fields {
		if !seen[k] || *f == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing or empty: %s", strings.Join(slices.Sorted(slices.Values(missing)), ", "))
	}
	if h.DomainType != "qemu" && h.DomainType != "kvm" {
		return nil, fmt.Errorf("LIBVIRT_TEST_DOMAIN_TYPE=%q: want qemu or kvm", h.DomainType)
	}
	return h, nil
}

// upHint is how to get a host, for skip and failure messages.
const upHint = "`make test-libvirt PKG=<package>` brings a host up, runs the package inside it and tears it down"

// lookup is Require's decision, apart from testing.TB so it can be tested:
// a nil Host and an empty error mean skip (with skip as the message).
func lookup(getenv func(string) string, defaultFile string, inNamespace func(string) (bool, error)) (h *Host, skip string, err error) {
	path, explicit := getenv(EnvVar), true
	if path == "" {
		path, explicit = defaultFile, false
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		return nil, fmt.Sprintf("no libvirt test host (no %s and %s unset): %s", defaultFile, EnvVar, upHint), nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, "", fmt.Errorf("%s=%s: the env file does not exist: is the test host down? %s", EnvVar, path, upHint)
	case err != nil:
		return nil, "", fmt.Errorf("libvirt test host env file %s: %w", path, err)
	}
	h, err = Parse(data)
	if err != nil {
		return nil, "", fmt.Errorf("libvirt test host env file %s: %w", path, err)
	}
	in, err := inNamespace(h.NetNS)
	if err != nil {
		return nil, "", fmt.Errorf("libvirt test host %s (env file %s): %w", h.Name, path, err)
	}
	if !in {
		return nil, "", fmt.Errorf("libvirt test host %s is up (env file %s) but this test runs outside its network namespace %s, "+
			"where its sshd and the guests' port forwards are: run it through hack/libvirt/run.sh (go test -exec), "+
			"or `make test-libvirt PKG=<package>`; `make libvirt-down` removes the host", h.Name, path, h.NetNS)
	}
	return h, "", nil
}

// InNamespace reports whether this process is in the named network
// namespace (the one `ip netns add` made).
func InNamespace(name string) (bool, error) {
	want, err := os.Stat(filepath.Join("/run/netns", name))
	if err != nil {
		return false, fmt.Errorf("network namespace %s: %w", name, err)
	}
	self, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		return false, fmt.Errorf("this process's network namespace: %w", err)
	}
	a, ok1 := want.Sys().(*syscall.Stat_t)
	b, ok2 := self.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 {
		return false, errors.New("cannot compare network namespaces on this platform")
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// Require returns the test host, skips the test when there is none (no
// env file), and fails it when there is one that does not work.
func Require(t testing.TB) *Host {
	t.Helper()
	h, skip, err := lookup(os.Getenv, DefaultEnvFile, InNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		t.Skip(skip)
	}
	if err := Contained(); err != nil {
		t.Fatalf("libvirt test host %s: %v", h.Name, err)
	}
	return h
}

// Contained checks, without sending anything, that this process's network
// namespace has no way out: no IPv4 route, no IPv6 route but the kernel's
// reject entries, and no address but loopback ones.
func Contained() error {
	route4, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return err
	}
	route6, err := os.ReadFile("/proc/net/ipv6_route")
	if err != nil && !errors.Is(err, fs.ErrNotExist) { // no IPv6 at all
		return err
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return err
	}
	return contained(route4, route6, addrs)
}

// rtfReject is RTF_REJECT (linux/route.h): an entry that refuses.
const rtfReject = 0x0200

// BridgeNet is the documentation range (TEST-NET-3, RFC 5737) the address
// pool tests give the namespace's bridge and its guests: it leads nowhere
// (the bridge has no uplink), so its address and its on-link route are
// the only ones Contained lets by. The machine's own network is never
// one of these ranges' neighbours here: a test outside the namespace
// reaching for it finds no route.
var BridgeNet = netip.MustParsePrefix("203.0.113.0/24")

// bridgeRoute4Dest and bridgeRoute4Mask are BridgeNet's on-link route as
// /proc/net/route writes it: each address's bytes in the kernel's
// (little-endian) order.
var bridgeRoute4Dest, bridgeRoute4Mask = procRouteHex(BridgeNet.Addr().As4()), procRouteHex([4]byte(net.CIDRMask(BridgeNet.Bits(), 32)))

func procRouteHex(b [4]byte) string { return fmt.Sprintf("%02X%02X%02X%02X", b[3], b[2], b[1], b[0]) }

func contained(route4, route6 []byte, addrs []net.Addr) error {
	lines := strings.Split(strings.TrimSpace(string(route4)), "\n")
	var out []string
	for _, l := range lines[min(1, len(lines)):] { // the first is the header
		f := strings.Fields(l)
		if len(f) >= 8 && f[1] == bridgeRoute4Dest && f[2] == "00000000" && f[7] == bridgeRoute4Mask {
			continue
		}
		out = append(out, l)
	}
	if len(out) > 0 {
		return fmt.Errorf("the network namespace is not contained: it has IPv4 routes:\n%s", strings.Join(out, "\n"))
	}
	for _, l := range strings.Split(strings.TrimSpace(string(route6)), "\n") {
		f := strings.Fields(l)
		if len(f) < 10 {
			continue
		}
		var flags uint64
		if _, err := fmt.Sscanf(f[8], "%x", &flags); err != nil || flags&rtfReject == 0 {
			return fmt.Errorf("the network namespace is not contained: it has an IPv6 route: %s", l)
		}
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && BridgeNet.Contains(ip.Unmap()) {
				continue
			}
		}
		if !ok || !ipn.IP.IsLoopback() {
			return fmt.Errorf("the network namespace is not contained: it has the address %s", a)
		}
	}
	return nil
}

// Guest is build-guest.sh's image: a Debian 12 disk with cloud-init, the
// QEMU guest agent and Squid, booting under SeaBIOS from the disk.
type Guest struct {
	Dir    string
	Image  string // guest.qcow2
	SHA256 string // its hex sha256
	Kernel string // vmlinuz, for direct kernel boot
	Initrd string // initrd.img
	// Cmdline is the kernel command line for direct kernel boot.
	Cmdline string
}

// Guest returns the guest image the env file names.
func (h *Host) Guest() (Guest, error) {
	g := Guest{
		Dir:    h.GuestDir,
		Image:  filepath.Join(h.GuestDir, "guest.qcow2"),
		Kernel: filepath.Join(h.GuestDir, "vmlinuz"),
		Initrd: filepath.Join(h.GuestDir, "initrd.img"),
	}
	sum, err := os.ReadFile(g.Image + ".sha256")
	if err != nil {
		return Guest{}, fmt.Errorf("guest image in %s: %w: `make libvirt-guest` (hack/libvirt/build-guest.sh) builds it", h.GuestDir, err)
	}
	g.SHA256, _, _ = strings.Cut(strings.TrimSpace(string(sum)), " ")
	cmdline, err := os.ReadFile(filepath.Join(h.GuestDir, "cmdline"))
	if err != nil {
		return Guest{}, fmt.Errorf("guest image in %s: %w", h.GuestDir, err)
	}
	g.Cmdline = strings.TrimSpace(string(cmdline))
	for _, f := range []string{g.Image, g.Kernel, g.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return Guest{}, fmt.Errorf("guest image: %w: `make libvirt-guest` builds it", err)
		}
	}
	return g, nil
}

// RequireGuest is Guest, failing the test without one.
func (h *Host) RequireGuest(t testing.TB) Guest {
	t.Helper()
	g, err := h.Guest()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// SSHConfig is the client config for the host's sshd: the test key, and
// the host key pinned by the known_hosts file (never ignored).
func (h *Host) SSHConfig() (*ssh.ClientConfig, error) {
	pem, err := os.ReadFile(h.SSHKey)
	if err != nil {
		return nil, fmt.Errorf("ssh key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, fmt.Errorf("ssh key %s: %w", h.SSHKey, err)
	}
	hostKey, err := knownhosts.New(h.SSHKnownHosts)
	if err != nil {
		return nil, fmt.Errorf("known_hosts: %w", err)
	}
	return &ssh.ClientConfig{
		User:            h.SSHUser,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: hostKey,
		Timeout:         10 * time.Second,
	}, nil
}

// DialSSH connects to the host's sshd.
func (h *Host) DialSSH(ctx context.Context) (*ssh.Client, error) {
	cfg, err := h.SSHConfig()
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", h.SSHAddr)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", h.SSHAddr, err)
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, h.SSHAddr, cfg)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("ssh %s: %w", h.SSHAddr, err)
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// SocketDialer opens a direct-streamlocal channel to libvirtd's socket over
// an SSH client: go-libvirt's socket.Dialer.
type SocketDialer struct {
	Client *ssh.Client
	Path   string
}

// Dial opens the channel.
func (d SocketDialer) Dial() (net.Conn, error) { return d.Client.Dial("unix", d.Path) }

// Connect returns go-libvirt connected to the host's libvirtd over SSH and
// a direct-streamlocal channel, the way the provider reaches a host. Both
// are closed when the test ends.
func (h *Host) Connect(t testing.TB) *libvirt.Libvirt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := h.DialSSH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	l := libvirt.NewWithDialer(SocketDialer{Client: client, Path: h.Socket})
	if err := l.ConnectToURI(libvirt.ConnectURI(h.URI)); err != nil {
		t.Fatalf("libvirt %s over ssh %s, socket %s: %v", h.URI, h.SSHAddr, h.Socket, err)
	}
	t.Cleanup(func() { _ = l.Disconnect() })
	return l
}
