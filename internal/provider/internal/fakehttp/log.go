package fakehttp

import (
	"fmt"
	"net/url"
	"sync"
)

// Log is a fake's request log of entries R, oldest first. Target says
// where an entry's call went: its method and its path below the API's base
// (what a Pattern matches), ok false for a call outside the API, which
// Count never counts. The zero value, with Target set, is empty.
type Log[R any] struct {
	Target func(R) (method, path string, ok bool)

	mu      sync.Mutex
	entries []R
}

// Add appends r.
func (l *Log[R]) Add(r R) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, r)
}

// All is a copy of the log.
func (l *Log[R]) All() []R {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]R(nil), l.entries...)
}

// Clear empties the log.
func (l *Log[R]) Clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = nil
}

// Count is how many logged calls match method ("" any) and a path
// pattern (Pattern).
func (l *Log[R]) Count(method, pattern string) int {
	p := Pattern{Method: method, Path: pattern}
	n := 0
	for _, r := range l.All() {
		if m, path, ok := l.Target(r); ok && p.Matches(m, path) {
			n++
		}
	}
	return n
}

// Line is an entry as the fakes print it: "METHOD path?query<note> ->
// status"; note is "" or starts with a space.
func Line(method, path string, query url.Values, note string, status int) string {
	q := ""
	if len(query) > 0 {
		q = "?" + query.Encode()
	}
	return fmt.Sprintf("%s %s%s%s -> %d", method, path, q, note, status)
}
