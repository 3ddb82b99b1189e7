package servingreport

// The reporter is run as the guest runs it: the real bash script, against
// a loopback listener standing in for the proxy, with cloud-init and squid
// replaced on PATH by scripts that print what the real commands print
// (testdata: cloud-init status --long of 22.4, Debian 12's, and of 24.4).
// The real Squid's answer is checked in the squid package, the whole
// chain on the libvirt guests (test/libvirt).

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// guest is a directory standing in for the guest: the reporter, its
// report, and a bin directory first on PATH.
type guest struct {
	dir, report string
	env         []string
}

func newGuest(t *testing.T, cloudInitOutput string) *guest {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("the reporter is a bash script: %v", err)
	}
	g := &guest{dir: t.TempDir()}
	g.report = filepath.Join(g.dir, "run", "report")
	bin := filepath.Join(g.dir, "bin")
	write(t, filepath.Join(g.dir, "reporter"), Reporter(), 0o755)
	write(t, filepath.Join(bin, "squid"), "#!/bin/sh\necho 'Squid Cache: Version 5.7'\necho 'Service Name: squid'\n", 0o755)
	if cloudInitOutput != "" {
		fixture := filepath.Join(g.dir, "cloud-init.txt")
		write(t, fixture, cloudInitOutput, 0o644)
		write(t, filepath.Join(bin, "cloud-init"), "#!/bin/sh\n[ \"$1 $2\" = 'status --long' ] || exit 3\ncat "+fixture+"\n", 0o755)
	}
	g.env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin", "EGRESS_PROXY_REPORT="+g.report)
	return g
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// run runs the reporter once and returns its report as published.
func (g *guest) run(t *testing.T, port int, publish Publish, extraEnv ...string) (Report, string) {
	t.Helper()
	return g.runArgs(t, []string{strconv.Itoa(port), string(publish)}, extraEnv...)
}

// runArgs runs the reporter once with args.
func (g *guest) runArgs(t *testing.T, args []string, extraEnv ...string) (Report, string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(g.dir, "reporter")}, args...)...)
	cmd.Env = append(g.env, extraEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reporter: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(g.report)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(string(raw))
	if err != nil {
		t.Fatalf("the reporter's report does not parse: %v\n%s", err, raw)
	}
	return r, string(out)
}

// fakeProxy answers every request with 403 from itself, as the generated
// Squid answers the probe, and hands over each request line it read.
func fakeProxy(t *testing.T) (port int, requests <-chan string, stop func()) {
	return fakeProxyAnswering(t, false, nil)
}

// fakeProxyClosing is fakeProxy; with closeEarly it answers and closes
// after the request line.
func fakeProxyClosing(t *testing.T, closeEarly bool) (port int, requests <-chan string, stop func()) {
	return fakeProxyAnswering(t, closeEarly, nil)
}

// fakeProxyAnswering is fakeProxyClosing; a request for anything but the
// probe's name gets what other returns for its request line and headers
// (an echo's answer relayed), when other is set.
func fakeProxyAnswering(t *testing.T, closeEarly bool, other func(line string, header []string) string) (port int, requests <-chan string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reqs := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				line, _ := br.ReadString('\n')
				select {
				case reqs <- strings.TrimRight(line, "\r\n"):
				default: // nobody reads them
				}
				if closeEarly {
					// Answer after the first line, before the rest of the
					// question: the reporter must survive the closed socket.
					io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n")
					return
				}
				var header []string
				for {
					h, err := br.ReadString('\n')
					if err != nil || h == "\r\n" {
						break
					}
					header = append(header, strings.TrimRight(h, "\r\n"))
				}
				if other != nil && !strings.Contains(line, ProbeHost) {
					io.WriteString(c, other(strings.TrimRight(line, "\r\n"), header))
					return
				}
				io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nServer: squid\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, reqs, func() { ln.Close() }
}

func TestReporter_AnswersThenStops(t *testing.T) {
	g := newGuest(t, readFixture(t, "cloud-init-22.4-done.txt"))
	port, requests, stop := fakeProxy(t)
	before := time.Now().Add(-time.Second)

	r, _ := g.run(t, port, PublishFile)
	if got := <-requests; got != "GET http://"+ProbeHost+"/ HTTP/1.0" {
		t.Errorf("the reporter asked %q, want a GET for http://%s/", got, ProbeHost)
	}
	if !r.Serving || r.Answered.Before(before) || r.Checked.Before(before) || r.Version != "5.7" || r.CloudInit != CloudInitDone || r.CloudInitError != "" {
		t.Fatalf("while the proxy answers: %+v", r)
	}
	answered := r.Answered

	stop()
	r, _ = g.run(t, port, PublishFile)
	if r.Serving || !r.Answered.Equal(answered) {
		t.Fatalf("after the proxy stopped: %+v, want serving no and answered kept at %v", r, answered)
	}
	if s := r.Signal(time.Now()); !strings.HasPrefix(s.Detail, "it last answered at ") {
		t.Errorf("signal after a stop: %+v", s)
	}
}

// TestReporter_SurvivesAnEarlyClose: a proxy that answers after the
// request line and closes makes the reporter's next write fail, not kill
// it (SIGPIPE); its answer still counts.
func TestReporter_SurvivesAnEarlyClose(t *testing.T) {
	g := newGuest(t, readFixture(t, "cloud-init-22.4-done.txt"))
	port, _, stop := fakeProxyClosing(t, true)
	defer stop()
	for i := 0; i < 20; i++ {
		if r, _ := g.run(t, port, PublishFile); !r.Serving {
			t.Fatalf("run %d: %+v", i, r)
		}
	}
}

func TestReporter_NeverAnswered(t *testing.T) {
	g := newGuest(t, readFixture(t, "cloud-init-22.4-running.txt"))
	port, _, stop := fakeProxy(t)
	stop() // nothing listens on port
	r, _ := g.run(t, port, PublishFile)
	if r.Serving || !r.Answered.IsZero() || r.CloudInit != CloudInitRunning {
		t.Fatalf("with nothing listening: %+v", r)
	}
}

func TestReporter_CloudInitErrorLine(t *testing.T) {
	for _, tc := range []struct{ fixture, want string }{
		{"cloud-init-22.4-error.txt", `('package-update-upgrade-install', ProcessExecutionError("Unexpected error while running command.\nCommand: ['eatmydata', 'apt-get', 'update']\nExit code: 100"))`},
		{"cloud-init-24.4-error.txt", `('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in /var/lib/cloud/instance/scripts'))`},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			g := newGuest(t, readFixture(t, tc.fixture))
			r, _ := g.run(t, 1, PublishFile)
			if r.CloudInit != CloudInitError || r.CloudInitError != tc.want {
				t.Errorf("cloud-init %q, error line:\n got %s\nwant %s", r.CloudInit, r.CloudInitError, tc.want)
			}
		})
	}
}

// TestReporter_CloudInitAskedUntilFinal: cloud-init status is asked on
// each run while cloud-init runs, and kept once it is done or error (it
// costs seconds of Python on an emulated guest, every 10 s).
func TestReporter_CloudInitAskedUntilFinal(t *testing.T) {
	g := newGuest(t, readFixture(t, "cloud-init-22.4-running.txt"))
	fixture := filepath.Join(g.dir, "cloud-init.txt")
	steps := []struct{ fixture, want string }{
		{"cloud-init-22.4-running.txt", CloudInitRunning},
		{"cloud-init-22.4-error.txt", CloudInitError},
		{"cloud-init-22.4-done.txt", CloudInitError}, // final: not asked again
	}
	for i, st := range steps {
		write(t, fixture, readFixture(t, st.fixture), 0o644)
		if r, _ := g.run(t, 1, PublishFile); r.CloudInit != st.want {
			t.Errorf("run %d with cloud-init saying %s: reported %q, want %q", i, st.fixture, r.CloudInit, st.want)
		} else if st.want == CloudInitError && !strings.HasPrefix(r.CloudInitError, "('package-update-upgrade-install'") {
			t.Errorf("run %d: the error line %q", i, r.CloudInitError)
		}
	}
}

func TestReporter_WithoutCloudInit(t *testing.T) {
	g := newGuest(t, "")
	// Only the tools the reporter uses, so no cloud-init of this machine's.
	bin := filepath.Join(g.dir, "bin")
	testenv.LinkTools(t, bin, "sed", "awk", "date", "head", "tr", "cut", "dirname", "mkdir", "mv")
	g.env = append(g.env, "PATH="+bin)
	r, _ := g.run(t, 1, PublishFile)
	if r.CloudInit != "" || r.CloudInitError != "" {
		t.Errorf("a guest without cloud-init reported %+v", r)
	}
}

// TestReporter_GuestAttribute: on GCE the report is PUT to the metadata
// server's guest attributes, with the header the server requires.
func TestReporter_GuestAttribute(t *testing.T) {
	type put struct {
		method, path, flavor, body string
	}
	puts := make(chan put, 4)
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		puts <- put{r.Method, r.URL.Path, r.Header.Get("Metadata-Flavor"), string(b)}
	}))
	defer md.Close()
	g := newGuest(t, readFixture(t, "cloud-init-22.4-done.txt"))
	port, _, stop := fakeProxy(t)
	defer stop()
	g.run(t, port, PublishGuestAttribute, "EGRESS_PROXY_METADATA="+strings.TrimPrefix(md.URL, "http://"))
	p := <-puts
	if p.method != http.MethodPut || p.path != "/computeMetadata/v1/instance/guest-attributes/"+GuestAttributeNamespace+"/"+GuestAttributeKey || p.flavor != "Google" {
		t.Fatalf("the reporter sent %s %s with Metadata-Flavor %q", p.method, p.path, p.flavor)
	}
	r, err := Parse(p.body)
	if err != nil || !r.Serving || r.CloudInit != CloudInitDone {
		t.Fatalf("the guest attribute's value %q: %+v, %v", p.body, r, err)
	}
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUnits_SystemdVerify: systemd accepts the units as generated, and
// refuses a broken one (so the check can fail).
func TestUnits_SystemdVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("systemd-analyze is not installed: %v", err)
	}
	dir := t.TempDir()
	reporter := filepath.Join(dir, "egress-proxy-serving")
	write(t, reporter, Reporter(), 0o755)
	verify := func(service string) (string, error) {
		write(t, filepath.Join(dir, ServiceName), service, 0o644)
		write(t, filepath.Join(dir, TimerName), Timer(), 0o644)
		out, err := exec.Command(sa, "verify", filepath.Join(dir, TimerName), filepath.Join(dir, ServiceName)).CombinedOutput()
		return string(out), err
	}
	echo, ferr := egress.ParseEcho("http://[2001:db8::1]:8080/ip?format=text&v=4,6", nil)
	if ferr != nil {
		t.Fatal(ferr)
	}
	for _, c := range []Config{{Port: 3128, Publish: PublishFile}, {Port: 3128, Publish: PublishGuestAttribute}, {Port: 3128, Publish: PublishFile, Echo: echo},
		{Port: 3128, Publish: PublishFile, GroupAddress: netip.MustParseAddr("2001:db8::10")}} {
		unit := service(reporter, c)
		if out, err := verify(unit); err != nil || out != "" {
			t.Errorf("systemd-analyze verify refused the units for %+v: %v\n%s", c, err, out)
		}
		if !strings.Contains(unit, "ExecStart="+reporter+" 3128 "+string(c.Publish)+strings.TrimSuffix(" "+echoRequestURL(c.Echo), " ")+"\n") {
			t.Errorf("the unit for %+v does not run the reporter with its arguments:\n%s", c, unit)
		}
	}
	broken := strings.Replace(service(reporter, Config{Port: 3128, Publish: PublishFile}), "ProtectSystem=strict", "ProtectSystem=everything", 1)
	if out, err := verify(broken); !strings.Contains(out, "everything") {
		t.Errorf("systemd-analyze verify took a broken unit: %v\n%s", err, out)
	}
}

// TestInstaller_NeverFails: a systemctl that fails is said, not returned
// (in bootcmd a failure would turn cloud-init's status to error).
func TestInstaller_NeverFails(t *testing.T) {
	root, bin := t.TempDir(), t.TempDir()
	write(t, filepath.Join(bin, "systemctl"), "#!/bin/sh\nexit 1\n", 0o755)
	testenv.LinkTools(t, bin, "mkdir", "cat", "chmod")
	cmd := exec.Command("/bin/sh", "-c", Installer(Config{Port: 3128, Publish: PublishFile}))
	cmd.Env = []string{"PATH=" + bin, "EGRESS_PROXY_ROOT=" + root}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "starting the serving reporter failed") {
		t.Fatalf("installer with a failing systemctl: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, ReporterPath)); err != nil {
		t.Errorf("the reporter was not written: %v", err)
	}
}

// TestInstaller_WritesWhatItSays: the installer is valid sh, and the files
// its here-documents write are the reporter and the units byte for byte.
func TestInstaller_WritesWhatItSays(t *testing.T) {
	inst := Installer(Config{Port: 3128, Publish: PublishFile})
	if out, err := exec.Command("sh", "-n", "-c", inst).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	for path, want := range map[string]string{
		ReporterPath:                Reporter(),
		unitDir + "/" + ServiceName: Service(Config{Port: 3128, Publish: PublishFile}),
		unitDir + "/" + TimerName:   Timer(),
	} {
		start := "cat >\"$root" + path + "\" <<'EGRESS_PROXY_EOF'\n"
		i := strings.Index(inst, start)
		if i < 0 {
			t.Fatalf("the installer does not write %s", path)
		}
		body, _, ok := strings.Cut(inst[i+len(start):], "EGRESS_PROXY_EOF\n")
		if !ok || body != want {
			t.Errorf("the installer writes %s as\n%s\nwant\n%s", path, body, want)
		}
	}
	if !strings.Contains(inst, "systemctl enable "+TimerName+" &&\n\t\tsystemctl start --no-block "+TimerName+" ||") {
		t.Error("the installer does not start the timer")
	}
}

// TestReporter_EgressIPThroughTheProxy: with an echo URL the reporter asks
// it through the local proxy (an absolute-URI GET with its Host), reports
// the answer, asks again only after EchoInterval, and keeps the last
// confirmed address with the error when the echo fails.
func TestReporter_EgressIPThroughTheProxy(t *testing.T) {
	const echoURL = "http://echo.example:8080/ip"
	answer := make(chan string, 1)
	var asked []string
	port, _, stop := fakeProxyAnswering(t, false, func(line string, header []string) string {
		asked = append(asked, line+" | "+strings.Join(header, " | "))
		return <-answer
	})
	defer stop()
	g := newGuest(t, readFixture(t, "cloud-init-22.4-done.txt"))
	args := []string{strconv.Itoa(port), string(PublishFile), echoURL}
	before := time.Now().Add(-time.Second)

	answer <- "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n192.0.2.7\n"
	r, _ := g.runArgs(t, args)
	if r.EgressIP != "192.0.2.7" || r.EgressConfirmed.Before(before) || r.EgressError != "" || !r.Serving {
		t.Fatalf("after the echo answered: %+v", r)
	}
	if len(asked) != 1 || !strings.HasPrefix(asked[0], "GET "+echoURL+" HTTP/1.0 | Host: echo.example:8080 | ") {
		t.Fatalf("the proxy was asked %q, want one GET of %s with its Host", asked, echoURL)
	}
	if sig := r.Signal(time.Now()); sig.Egress.IP != "192.0.2.7" || sig.Egress.Source != provider.EgressFromEcho {
		t.Errorf("signal's egress: %+v", sig.Egress)
	}

	// Within EchoInterval: not asked, the address kept.
	if r, _ = g.runArgs(t, args); len(asked) != 1 || r.EgressIP != "192.0.2.7" {
		t.Fatalf("a second run within %s asked %d times and reported %+v", EchoInterval, len(asked), r)
	}
	confirmed := r.EgressConfirmed

	// After it, asked again; a failure keeps the last confirmed address.
	for _, tc := range []struct{ answer, wantErr string }{
		{"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n", "the echo answered: HTTP/1.1 503 Service Unavailable"},
		{"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n<html>you are 192.0.2.9</html>\n", "the echo's answer is not an address: <html>you are 192.0.2.9</html>"},
	} {
		g.backdateEchoCheck(t, EchoInterval+time.Second)
		answer <- tc.answer
		r, _ = g.runArgs(t, args)
		if r.EgressIP != "192.0.2.7" || !r.EgressConfirmed.Equal(confirmed) || r.EgressError != tc.wantErr {
			t.Errorf("after the echo answered %q: %+v, want 192.0.2.7 confirmed at %v with error %q", tc.answer, r, confirmed, tc.wantErr)
		}
	}
	if len(asked) != 3 {
		t.Errorf("asked %d times, want 3", len(asked))
	}

	// Without the echo URL, no egress lines.
	if r, _ = g.run(t, port, PublishFile); r.EgressIP != "" || r.EgressError != "" || !r.EgressChecked.IsZero() {
		t.Errorf("a run without an echo URL reported %+v", r)
	}
}

// backdateEchoCheck moves the report's egress_ip_checked back by d, as if
// d had passed since.
func (g *guest) backdateEchoCheck(t *testing.T, d time.Duration) {
	t.Helper()
	raw, err := os.ReadFile(g.report)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "egress_ip_checked="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("egress_ip_checked=%q", v)
			}
			l = "egress_ip_checked=" + strconv.FormatInt(n-int64(d/time.Second), 10)
		}
		out = append(out, l)
	}
	write(t, g.report, strings.Join(out, "\n"), 0o644)
}

// TestReporter_AsksCloudInitBeforeTheProxy: cloud-init's last step
// restarts Squid, so a run that meets the restart must not report the
// proxy down with cloud-init done. Here cloud-init finishes, and the proxy
// comes back, while cloud-init status is asked: a report of "done" must
// carry the proxy as asked after that (the libvirt end-to-end test's
// second autoheal came from a report of done, not serving).
func TestReporter_AsksCloudInitBeforeTheProxy(t *testing.T) {
	g := newGuest(t, readFixture(t, "cloud-init-22.4-done.txt"))
	restarted := filepath.Join(g.dir, "squid-restarted")
	fixture := filepath.Join(g.dir, "cloud-init.txt")
	write(t, filepath.Join(g.dir, "bin", "cloud-init"),
		"#!/bin/sh\n[ \"$1 $2\" = 'status --long' ] || exit 3\n: >"+restarted+"\ncat "+fixture+"\n", 0o755)
	// The proxy answers once cloud-init's restart of it is over, and
	// closes at once before.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if _, err := os.Stat(restarted); err == nil {
				_, _ = c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"))
			}
			_ = c.Close()
		}
	}()
	r, _ := g.run(t, ln.Addr().(*net.TCPAddr).Port, PublishFile)
	if r.CloudInit != CloudInitDone || !r.Serving {
		t.Fatalf("cloud-init %q, serving %v: a report of cloud-init done must say whether the proxy answers after it", r.CloudInit, r.Serving)
	}
}

// TestReporter_HoldsGroupAddress: a group member's reporter says whether
// the guest holds its group's address, with the real `ip` reading this
// machine's addresses (127.0.0.1 is on lo; 192.0.2.55 is on nothing), and
// says nothing of it without one; the unit gives it the address and
// netlink.
func TestReporter_HoldsGroupAddress(t *testing.T) {
	g := newGuest(t, readFixture(t, "cloud-init-22.4-done.txt"))
	port, _, stop := fakeProxy(t)
	defer stop()
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"EGRESS_PROXY_GROUP_ADDRESS=127.0.0.1"}, "yes"},
		{[]string{"EGRESS_PROXY_GROUP_ADDRESS=192.0.2.55"}, "no"},
		{nil, ""},
	} {
		r, _ := g.run(t, port, PublishFile, tc.env...)
		if r.HoldsGroupAddress != tc.want {
			t.Errorf("with %v: holds_group_address %q, want %q", tc.env, r.HoldsGroupAddress, tc.want)
		}
		s := r.Signal(time.Now())
		switch {
		case tc.want == "" && s.HoldsGroupAddress != nil:
			t.Errorf("with %v: the signal says %v, want nothing", tc.env, *s.HoldsGroupAddress)
		case tc.want != "" && (s.HoldsGroupAddress == nil || *s.HoldsGroupAddress != (tc.want == "yes")):
			t.Errorf("with %v: the signal says %v, want %s", tc.env, s.HoldsGroupAddress, tc.want)
		}
	}
	unit := Service(Config{Port: 3128, Publish: PublishFile, GroupAddress: netip.MustParseAddr("192.0.2.10")})
	for _, want := range []string{"Environment=EGRESS_PROXY_GROUP_ADDRESS=192.0.2.10\n", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("a member's unit lacks %q:\n%s", want, unit)
		}
	}
	if plain := Service(Config{Port: 3128, Publish: PublishFile}); strings.Contains(plain, "EGRESS_PROXY_GROUP_ADDRESS") || strings.Contains(plain, "AF_NETLINK") {
		t.Errorf("a unit of no group member names a group address or netlink:\n%s", plain)
	}
}
