package kubernetes

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// squidBinary finds Debian's squid (in /usr/sbin, which a non-root PATH may
// lack). Without it the test fails, naming the set-up script, unless
// SKIP_SQUID_TESTS=1.
func squidBinary(t *testing.T) string {
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

// TestSquid_RealSquid proves the generated configuration with the real
// Squid: the Pod's squid.conf parses, and the same rules, run on loopback,
// forward a fetch from an admitted source and refuse one from elsewhere.
func TestSquid_RealSquid(t *testing.T) {
	bin := squidBinary(t)
	dir := t.TempDir()

	t.Run("pod config parses", func(t *testing.T) {
		p := pureProvider(t, Config{})
		for _, ranges := range [][]string{{"10.0.0.0/8", "fd00::/8"}, nil} {
			req := baseRequest()
			req.AllowedSourceRanges = ranges
			s, err := p.resolve(req)
			if err != nil {
				t.Fatal(err)
			}
			conf := filepath.Join(dir, "pod-squid.conf")
			if err := os.WriteFile(conf, []byte(p.buildConfigMap(s).Data[confFile]), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "-k", "parse", "-f", conf).CombinedOutput()
			if err != nil {
				t.Errorf("squid -k parse refused the Pod's config (ranges %v): %v\n%s", ranges, err, out)
			}
		}
	})

	t.Run("forwards admitted, refuses others", func(t *testing.T) {
		upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "hello through squid")
		}))
		defer upstream.Close()

		runDir := filepath.Join(dir, "run")
		if err := os.MkdirAll(runDir, 0o777); err != nil {
			t.Fatal(err)
		}
		sp := squidParams{
			ListenAddr: "127.0.0.1", Port: freePort(t),
			// Only 127.0.0.2 is admitted; 127.0.0.1 is not.
			Ranges:  []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
			PidFile: filepath.Join(runDir, "squid.pid"), CoredumpDir: runDir,
			// The upstream page is on loopback, which the Pod's config
			// denies as a destination.
			AllowToLocalhost: true,
		}
		if os.Geteuid() == 0 {
			// Squid started as root drops to this user; let it write.
			sp.EffectiveUser = "proxy"
			for d := runDir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
				_ = os.Chmod(d, 0o777)
			}
		}
		conf := filepath.Join(runDir, "squid.conf")
		if err := os.WriteFile(conf, []byte(squidConf(sp)), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// A regular file, not a pipe: Squid reopens /dev/stdout, and a
		// pipe made by root cannot be reopened by the user it drops to.
		logPath := filepath.Join(runDir, "squid.out")
		logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(logPath, 0o666)
		defer logFile.Close()
		cmd := exec.CommandContext(ctx, bin, "-N", "-f", conf)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		defer func() {
			cancel()
			<-exited
			if t.Failed() {
				out, _ := os.ReadFile(logPath)
				t.Logf("squid output:\n%s", out)
			}
		}()
		proxyAddr := net.JoinHostPort(sp.ListenAddr, strconv.Itoa(int(sp.Port)))
		if !waitListening(proxyAddr, exited) {
			t.Fatalf("squid never listened on %s", proxyAddr)
		}

		if code, body := fetchVia(t, proxyAddr, "127.0.0.2", upstream.URL); code != http.StatusOK || body != "hello through squid" {
			t.Errorf("fetch from admitted 127.0.0.2: %d %q, want 200 and the page", code, body)
		}
		if code, _ := fetchVia(t, proxyAddr, "127.0.0.1", upstream.URL); code != http.StatusForbidden {
			t.Errorf("fetch from 127.0.0.1 (not in allowedSourceRanges): %d, want 403", code)
		}
	})
}

func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
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

// fetchVia GETs target through the proxy at proxyAddr from source.
func fetchVia(t *testing.T, proxyAddr, source, target string) (int, string) {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: proxyAddr}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 10 * time.Second}
	c := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(pu), DialContext: d.DialContext, DisableKeepAlives: true},
		Timeout:   30 * time.Second,
	}
	resp, err := c.Get(target)
	if err != nil {
		t.Fatalf("GET %s via %s from %s: %v", target, proxyAddr, source, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
