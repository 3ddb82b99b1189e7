package testenv

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// LogLines captures log lines, one string each ("<name> <key/values>"),
// for tests that assert what a component logs and what it must not.
type LogLines struct {
	mu    sync.Mutex
	lines []string
}

// Context returns a context carrying a logger that writes to l at up to
// verbosity.
func (l *LogLines) Context(verbosity int) context.Context {
	return logr.NewContext(context.Background(), l.Logger(verbosity))
}

// Logger is a logger that writes to l at up to verbosity.
func (l *LogLines) Logger(verbosity int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: verbosity})
}

// Find returns the lines holding every one of subs.
func (l *LogLines) Find(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// String is every line, one per row.
func (l *LogLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// FreePort is a port the kernel just handed out on 127.0.0.1, so nothing
// else listens there when the test binds it.
func FreePort(t testing.TB) int32 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// CountingOrigin serves body on ip (plain HTTP, or TLS when useTLS) until
// the test ends, and counts the requests it gets: a test proves a refused
// destination was never reached by a count of zero.
func CountingOrigin(t testing.TB, ip, body string, useTLS bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, body)
	}))
	_ = srv.Listener.Close()
	srv.Listener = ln
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, &hits
}

// LinkTools puts symbolic links to this machine's tools into dir, for a
// test that runs a script with PATH=dir and nothing else on it.
func LinkTools(t testing.TB, dir string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
}
