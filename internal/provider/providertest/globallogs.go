package providertest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// A provider is told to log through its ctx's logger, but a secret leaks
// just as well through a global one: ctrl.Log, klog (client-go's), the
// standard library's log, slog's default. The leak case captures all four
// for its duration (captureGlobalLogs).
//
// Two of them cannot simply be swapped for the case and back.
// controller-runtime takes one SetLogger per process (later calls are
// ignored, and after 30 seconds of use it fulfils itself with a null sink),
// and klog's SetLogger is not safe while other goroutines log. So this
// package installs, once, at init (before any test or goroutine runs), a
// switch behind each: it sends lines to the capture of the running case,
// and otherwise where they went before (nowhere for ctrl.Log, as when it is
// never set; stderr for klog). A test binary that uses providertest
// therefore must not call ctrl.SetLogger itself: the call would be ignored.
// The standard log and slog are swapped per case and restored.

func init() {
	ctrllog.SetLogger(logr.New(&switchSink{source: "ctrl.Log"}))
	klog.SetLoggerWithOptions(logr.New(&switchSink{source: "klog", idle: stderrSink("klog")}))
}

// globalCapture is where the switches send lines while a case captures;
// nil when none does.
var globalCapture atomic.Pointer[logBuffer]

// globalMu makes captures one at a time: the loggers are the process's.
var globalMu sync.Mutex

// stderrSink prints every line it is given on stderr, marked with source.
func stderrSink(source string) logr.LogSink {
	return funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, strings.TrimSpace(source+" "+prefix+" "+args))
	}, funcr.Options{Verbosity: logVerbosity}).GetSink()
}

// captureSink writes into buf, every line marked with source.
func captureSink(buf *logBuffer, source string) logr.LogSink {
	return funcr.New(func(prefix, args string) {
		buf.write(strings.TrimSpace(source+" "+prefix), args)
	}, funcr.Options{Verbosity: logVerbosity}).GetSink()
}

// switchSink forwards to the running capture, else to idle (nil: discard).
// WithName and WithValues are kept as steps and replayed on the sink a line
// goes to, since a logger derived before a case must still reach its
// capture.
type switchSink struct {
	source string
	idle   logr.LogSink
	steps  []func(logr.LogSink) logr.LogSink
}

var _ logr.LogSink = (*switchSink)(nil)

func (s *switchSink) target() logr.LogSink {
	t := s.idle
	if buf := globalCapture.Load(); buf != nil {
		t = captureSink(buf, s.source)
	}
	if t == nil {
		return nil
	}
	for _, step := range s.steps {
		t = step(t)
	}
	return t
}

func (s *switchSink) Init(logr.RuntimeInfo) {}

func (s *switchSink) Enabled(level int) bool {
	t := s.target()
	return t != nil && t.Enabled(level)
}

func (s *switchSink) Info(level int, msg string, kv ...any) {
	if t := s.target(); t != nil && t.Enabled(level) {
		t.Info(level, msg, kv...)
	}
}

func (s *switchSink) Error(err error, msg string, kv ...any) {
	if t := s.target(); t != nil {
		t.Error(err, msg, kv...)
	}
}

func (s *switchSink) with(step func(logr.LogSink) logr.LogSink) logr.LogSink {
	c := *s
	c.steps = append(append([]func(logr.LogSink) logr.LogSink(nil), s.steps...), step)
	return &c
}

func (s *switchSink) WithValues(kv ...any) logr.LogSink {
	return s.with(func(t logr.LogSink) logr.LogSink { return t.WithValues(kv...) })
}

func (s *switchSink) WithName(name string) logr.LogSink {
	return s.with(func(t logr.LogSink) logr.LogSink { return t.WithName(name) })
}

// lineWriter is the standard log's output during a capture: one line per
// Write, as the log package writes them.
type lineWriter struct{ buf *logBuffer }

func (w lineWriter) Write(p []byte) (int, error) {
	w.buf.write("log", string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// captureGlobalLogs sends every line of the global loggers, at every
// verbosity, to a buffer it returns, until the case ends. It first proves
// that each of them reaches the buffer, and fails the case for one that
// does not, since the case would then be blind to it.
func captureGlobalLogs(t *testing.T) *logBuffer {
	t.Helper()
	globalMu.Lock()
	buf := &logBuffer{}
	globalCapture.Store(buf)

	// klog filters by its own -v before a line reaches its logger.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogV := klogFlags.Lookup("v").Value.String()
	if err := klogFlags.Set("v", fmt.Sprint(logVerbosity)); err != nil {
		t.Errorf("raising klog's verbosity: %v", err)
	}

	// slog.SetDefault also points the log package at the new handler, so
	// the log package's output is saved first and set after it.
	prevSlog := slog.Default()
	prevOut, prevFlags, prevPrefix := log.Writer(), log.Flags(), log.Prefix()
	slog.SetDefault(slog.New(logr.ToSlogHandler(logr.New(captureSink(buf, "slog")))))
	log.SetOutput(lineWriter{buf})
	log.SetFlags(0)
	log.SetPrefix("")

	t.Cleanup(func() {
		slog.SetDefault(prevSlog)
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
		log.SetPrefix(prevPrefix)
		if err := klogFlags.Set("v", klogV); err != nil {
			t.Errorf("restoring klog's verbosity: %v", err)
		}
		klog.Flush()
		globalCapture.Store(nil)
		globalMu.Unlock()
	})

	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("crypto/rand: %v", err)
	}
	probe := "providertest-probe-" + hex.EncodeToString(b[:])
	for _, p := range []struct {
		name string
		emit func()
	}{
		{"ctrl.Log", func() { ctrllog.Log.WithName("providertest").V(logVerbosity).Info(probe) }},
		{"klog", func() { klog.V(logVerbosity).InfoS(probe) }},
		{"the standard log", func() { log.Print(probe) }},
		{"slog's default", func() { slog.Debug(probe) }},
	} {
		before := buf.String()
		p.emit()
		if !strings.Contains(strings.TrimPrefix(buf.String(), before), probe) {
			t.Errorf("the leak case cannot see %s: a probe line logged through it did not reach the capture "+
				"(a test binary using providertest must not set ctrl.Log or klog's logger itself)", p.name)
		}
	}
	return buf
}
