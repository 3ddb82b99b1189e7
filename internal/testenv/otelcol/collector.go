package otelcol

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

// BinaryEnv names a collector binary to use instead of the one
// hack/tools/otelcol/build.sh builds.
const BinaryEnv = "OTELCOL"

// stopGrace is how long the collector gets to flush and exit on SIGTERM.
const stopGrace = 10 * time.Second

// Collector is a running OpenTelemetry Collector: an OTLP/HTTP receiver on
// 127.0.0.1 whose spans the file exporter writes to a file, read by Spans.
type Collector struct {
	endpoint  string
	spansFile string
	logFile   string
	child     *childproc.Child
}

// Endpoint is the receiver's base URL, http://127.0.0.1:PORT: the value
// OTEL_EXPORTER_OTLP_ENDPOINT takes (the exporter adds /v1/traces).
func (c *Collector) Endpoint() string { return c.endpoint }

// TracesURL is Endpoint()/v1/traces: the value the signal's own
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and otlptracehttp.WithEndpointURL
// take, used as is (a base URL there gets 404 Not Found).
func (c *Collector) TracesURL() string { return c.endpoint + "/v1/traces" }

// Spans parses every span the collector has written so far. The file
// exporter flushes every 100ms, so a test polls (testenv.EventuallyNil)
// until what it waits for is there.
func (c *Collector) Spans() ([]Span, error) {
	select {
	case <-c.child.Done():
		// Spans it would have received are lost: say why, not "missing".
		return nil, fmt.Errorf("the collector exited (%v); its log:\n%s", c.child.Err(), tail(c.logFile))
	default:
	}
	b, err := os.ReadFile(c.spansFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// A flush of a full buffer may end mid-line: read whole lines only.
	return Parse(string(b[:bytes.LastIndexByte(b, '\n')+1]))
}

// Start runs a collector for the test and stops it when the test ends. The
// binary is $OTELCOL, else the one hack/tools/otelcol/build.sh built.
func Start(t testing.TB) *Collector {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("otelcol: %v", err)
	}
	dir := t.TempDir()
	// The port is free when chosen, not reserved: another process may take
	// it before the collector binds it. Rare; a new port then does.
	for attempt := 1; ; attempt++ {
		c, err := start(bin, dir)
		if errors.Is(err, errPortTaken) && attempt < 3 {
			continue
		}
		if err != nil {
			t.Fatalf("otelcol: %v", err)
		}
		// Registered after TempDir's, so it runs first: the collector stops
		// before its directory goes.
		t.Cleanup(func() { c.stop(t) })
		return c
	}
}

var errPortTaken = errors.New("port taken")

func start(bin, dir string) (*Collector, error) {
	port, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := &Collector{
		endpoint:  "http://" + addr,
		spansFile: filepath.Join(dir, "spans.json"),
		logFile:   filepath.Join(dir, "otelcol.log"),
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(configYAML(addr, c.spansFile)), 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(c.logFile)
	if err != nil {
		return nil, err
	}
	// The child holds its own copy of the descriptor.
	defer log.Close()
	c.child, err = childproc.Start(bin, []string{"--config=" + config}, childEnv(), log)
	if err != nil {
		return nil, err
	}
	if err := c.waitListening(addr); err != nil {
		c.child.Stop(stopGrace)
		logText := tail(c.logFile)
		if strings.Contains(logText, "address already in use") {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, fmt.Errorf("%s --config=%s: %w; its log:\n%s", bin, config, err, logText)
	}
	return c, nil
}

// configYAML is test/e2e/otelcol's configuration on a loopback port, with
// a short flush interval so that tests wait little for what was sent.
func configYAML(addr, spansFile string) string {
	return fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %q
exporters:
  file:
    path: %q
    format: json
    append: true
    flush_interval: 100ms
service:
  telemetry:
    # The collector's own metrics would listen on localhost:8888.
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, addr, spansFile)
}

// childEnv is this process's environment without OTEL_* variables, so a
// test's t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ...) for the code under
// test does not reach the collector's own telemetry.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitListening polls until addr accepts connections, and gives up at once
// when the collector exits (a bad config, a taken port).
func (c *Collector) waitListening(addr string) error {
	deadline := time.Now().Add(testenv.EventuallyTimeout)
	wait := time.Millisecond
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			select {
			case <-c.child.Done(): // someone else's listener answered
			default:
				return nil
			}
		}
		select {
		case <-c.child.Done():
			return fmt.Errorf("exited before listening on %s: %v", addr, c.child.Err())
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after %s: %v", addr, testenv.EventuallyTimeout, err)
		}
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
}

func (c *Collector) stop(t testing.TB) {
	select {
	case <-c.child.Done():
		// Whatever the test concluded from the spans, they may be missing
		// because of this.
		t.Errorf("otelcol: the collector exited during the test (%v); its log:\n%s", c.child.Err(), tail(c.logFile))
		return
	default:
	}
	if !c.child.Stop(stopGrace) {
		t.Logf("otelcol: the collector did not exit within %s of SIGTERM; killed", stopGrace)
	}
}

// binary finds the collector: $OTELCOL, else the path build.sh prints
// (its cache, keyed by the collector's version).
func binary() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinaryEnv, p, err)
		}
		return p, nil
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "hack", "tools", "otelcol", "build.sh")
	out, err := exec.Command(script, "path").Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			err = fmt.Errorf("%w: %s", err, exitErr.Stderr)
		}
		return "", fmt.Errorf("%s path: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	p := lines[len(lines)-1]
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no OpenTelemetry Collector at %s (%v): `make test` builds it, as does hack/tools/otelcol/build.sh (about 5 min on a cold 2-core machine); or set %s to a collector binary", p, err, BinaryEnv)
	}
	return p, nil
}

// tail is the end of a log file, enough to show why a collector failed.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-40)}, lines[len(lines)-40:]...)
	}
	return strings.Join(lines, "\n")
}
