package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestPoll: every way a wait of the demo ends.
func TestPoll(t *testing.T) {
	d := newDemo(options{})
	still := errors.New("still missing")

	n := 0
	if err := d.poll(t.Context(), "third call", time.Minute, func() error {
		if n++; n < 3 {
			return still
		}
		return nil
	}); err != nil || n != 3 {
		t.Errorf("poll until the third call: %v after %d calls", err, n)
	}

	broken := errors.New("broken")
	if err := d.poll(t.Context(), "fatal", time.Minute, func() error { return fatal(broken) }); err != broken {
		t.Errorf("a fatal error: poll returned %v, want it unwrapped", err)
	}

	err := d.poll(t.Context(), "never", 0, func() error { return still })
	if !errors.Is(err, errTimedOut) || !strings.Contains(err.Error(), "still missing") || !strings.Contains(err.Error(), "never") {
		t.Errorf("a timeout: %v, want errTimedOut naming the goal and the last error", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.poll(ctx, "cancelled", time.Minute, func() error { return still }); !errors.Is(err, errInterrupted) {
		t.Errorf("a cancelled ctx: %v, want errInterrupted", err)
	}

	d.mgr = &managerProcess{done: make(chan struct{}), err: errors.New("exit status 3")}
	close(d.mgr.done)
	if err := d.poll(t.Context(), "the manager gone", time.Minute, func() error { return still }); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("the manager exited: %v, want an error saying how", err)
	}
}
