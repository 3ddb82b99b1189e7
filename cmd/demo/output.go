package main

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"
)

// printer serialises everything the demo prints, its own lines and the
// manager's, so that lines never interleave mid-way. Its own lines carry the
// seconds since the start.
type printer struct {
	mu    sync.Mutex
	start time.Time
}

func newPrinter() *printer { return &printer{start: time.Now()} }

func (p *printer) say(format string, args ...any) {
	line := fmt.Sprintf("[%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
	p.raw(line)
}

func (p *printer) raw(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = os.Stdout.WriteString(s)
}

// prefixWriter shows a child's output a line at a time, each line behind
// prefix.
type prefixWriter struct {
	p      *printer
	prefix string
	mu     sync.Mutex
	buf    []byte
}

// maxPartial bounds the buffer for a child that writes without newlines.
const maxPartial = 64 << 10

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.p.raw(w.prefix + string(w.buf[:i+1]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxPartial {
		w.flushLocked()
	}
	return len(b), nil
}

// Flush prints a last line that had no newline.
func (w *prefixWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
}

func (w *prefixWriter) flushLocked() {
	if len(w.buf) > 0 {
		w.p.raw(w.prefix + string(w.buf) + "\n")
		w.buf = w.buf[:0]
	}
}
