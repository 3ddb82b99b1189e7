package testenv

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// EventuallyTimeout bounds every Eventually. It only stops a hung test: no
// test asserts how long anything took (speed is for benchmarks).
const EventuallyTimeout = 60 * time.Second

// Eventually polls cond until it returns true and fails the test with what
// once EventuallyTimeout passed. It is the one poll loop of the test suites.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyNil(t, what, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("condition false")
	})
}

// EventuallyNil polls cond until it returns nil and fails the test with
// cond's last error once EventuallyTimeout passed, so a failure says what
// was still wrong, not only that time ran out.
func EventuallyNil(t testing.TB, what string, cond func() error) {
	t.Helper()
	poll(t, EventuallyTimeout, what, cond)
}

// EventuallyNilWithin is EventuallyNil with its own bound, for what is slow
// by nature on the test machines (a VM booting under emulation takes about
// a minute). The bound still only stops a hung test.
func EventuallyNilWithin(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	poll(t, timeout, what, cond)
}

func poll(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if f, ok := beforeTimeout.Load(t); ok {
				f.(func())()
			}
			t.Fatalf("%s: not reached within %s: %v", what, timeout, err)
		}
		time.Sleep(wait)
		if wait < 100*time.Millisecond {
			wait *= 2 // quick for fast conditions, gentle on a busy API server
		}
	}
}

// beforeTimeout holds, per test, what BeforeTimeout registered.
var beforeTimeout sync.Map

// BeforeTimeout registers f to run when a poll of t times out, just before
// the failure is reported: what f prints (an operator's log) then comes
// before the failure line instead of burying it, so the line that says
// what was not reached ends the test's output, where a truncated CI log
// still shows it.
func BeforeTimeout(t testing.TB, f func()) {
	beforeTimeout.Store(t, f)
	t.Cleanup(func() { beforeTimeout.Delete(t) })
}
