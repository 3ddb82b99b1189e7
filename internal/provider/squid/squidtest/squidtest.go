// Package squidtest runs the real Squid for tests: it finds the binary and
// starts it on loopback with a generated config. It also runs Debian's
// cloud-init schema check on generated cloud-configs.
package squidtest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Binary finds Debian's squid (in /usr/sbin, which a non-root PATH may
// lack). Without it the test fails, naming the set-up script, unless
// SKIP_SQUID_TESTS=1.
func Binary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("squid"); err == nil {
		return p
	}
	if fi, err := os.Stat("/usr/sbin/squid"); err == nil && !fi.IsDir() {
		return "/usr/sbin/squid"
	}
	if os.Getenv("SKIP_SQUID_TESTS") == "1" {
		t.Skip("squid is not installed and SKIP_SQUID_TESTS=1")
	}
	t.Fatal("squid is not installed: run hack/install-test-deps.sh (or set SKIP_SQUID_TESTS=1 to skip the real-Squid tests)")
	return ""
}

// Parse runs `squid -k parse` on conf and returns its output and error.
func Parse(t testing.TB, conf string) ([]byte, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "squid.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return exec.Command(Binary(t), "-k", "parse", "-f", path).CombinedOutput()
}

// Dirs are the writable places a loopback Squid needs.
type Dirs struct {
	// Run holds the pid file and core dumps.
	Run string
	// EffectiveUser is the user a Squid started as root drops to ("proxy");
	// empty when the test does not run as root.
	EffectiveUser string
	// Netns, when set, is the named network namespace (ip netns) Squid
	// runs in; Start's addr must then be reachable from the test's.
	Netns string
}

// NewDirs makes the directories, writable by the user Squid drops to.
func NewDirs(t testing.TB) Dirs {
	t.Helper()
	run := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(run, 0o777); err != nil {
		t.Fatal(err)
	}
	d := Dirs{Run: run}
	if os.Geteuid() == 0 {
		d.EffectiveUser = "proxy"
		for dir := run; dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
			_ = os.Chmod(dir, 0o777)
		}
	}
	return d
}

// Output is the file Start sends Squid's stdout and stderr to (its
// access and cache logs, as the generated config writes them).
func (d Dirs) Output() string { return filepath.Join(d.Run, "squid.out") }

// PidFile is where the config should put Squid's pid file.
func (d Dirs) PidFile() string { return filepath.Join(d.Run, "squid.pid") }

// Start runs Squid with conf until the test ends and waits until addr (the
// config's http_port) accepts connections. Squid's output is logged when the
// test fails.
func Start(t testing.TB, d Dirs, conf, addr string) {
	t.Helper()
	StartStoppable(t, d, conf, addr)
}

// StartStoppable is Start, and returns what kills that Squid (SIGKILL)
// before the test ends and waits until it is gone: a proxy that stops
// answering, for a test of what notices.
func StartStoppable(t testing.TB, d Dirs, conf, addr string) (stop func()) {
	t.Helper()
	bin := Binary(t)
	path := filepath.Join(d.Run, "squid.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// A regular file, not a pipe: Squid reopens /dev/stdout, and a pipe
	// made by root cannot be reopened by the user it drops to.
	logPath := d.Output()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(logPath, 0o666)
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{bin, "-N", "-f", path}
	if d.Netns != "" {
		// ip execs Squid itself: the process killed is Squid's.
		args = append([]string{"ip", "netns", "exec", d.Netns}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		cancel()
		_ = logFile.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() { cancel(); <-exited }
	t.Cleanup(func() {
		stop()
		_ = logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("squid output:\n%s", out)
		}
	})
	if !waitListening(addr, exited) {
		t.Fatalf("squid never listened on %s", addr)
	}
	return stop
}

// waitListening waits until addr accepts connections or squid exits; the
// bound is a liveness limit for a slow machine, not a speed assertion.
func waitListening(addr string, exited <-chan struct{}) bool {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return true
		}
		select {
		case <-exited:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

// Addr is host:port for a listen address and port.
func Addr(host string, port int32) string { return net.JoinHostPort(host, strconv.Itoa(int(port))) }

// CloudInitBinary finds Debian's cloud-init. Without it the test fails,
// naming the set-up script, unless SKIP_CLOUDINIT_TESTS=1.
func CloudInitBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("cloud-init"); err == nil {
		return p
	}
	if os.Getenv("SKIP_CLOUDINIT_TESTS") == "1" {
		t.Skip("cloud-init is not installed and SKIP_CLOUDINIT_TESTS=1")
	}
	t.Fatal("cloud-init is not installed: run hack/install-test-deps.sh (or set SKIP_CLOUDINIT_TESTS=1 to skip the cloud-init schema tests)")
	return ""
}

// Schema runs `cloud-init schema --config-file` on doc and returns its
// output and error (non-nil when cloud-init refuses the document). It
// only reads the file: it touches neither /var/lib/cloud nor the network.
func Schema(t testing.TB, doc string) ([]byte, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return exec.Command(CloudInitBinary(t), "schema", "--config-file", path).CombinedOutput()
}
