package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	n := 0
	Eventually(t, "third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

func TestEventuallyNilReportsLastError(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if v := recover(); v != nil && v != r {
				panic(v)
			}
		}()
		poll(r, 20*time.Millisecond, "never", func() error { return errors.New("still broken") })
	}()
	if !strings.Contains(r.failed, "still broken") {
		t.Fatalf("failure message %q does not carry the condition's last error", r.failed)
	}
}

func TestEventuallyNilWithinUsesItsBound(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if v := recover(); v != nil && v != r {
				panic(v)
			}
		}()
		EventuallyNilWithin(r, 20*time.Millisecond, "never", func() error { return errors.New("still broken") })
	}()
	if !strings.Contains(r.failed, "not reached within 20ms") {
		t.Fatalf("failure message %q does not name the given bound", r.failed)
	}
}

// TestBeforeTimeoutRunsBeforeTheFailure: what BeforeTimeout registered
// runs once a poll times out, before the failure is reported, and not
// when the poll succeeds.
func TestBeforeTimeoutRunsBeforeTheFailure(t *testing.T) {
	r := &recorder{TB: t}
	var order []string
	BeforeTimeout(r, func() { order = append(order, "dump:"+r.failed) })
	EventuallyNilWithin(r, time.Second, "at once", func() error { return nil })
	if len(order) != 0 {
		t.Fatalf("ran after a poll that succeeded: %q", order)
	}
	func() {
		defer func() {
			if v := recover(); v != nil && v != r {
				panic(v)
			}
		}()
		EventuallyNilWithin(r, 20*time.Millisecond, "never", func() error { return errors.New("still broken") })
	}()
	if len(order) != 1 || order[0] != "dump:" || r.failed == "" {
		t.Fatalf("ran %q with the failure %q; want it once, before the failure was reported", order, r.failed)
	}
}
