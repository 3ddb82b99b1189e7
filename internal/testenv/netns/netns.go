// Package netns runs a test inside network and mount namespaces of its own,
// so that it may put addresses on a loopback no other process shares, answer
// DNS for the whole namespace and be sure that nothing it starts reaches a
// network: the namespace holds only its loopback interface, with no route
// out.
package netns

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// childEnv names, in the child process, the test it runs inside the
// namespace.
const childEnv = "EPO_TEST_NETNS"

// Setup is what the namespace holds besides loopback: addresses put on lo,
// and the resolv.conf and hosts files every resolver in it reads (Squid's
// and Go's both read /etc/resolv.conf).
type Setup struct {
	// Addrs are CIDRs put on lo (e.g. 198.51.100.5/32, 2001:db8::5/128).
	Addrs []string
	// Nameserver is the one address resolv.conf names; empty leaves the
	// host's file, which would send queries out, so it is required.
	Nameserver string
	// Hosts is the hosts file's content; empty means localhost only.
	Hosts string
	// Hostname is the namespace's host name (it gets a UTS namespace too),
	// so that a test can look for it where it must not appear; empty keeps
	// the host's.
	Hostname string
}

// Run reports whether the caller runs inside the namespace. Outside, it
// runs the calling test again in a child process placed in new network,
// mount and UTS namespaces, relays its output, fails t if the child fails, and
// returns false: the caller then returns. Inside, it sets the namespace up
// and returns true. It needs root (CAP_SYS_ADMIN); elsewhere t is skipped.
func Run(t *testing.T, s Setup) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		setUp(t, s)
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces")
	}
	if s.Nameserver == "" {
		t.Fatal("netns.Setup needs a Nameserver inside the namespace")
	}
	args := []string{"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.v", "-test.count=1"}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the test in a network namespace: %v", err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// The child's own "=== RUN"/"--- PASS" lines are noise here.
		if line := sc.Text(); !strings.HasPrefix(line, "=== ") && line != "PASS" {
			t.Log(line)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the test inside its network namespace failed (%v); its output is above", err)
	}
	return false
}

func setUp(t *testing.T, s Setup) {
	t.Helper()
	// Mounts made here stay here.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make / private in the mount namespace: %v", err)
	}
	dir := t.TempDir()
	hosts := s.Hosts
	if hosts == "" {
		hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost\n"
	}
	for name, content := range map[string]string{
		"/etc/resolv.conf": "nameserver " + s.Nameserver + "\noptions timeout:2 attempts:1\n",
		"/etc/hosts":       hosts,
	} {
		src := filepath.Join(dir, filepath.Base(name))
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(src, name, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s over %s: %v", src, name, err)
		}
	}
	if s.Hostname != "" {
		if err := syscall.Sethostname([]byte(s.Hostname)); err != nil {
			t.Fatalf("set the namespace's host name: %v", err)
		}
	}
	ip(t, "link", "set", "lo", "up")
	for _, a := range s.Addrs {
		ip(t, "addr", "add", a, "dev", "lo")
	}
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
