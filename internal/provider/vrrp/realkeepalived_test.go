package vrrp_test

// The real keepalived and the real Squid, each member in a network
// namespace of its own on a bridge inside the test's namespace (no uplink,
// no route out): what this package renders holds the address on one
// member, moves it when the holder dies and when only its Squid stops,
// and destinations see the group's address whichever member serves.
// Addresses are TEST-NET-2's, inside the test's namespaces only.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/clientloop"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/netns"
)

const (
	bridgeAddr = "198.51.100.1" // the origin's, on the bridge
	virtualIP  = "198.51.100.100"
	originPort = "8080"
	proxyPort  = 3128
)

var memberAddrs = []string{"198.51.100.10", "198.51.100.11"}

// keepalivedBinary finds Debian's keepalived; without it the test fails
// unless SKIP_VRRP_TESTS=1 (hack/install-test-deps.sh installs it).
func keepalivedBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/keepalived", "/sbin/keepalived"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("SKIP_VRRP_TESTS") == "1" {
		t.Skip("SKIP_VRRP_TESTS=1 and no keepalived")
	}
	t.Fatal("keepalived is not installed: hack/install-test-deps.sh installs it (SKIP_VRRP_TESTS=1 skips)")
	return ""
}

// member is one member's namespace and processes.
type testMember struct {
	ns        string
	addr      string
	dirs      squidtest.Dirs
	squidConf string
	kaConf    string
	kaDir     string
	stopSquid func()
	stopKA    func()
	kaLog     *lockedBuffer
}

func TestRealKeepalivedMovesTheAddress(t *testing.T) {
	if !netns.Run(t, netns.Setup{Nameserver: "127.0.0.1"}) {
		return
	}
	ka := keepalivedBinary(t)
	squidtest.Binary(t)

	// The bridge and the origin, in the test's own namespace.
	run(t, "ip", "link", "add", "br-vrrp", "type", "bridge")
	run(t, "ip", "addr", "add", bridgeAddr+"/24", "dev", "br-vrrp")
	run(t, "ip", "link", "set", "br-vrrp", "up")
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintln(w, host) // an echo: the address the destination sees
	}), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", net.JoinHostPort(bridgeAddr, originPort))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = origin.Serve(ln) }()
	t.Cleanup(func() { _ = origin.Close() })

	// A root-owned directory for the check: keepalived runs no script
	// that a non-root user could change, /tmp included.
	checkDir, err := os.MkdirTemp("/run", "egress-vrrp-check-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(checkDir) })
	if err := os.Chmod(checkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	checkPath := filepath.Join(checkDir, "check")
	if err := os.WriteFile(checkPath, []byte(vrrp.Check()), 0o755); err != nil {
		t.Fatal(err)
	}

	dest := (&egress.Settings{AllowedDestinations: []string{bridgeAddr + "/32"}}).Policy()
	members := make([]*testMember, len(memberAddrs))
	for i, addr := range memberAddrs {
		m := &testMember{ns: fmt.Sprintf("vrrp%d-%d", os.Getpid(), i), addr: addr}
		members[i] = m
		run(t, "ip", "netns", "add", m.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", m.ns).Run() })
		host := fmt.Sprintf("vrrph%d", i)
		run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", m.ns)
		run(t, "ip", "link", "set", host, "master", "br-vrrp", "up")
		run(t, "ip", "-n", m.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", m.ns, "addr", "add", addr+"/24", "dev", "eth0")
		run(t, "ip", "-n", m.ns, "link", "set", "eth0", "up")
		sysctl := filepath.Join(t.TempDir(), "sysctl.conf")
		if err := os.WriteFile(sysctl, []byte(vrrp.Sysctl(netip.MustParseAddr(virtualIP))), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, "ip", "netns", "exec", m.ns, "sysctl", "-q", "-p", sysctl)

		m.dirs = squidtest.NewDirs(t)
		m.dirs.Netns = m.ns
		m.squidConf = squid.Config(squid.Params{
			Generator: "test", Port: proxyPort,
			Clients:      []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Destinations: dest, PidFile: m.dirs.PidFile(), CoredumpDir: m.dirs.Run,
			EffectiveUser: m.dirs.EffectiveUser, ServingProbe: true,
			OutgoingAddress: netip.MustParseAddr(virtualIP),
		})
		var peers []netip.Addr
		for j, p := range memberAddrs {
			if j != i {
				peers = append(peers, netip.MustParseAddr(p))
			}
		}
		conf, err := vrrp.Config("test", vrrp.Member{
			Interface: "eth0", Self: netip.MustParseAddr(addr), Peers: peers,
			Virtual: netip.MustParsePrefix(virtualIP + "/24"), RouterID: vrrp.RouterID("group-uid"),
			Priority: vrrp.Priority(i), Port: proxyPort,
		})
		if err != nil {
			t.Fatal(err)
		}
		m.kaConf = strings.ReplaceAll(conf, vrrp.CheckPath, checkPath)
		m.kaDir = t.TempDir()
		m.kaLog = &lockedBuffer{}
	}
	start := func(m *testMember) {
		m.stopSquid = squidtest.StartStoppable(t, m.dirs, m.squidConf, net.JoinHostPort(m.addr, fmt.Sprint(proxyPort)))
		m.stopKA = startKeepalived(t, ka, m)
	}
	for _, m := range members {
		start(m)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range members {
				t.Logf("keepalived in %s:\n%s", m.ns, m.kaLog.String())
			}
		}
	})

	holder := awaitHolder(t, members, nil)
	t.Logf("the address is on %s (%s)", holder.ns, holder.addr)

	// The client: through the group's address to the origin every 100 ms.
	proxyURL := &url.URL{Scheme: "http", Host: net.JoinHostPort(virtualIP, fmt.Sprint(proxyPort))}
	loop := clientloop.Start(t, &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}},
		"http://"+net.JoinHostPort(bridgeAddr, originPort)+"/", 100*time.Millisecond)
	loop.AwaitAnswered(t, 4, time.Minute, "answers through the group's address")

	// Run 1: the holder dies (its link goes, then its processes: nothing
	// it could say on the way out reaches the other member).
	run(t, "ip", "-n", holder.ns, "link", "set", "eth0", "down")
	died := time.Now()
	holder.stopKA()
	holder.stopSquid()
	other := awaitHolder(t, members, holder)
	moved := time.Since(died)
	loop.AwaitAnswered(t, loop.Answered()+4, time.Minute, "answers after the holder died")
	gap, lost := loop.GapSince(died)
	t.Logf("holder %s died: the address on %s after %s; longest gap in answers %s, %d requests lost",
		holder.ns, other.ns, moved.Round(10*time.Millisecond), gap.Round(10*time.Millisecond), lost)

	// The dead member comes back: it takes nothing back (nopreempt).
	run(t, "ip", "-n", holder.ns, "link", "set", "eth0", "up")
	start(holder)
	testenv.EventuallyNilWithin(t, 30*time.Second, "the member that came back is BACKUP", func() error {
		if !strings.Contains(holder.kaLog.String(), "Entering BACKUP STATE") {
			return fmt.Errorf("keepalived in %s has not entered BACKUP yet", holder.ns)
		}
		return nil
	})
	if got := holders(t, members); len(got) != 1 || got[0] != other {
		t.Fatalf("after %s came back the address is on %v, want %s alone", holder.ns, names(got), other.ns)
	}

	// Run 2: only the holder's Squid stops; its check fails and it gives
	// the address up.
	stopped := time.Now()
	other.stopSquid()
	back := awaitHolder(t, members, other)
	moved = time.Since(stopped)
	loop.AwaitAnswered(t, loop.Answered()+4, time.Minute, "answers after the holder's Squid stopped")
	gap, lost = loop.GapSince(stopped)
	t.Logf("Squid on %s stopped: the address on %s after %s; longest gap in answers %s, %d requests lost",
		other.ns, back.ns, moved.Round(10*time.Millisecond), gap.Round(10*time.Millisecond), lost)

	if bad := loop.BodiesOtherThan(virtualIP); len(bad) > 0 {
		t.Errorf("the origin saw addresses other than the group's: %v", bad)
	}
}

// startKeepalived runs keepalived's VRRP process in m's namespace until
// stop or the end of the test.
func startKeepalived(t *testing.T, bin string, m *testMember) (stop func()) {
	t.Helper()
	conf := filepath.Join(m.kaDir, "keepalived.conf")
	if err := os.WriteFile(conf, []byte(m.kaConf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", m.ns, bin,
		"--vrrp", "--dont-fork", "--log-console", "--log-detail", "--use-file", conf,
		"--pid", filepath.Join(m.kaDir, "keepalived.pid"), "--vrrp_pid", filepath.Join(m.kaDir, "vrrp.pid"),
		"--checkers_pid", filepath.Join(m.kaDir, "checkers.pid"))
	cmd.Stdout, cmd.Stderr = m.kaLog, m.kaLog
	// SIGKILL for the parent; its VRRP child gets SIGKILL when it goes.
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-exited
			// The VRRP child outlives a killed parent for a moment; a
			// dead host has no processes at all.
			_ = exec.Command("ip", "netns", "exec", m.ns, "pkill", "-KILL", "-F", filepath.Join(m.kaDir, "vrrp.pid")).Run()
			_ = exec.Command("ip", "-n", m.ns, "addr", "del", virtualIP+"/24", "dev", "eth0").Run()
		})
	}
	t.Cleanup(stop)
	return stop
}

// holders are the members whose eth0 holds the virtual address.
func holders(t *testing.T, members []*testMember) []*testMember {
	t.Helper()
	var got []*testMember
	for _, m := range members {
		out, err := exec.Command("ip", "-n", m.ns, "-o", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil {
			t.Fatalf("ip -n %s addr: %v: %s", m.ns, err, out)
		}
		if strings.Contains(string(out), " "+virtualIP+"/") {
			got = append(got, m)
		}
	}
	return got
}

// awaitHolder waits until exactly one member other than not holds the
// address, and returns it.
func awaitHolder(t *testing.T, members []*testMember, not *testMember) *testMember {
	t.Helper()
	var h *testMember
	testenv.EventuallyNilWithin(t, 60*time.Second, "one member holds the address", func() error {
		got := holders(t, members)
		if len(got) != 1 || got[0] == not {
			return fmt.Errorf("the address is on %v", names(got))
		}
		h = got[0]
		return nil
	})
	return h
}

func names(ms []*testMember) []string {
	var s []string
	for _, m := range ms {
		s = append(s, m.ns)
	}
	return s
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// lockedBuffer collects a process's output for the test to read.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRealKeepalivedAcceptsTheConfig: keepalived's own config test finds
// nothing to say about either family's configuration, and does about a
// keyword it does not know (so its silence means something). keepalived
// 2.2's -t ends by signal whatever it found; its output is the verdict.
func TestRealKeepalivedAcceptsTheConfig(t *testing.T) {
	ka := keepalivedBinary(t)
	check := func(conf string) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "keepalived.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command(ka, "--config-test", "--use-file", path, "--log-console").CombinedOutput()
		return strings.TrimSpace(strings.ReplaceAll(string(out), "Terminated", ""))
	}
	for _, m := range []vrrp.Member{{
		Interface: "eth0", Self: netip.MustParseAddr("192.0.2.10"), Peers: []netip.Addr{netip.MustParseAddr("192.0.2.11")},
		Virtual: netip.MustParsePrefix("192.0.2.100/24"), RouterID: 9, Priority: 254, Port: 3128,
	}, {
		Interface: "eth0", Self: netip.MustParseAddr("2001:db8::10"), Peers: []netip.Addr{netip.MustParseAddr("2001:db8::11"), netip.MustParseAddr("2001:db8::12")},
		Virtual: netip.MustParsePrefix("2001:db8::100/64"), RouterID: 9, Priority: 253, Port: 8080,
	}} {
		conf, err := vrrp.Config("test", m)
		if err != nil {
			t.Fatal(err)
		}
		if out := check(conf); out != "" {
			t.Errorf("keepalived -t on the configuration for %s:\n%s\n%s", m.Self, out, conf)
		}
		broken := strings.Replace(conf, "    nopreempt\n", "    nopreempt\n    no_such_keyword\n", 1)
		if out := check(broken); !strings.Contains(out, "Unknown keyword 'no_such_keyword'") {
			t.Errorf("keepalived -t said %q about an unknown keyword", out)
		}
	}
}
