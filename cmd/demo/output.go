package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// printer serialises everything the demo prints, its own lines and those
// it shows of the manager's, so that lines never interleave mid-way. Its
// own lines carry the seconds since the start.
type printer struct {
	mu    sync.Mutex
	start time.Time
	w     io.Writer
}

func newPrinter() *printer { return &printer{start: time.Now(), w: os.Stdout} }

func (p *printer) say(format string, args ...any) {
	line := fmt.Sprintf("[%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
	p.raw(line)
}

func (p *printer) raw(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.w, s) // a closed stdout is no reason to stop (see SIGPIPE in main.go)
}

// managerOutput takes the manager's stdout and stderr. Every byte goes to
// its log file; the screen shows, a line at a time behind prefix, only its
// warnings and errors, console-encoded, and what is no log record at all (a
// start-up error, a panic): the manager logs a JSON line per reconcile
// step, which would bury the demo's own story.
type managerOutput struct {
	p      *printer
	prefix string

	mu      sync.Mutex
	file    *os.File // nil once closed
	path    string
	fileErr error  // the first failed write: from then on every line shows
	buf     []byte // the start of a line not yet ended
}

// maxPartial bounds the buffer for a child that writes without newlines.
const maxPartial = 64 << 10

func newManagerOutput(p *printer, prefix, path string) (*managerOutput, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &managerOutput{p: p, prefix: prefix, file: f, path: path}, nil
}

func (w *managerOutput) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file != nil && w.fileErr == nil {
		if _, err := w.file.Write(b); err != nil {
			w.fileErr = err
			w.p.say("writing the manager's log failed (%v): all its lines show here from now on", err)
		}
	}
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.showLocked(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxPartial {
		w.flushLocked()
	}
	// Always all of it: a failed write would only make exec stop copying,
	// and the manager block on a full pipe.
	return len(b), nil
}

// Close shows a last line that had no newline and closes the log file.
func (w *managerOutput) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
	if w.file == nil {
		return nil
	}
	err := w.file.Close()
	w.file = nil
	return err
}

func (w *managerOutput) flushLocked() {
	if len(w.buf) > 0 {
		w.showLocked(string(w.buf))
		w.buf = w.buf[:0]
	}
}

func (w *managerOutput) showLocked(line string) {
	if w.fileErr != nil {
		w.p.raw(w.prefix + line + "\n")
		return
	}
	if s, ok := screenLine(line); ok {
		w.p.raw(w.prefix + s + "\n")
	}
}

// screenLevels are the levels of the manager's log records the screen
// shows; the others (info, debug, the V-levels zap calls "Level(-2)") are
// in the file only.
var screenLevels = map[string]bool{"warn": true, "error": true, "dpanic": true, "panic": true, "fatal": true}

// Fields that screenLine leaves out: the first three it shows otherwise,
// the last three stay in the file (a stack trace is many lines).
var screenSkip = map[string]bool{"level": true, "logger": true, "msg": true, "ts": true, "caller": true, "stacktrace": true}

// screenLine decides whether a line of the manager's output shows on the
// screen, and how: a JSON log record (zap's, the manager's default) shows
// only at a level of screenLevels, as `LEVEL logger: msg error=... k=v`
// with the error first and the other fields by name; any other line but a
// blank one shows as it is.
func screenLine(line string) (string, bool) {
	trimmed := strings.TrimSpace(line)
	if trimmed == "" {
		return "", false
	}
	var rec map[string]any
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.UseNumber() // numbers as the manager wrote them
	if !strings.HasPrefix(trimmed, "{") || dec.Decode(&rec) != nil || dec.More() {
		return line, true
	}
	level, ok := rec["level"].(string)
	msg, hasMsg := rec["msg"].(string)
	if !ok || !hasMsg {
		return line, true // JSON, but no log record of the manager's
	}
	if !screenLevels[level] {
		return "", false
	}
	var b strings.Builder
	b.WriteString(strings.ToUpper(level))
	b.WriteByte(' ')
	if logger, ok := rec["logger"].(string); ok && logger != "" {
		b.WriteString(logger + ": ")
	}
	b.WriteString(msg)
	keys := make([]string, 0, len(rec))
	for k := range rec {
		if !screenSkip[k] && k != "error" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if _, ok := rec["error"]; ok {
		keys = append([]string{"error"}, keys...)
	}
	for _, k := range keys {
		b.WriteString(" " + k + "=" + screenValue(rec[k]))
	}
	return b.String(), true
}

// screenValue writes a field's value as logfmt would: a plain string as
// is, one with spaces, quotes or '=' quoted, anything else as JSON.
func screenValue(v any) string {
	if s, ok := v.(string); ok {
		if s == "" || strings.ContainsAny(s, " \t\"=\n") {
			return strconv.Quote(s)
		}
		return s
	}
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(out)
}
