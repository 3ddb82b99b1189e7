package squid

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestRealSquid_ServingProbe: the guest's reporter (the real script) asks
// the real Squid from 127.0.0.1, which is not an admitted client here;
// Squid answers it itself (403, its own error page), the report says
// serving, and the question is no access log line, while an admitted
// client's request is one. Without ServingProbe the same question is
// logged, so the check can fail.
func TestRealSquid_ServingProbe(t *testing.T) {
	origin, _ := testenv.CountingOrigin(t, allowedIP, "hello through squid", false)
	for _, probe := range []bool{true, false} {
		t.Run("ServingProbe="+strconv.FormatBool(probe), func(t *testing.T) {
			dirs := squidtest.NewDirs(t)
			sp := Params{
				ListenAddr: "127.0.0.1", Port: testenv.FreePort(t),
				Clients:      []netip.Prefix{netip.MustParsePrefix(clientIP + "/32")},
				Destinations: (&egress.Settings{AllowedDestinations: []string{allowedIP + "/32"}}).Policy(),
				PidFile:      dirs.PidFile(), CoredumpDir: dirs.Run, EffectiveUser: dirs.EffectiveUser,
				ServingProbe: probe,
			}
			proxy := squidtest.Addr(sp.ListenAddr, sp.Port)
			squidtest.Start(t, dirs, Config(sp), proxy)

			report := runReporter(t, sp.Port)
			if !report.Serving || report.Answered.IsZero() {
				t.Fatalf("the reporter's report with the real Squid: %+v", report)
			}
			// An admitted client's request, which is logged: once its line
			// is there, the reporter's would be too.
			if a := via(t, proxy, clientIP, origin.URL, false, nil); a.code != http.StatusOK {
				t.Fatalf("fetch from admitted %s: %+v", clientIP, a)
			}
			lines := waitAccessLines(t, dirs, 1)
			_, probed := squidtest.FindAccess(lines, map[string]string{"host": servingreport.ProbeHost})
			if probed == probe {
				t.Errorf("ServingProbe %v: the reporter's question logged: %v; access lines: %v", probe, probed, lines)
			}
		})
	}
	// The model agrees that the first line decides the question, so no
	// rule that resolves is reached.
	a, err := squidtest.ParseAccess(Config(Params{Port: 3128, Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ServingProbe: true}))
	if err != nil {
		t.Fatal(err)
	}
	allowed, notes := a.Decide(squidtest.Request{Client: netip.MustParseAddr("127.0.0.1"), Scheme: "http", Host: servingreport.ProbeHost, Port: 80})
	if allowed || notes["rule"] != ruleServingProbe {
		t.Errorf("the model decides the reporter's question: allowed %v, notes %v", allowed, notes)
	}
}

// runReporter runs the guest's reporter once against 127.0.0.1:port.
func runReporter(t *testing.T, port int32) servingreport.Report {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "reporter")
	if err := os.WriteFile(script, []byte(servingreport.Reporter()), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "report")
	cmd := exec.Command("bash", script, strconv.Itoa(int(port)), string(servingreport.PublishFile))
	cmd.Env = append(os.Environ(), "EGRESS_PROXY_REPORT="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reporter: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := servingreport.Parse(string(raw))
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	return r
}

// waitAccessLines waits until Squid's output holds at least n access
// lines (Squid writes its log asynchronously).
func waitAccessLines(t *testing.T, dirs squidtest.Dirs, n int) []map[string]string {
	t.Helper()
	var lines []map[string]string
	testenv.EventuallyNil(t, "squid's access lines", func() error {
		out, err := os.ReadFile(dirs.Output())
		if err != nil {
			return err
		}
		if lines, err = squidtest.AccessLines(string(out)); err != nil {
			return err
		}
		if len(lines) < n {
			return fmt.Errorf("%d access lines in %s", len(lines), strings.TrimSpace(string(out)))
		}
		return nil
	})
	return lines
}
