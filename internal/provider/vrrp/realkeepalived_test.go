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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// memberAddrs are the members' own addresses: the first two make the
// groups of two, the third grows one to three.
var memberAddrs = []string{"198.51.100.10", "198.51.100.11", "198.51.100.12"}

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

// testMember is one member's namespace and processes.
type testMember struct {
	ns        string
	addr      string
	dirs      squidtest.Dirs
	squidConf string
	kaConf    string
	kaDir     string
	// kaPeers stands for vrrp.PeersPath, which kaConf includes.
	kaPeers   string
	stopSquid func()
	stopKA    func()
	kaLog     *lockedBuffer
}

// lab is a test's bridge, the origin on it and the members' check
// script; members join it with addMember.
type lab struct {
	t         *testing.T
	ka        string
	checkPath string
	dest      []string
	members   []*testMember
}

// newLab sets the bridge and the origin up in the test's namespace (call
// it inside netns.Run).
func newLab(t *testing.T) *lab {
	t.Helper()
	l := &lab{t: t, ka: keepalivedBinary(t)}
	squidtest.Binary(t)

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
	l.checkPath = filepath.Join(checkDir, "check")
	if err := os.WriteFile(l.checkPath, []byte(vrrp.Check()), 0o755); err != nil {
		t.Fatal(err)
	}
	l.dest = []string{bridgeAddr + "/32"}
	// Registered first, so it runs last: the logs are whole by then.
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range l.members {
				t.Logf("keepalived in %s:\n%s", m.ns, m.kaLog.String())
			}
		}
	})
	return l
}

// addMember makes a member at addr advertising to peers: its namespace
// on the bridge, its Squid's and keepalived's configurations and its
// peers file. Its index in l.members is its priority's.
func (l *lab) addMember(addr string, peers []string) *testMember {
	t := l.t
	t.Helper()
	i := len(l.members)
	m := &testMember{ns: fmt.Sprintf("vrrp%d-%d", os.Getpid(), i), addr: addr}
	l.members = append(l.members, m)
	run(t, "ip", "netns", "add", m.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", m.ns).Run() })
	host := fmt.Sprintf("vrrph%d", i)
	run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", m.ns)
	run(t, "ip", "link", "set", host, "master", "br-vrrp", "up")
	run(t, "ip", "-n", m.ns, "link", "set", "lo", "up")
	run(t, "ip", "-n", m.ns, "addr", "add", addr+"/24", "dev", "eth0")
	run(t, "ip", "-n", m.ns, "link", "set", "eth0", "up")
	// Both ways a guest sets it: the first boot's command, every other
	// boot's file.
	run(t, "ip", "netns", "exec", m.ns, "sh", "-c", vrrp.SysctlCommand(netip.MustParseAddr(virtualIP)))
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
		Destinations: (&egress.Settings{AllowedDestinations: l.dest}).Policy(), PidFile: m.dirs.PidFile(), CoredumpDir: m.dirs.Run,
		EffectiveUser: m.dirs.EffectiveUser, ServingProbe: true,
		OutgoingAddress: netip.MustParseAddr(virtualIP),
	})
	conf, err := vrrp.Config("test", vrrp.Member{
		Interface: "eth0", Self: netip.MustParseAddr(addr), Peers: parseAddrs(t, peers),
		Virtual: netip.MustParsePrefix(virtualIP + "/24"), RouterID: vrrp.RouterID("group-uid"),
		Priority: vrrp.Priority(i), Port: proxyPort,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.kaDir = t.TempDir()
	m.kaPeers = filepath.Join(m.kaDir, "peers.conf")
	// The guest's absolute paths, moved into the test's directories.
	m.kaConf = strings.NewReplacer(vrrp.CheckPath, l.checkPath, vrrp.PeersPath, m.kaPeers).Replace(conf)
	m.writePeers(t, peers)
	m.kaLog = &lockedBuffer{}
	return m
}

// start runs m's Squid, then its keepalived.
func (l *lab) start(m *testMember) {
	l.t.Helper()
	m.stopSquid = squidtest.StartStoppable(l.t, m.dirs, m.squidConf, net.JoinHostPort(m.addr, fmt.Sprint(proxyPort)))
	m.stopKA = startKeepalived(l.t, l.ka, m)
}

// kill makes m a dead host: its link goes first, then its processes, so
// nothing it could say on the way out reaches the others. died is when
// its link went.
func (l *lab) kill(m *testMember) (died time.Time) {
	l.t.Helper()
	run(l.t, "ip", "-n", m.ns, "link", "set", "eth0", "down")
	died = time.Now()
	m.stopKA()
	m.stopSquid()
	return died
}

// clientLoop asks the origin through the group's address every 100 ms.
func (l *lab) clientLoop() *clientloop.Loop {
	proxyURL := &url.URL{Scheme: "http", Host: net.JoinHostPort(virtualIP, fmt.Sprint(proxyPort))}
	return clientloop.Start(l.t, &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}},
		"http://"+net.JoinHostPort(bridgeAddr, originPort)+"/", 100*time.Millisecond)
}

// writePeers writes m's peers file as the guest agent would (ApplyPeers:
// a whole new file renamed over the old).
func (m *testMember) writePeers(t *testing.T, peers []string) {
	t.Helper()
	content, err := vrrp.Peers(netip.MustParseAddr(m.addr), parseAddrs(t, peers))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.kaPeers+".new", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.kaPeers+".new", m.kaPeers); err != nil {
		t.Fatal(err)
	}
}

// reload sends m's keepalived what keepalived.service's reload sends
// (ExecReload=/bin/kill -HUP $MAINPID): SIGHUP to its main process.
func (m *testMember) reload(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.kaDir, "keepalived.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("keepalived's pid file: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP to keepalived %d in %s: %v", pid, m.ns, err)
	}
}

// others are addrs without self: a member's peers.
func others(addrs []string, self string) []string {
	var out []string
	for _, a := range addrs {
		if a != self {
			out = append(out, a)
		}
	}
	return out
}

func parseAddrs(t *testing.T, addrs []string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, a := range addrs {
		p, err := netip.ParseAddr(a)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func TestRealKeepalivedMovesTheAddress(t *testing.T) {
	if !netns.Run(t, netns.Setup{Nameserver: "127.0.0.1"}) {
		return
	}
	l := newLab(t)
	group := memberAddrs[:2]
	for _, addr := range group {
		l.addMember(addr, others(group, addr))
	}
	members := l.members
	for _, m := range members {
		l.start(m)
	}

	holder := awaitHolder(t, members, nil)
	t.Logf("the address is on %s (%s)", holder.ns, holder.addr)

	loop := l.clientLoop()
	loop.AwaitAnswered(t, 4, time.Minute, "answers through the group's address")

	// Run 1: the holder dies.
	died := l.kill(holder)
	other := awaitHolder(t, members, holder)
	moved := time.Since(died)
	loop.AwaitAnswered(t, loop.Answered()+4, time.Minute, "answers after the holder died")
	gap, lost := loop.GapSince(died)
	t.Logf("holder %s died: the address on %s after %s; longest gap in answers %s, %d requests lost",
		holder.ns, other.ns, moved.Round(10*time.Millisecond), gap.Round(10*time.Millisecond), lost)

	// The dead member comes back: it takes nothing back (nopreempt).
	run(t, "ip", "-n", holder.ns, "link", "set", "eth0", "up")
	l.start(holder)
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

// TestRealKeepalivedPeersChangedInPlace: a group of two grows to three
// without replacing anyone: the two rewrite their peers files and reload
// (what ApplyPeers does through the guest agent), then the third starts.
// The holder keeps the address through the reload, the new member hears
// it and stays BACKUP, and the adverts run every way: the address moves
// to another member when the holder dies and to the last one after.
func TestRealKeepalivedPeersChangedInPlace(t *testing.T) {
	if !netns.Run(t, netns.Setup{Nameserver: "127.0.0.1"}) {
		return
	}
	l := newLab(t)
	two, three := memberAddrs[:2], memberAddrs[:3]
	for _, addr := range two {
		l.addMember(addr, others(two, addr))
	}
	newcomer := l.addMember(three[2], others(three, three[2]))
	members := l.members
	for _, m := range members[:2] {
		l.start(m)
	}
	holder := awaitHolder(t, members, nil)
	t.Logf("the address is on %s (%s)", holder.ns, holder.addr)
	loop := l.clientLoop()
	loop.AwaitAnswered(t, 4, time.Minute, "answers through the group's address")

	// Grow: the two learn the third's address in place.
	holderLogFrom := len(holder.kaLog.String())
	reloaded := time.Now()
	for _, m := range members[:2] {
		from := len(m.kaLog.String())
		m.writePeers(t, others(three, m.addr))
		m.reload(t)
		testenv.EventuallyNilWithin(t, 30*time.Second, "keepalived reloaded", func() error {
			if !strings.Contains(m.kaLog.String()[from:], "Reload complete") {
				return fmt.Errorf("keepalived in %s has not completed its reload", m.ns)
			}
			return nil
		})
	}
	if got := holders(t, members); len(got) != 1 || got[0] != holder {
		t.Fatalf("after the reload the address is on %v, want %s alone", names(got), holder.ns)
	}

	l.start(newcomer)
	testenv.EventuallyNilWithin(t, 30*time.Second, "the new member is BACKUP", func() error {
		if !strings.Contains(newcomer.kaLog.String(), "Entering BACKUP STATE") {
			return fmt.Errorf("keepalived in %s has not entered BACKUP yet", newcomer.ns)
		}
		return nil
	})
	// Nothing says the new member hears the holder; one that did not
	// would take the address after its master-down interval.
	holdsAlone(t, members, holder, 2*masterDown)
	// Had it dropped the address for a moment (a reload read as a
	// restart), its log would say so even between two looks.
	if after := holder.kaLog.String()[holderLogFrom:]; strings.Contains(after, "Entering ") || strings.Contains(after, "removing VIPs") {
		t.Errorf("the holder %s changed state through the reload:\n%s", holder.ns, after)
	}
	gap, lost := loop.GapSince(reloaded)
	t.Logf("through the reload and the new member's start: longest gap in answers %s, %d requests lost",
		gap.Round(10*time.Millisecond), lost)

	// The holder dies: the survivor of highest priority takes the
	// address, and the other hears it and stays BACKUP (an old member and
	// the new one, in one direction); then that one dies: the last takes
	// it. Priorities a step apart would let both survivors take it and
	// the higher take it back, which the check below sees.
	dead, alive := holder, slices.DeleteFunc(slices.Clone(members), func(m *testMember) bool { return m == holder })
	for len(alive) > 0 {
		died := l.kill(dead)
		next := awaitHolder(t, members, dead)
		moved := time.Since(died)
		loop.AwaitAnswered(t, loop.Answered()+4, time.Minute, "answers after the holder died")
		gap, lost := loop.GapSince(died)
		t.Logf("holder %s died: the address on %s after %s; longest gap in answers %s, %d requests lost",
			dead.ns, next.ns, moved.Round(10*time.Millisecond), gap.Round(10*time.Millisecond), lost)
		// members are in priority order.
		if next != alive[0] {
			t.Errorf("the address went to %s, want %s, the survivor of highest priority", next.ns, alive[0].ns)
		}
		if len(alive) > 1 {
			holdsAlone(t, members, next, 2*masterDown)
		}
		dead, alive = next, slices.DeleteFunc(alive, func(m *testMember) bool { return m == next })
	}

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

// masterDown bounds how long a BACKUP that hears no advert waits before
// it takes the address: VRRP's Master_Down_Interval, 3 adverts and a
// skew under one second.
const masterDown = (3*vrrp.AdvertInterval + 1) * time.Second

// holdsAlone fails the test as soon as the address is anywhere but on
// want alone, looking every 100 ms for d: the check of something that
// must not happen (a member taking the address beside the holder).
func holdsAlone(t *testing.T, members []*testMember, want *testMember, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := holders(t, members); len(got) != 1 || got[0] != want {
			t.Fatalf("the address is on %v, want %s alone", names(got), want.ns)
		}
	}
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
// nothing to say about either family's configuration with its peers file
// included, for groups of two and three and a group of one (no unicast
// block), and does about a keyword it does not know, in either file (so
// its silence means something, and the include is read). keepalived
// 2.2's -t ends by signal whatever it found; its output is the verdict.
func TestRealKeepalivedAcceptsTheConfig(t *testing.T) {
	ka := keepalivedBinary(t)
	// check writes conf and peers side by side, conf including that
	// peers file instead of the guest's.
	check := func(conf, peers string) string {
		t.Helper()
		dir := t.TempDir()
		peersPath := filepath.Join(dir, "peers.conf")
		if err := os.WriteFile(peersPath, []byte(peers), 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "keepalived.conf")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(conf, vrrp.PeersPath, peersPath)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command(ka, "--config-test", "--use-file", path, "--log-console").CombinedOutput()
		return strings.TrimSpace(strings.ReplaceAll(string(out), "Terminated", ""))
	}
	v4 := vrrp.Member{
		Interface: "eth0", Self: netip.MustParseAddr("192.0.2.10"), Peers: []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")},
		Virtual: netip.MustParsePrefix("192.0.2.100/24"), RouterID: 9, Priority: 254, Port: 3128,
	}
	v6 := vrrp.Member{
		Interface: "eth0", Self: netip.MustParseAddr("2001:db8::10"), Peers: []netip.Addr{netip.MustParseAddr("2001:db8::11")},
		Virtual: netip.MustParsePrefix("2001:db8::100/64"), RouterID: 9, Priority: 253, Port: 8080,
	}
	v4Alone, v6Alone := v4, v6
	v4Alone.Peers, v6Alone.Peers = nil, nil
	for _, m := range []vrrp.Member{v4, v6, v4Alone, v6Alone} {
		t.Run(fmt.Sprintf("%s with %d peers", m.Self, len(m.Peers)), func(t *testing.T) {
			conf, err := vrrp.Config("test", m)
			if err != nil {
				t.Fatal(err)
			}
			peers, err := vrrp.Peers(m.Self, m.Peers)
			if err != nil {
				t.Fatal(err)
			}
			if out := check(conf, peers); out != "" {
				t.Errorf("keepalived -t on the configuration for %s:\n%s\n%s\n%s", m.Self, out, conf, peers)
			}
			broken := strings.Replace(conf, "    nopreempt\n", "    nopreempt\n    no_such_keyword\n", 1)
			if out := check(broken, peers); !strings.Contains(out, "Unknown keyword 'no_such_keyword'") {
				t.Errorf("keepalived -t said %q about an unknown keyword in the configuration", out)
			}
			if out := check(conf, peers+"no_such_peers_keyword\n"); !strings.Contains(out, "Unknown keyword 'no_such_peers_keyword'") {
				t.Errorf("keepalived -t said %q about an unknown keyword in the peers file", out)
			}
		})
	}
}
