package inflight

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// held is a step the test drives: it reports what the test sends on
// progress and returns what it sends on result, or its ctx's error.
type held struct {
	started  chan struct{}
	progress chan string
	result   chan error
	ctxErr   chan error // what the step saw when its ctx ended
	runs     atomic.Int32
}

func newHeld() *held {
	return &held{
		started: make(chan struct{}, 8), progress: make(chan string),
		result: make(chan error, 1), ctxErr: make(chan error, 1),
	}
}

func (h *held) step(ctx context.Context, report func(string)) error {
	h.runs.Add(1)
	h.started <- struct{}{}
	for {
		select {
		case d := <-h.progress:
			report(d)
		case err := <-h.result:
			return err
		case <-ctx.Done():
			h.ctxErr <- ctx.Err()
			return ctx.Err()
		}
	}
}

// say sends a progress detail and waits until the table shows it.
func (h *held) say(t *testing.T, tb *Table, name, detail string) {
	t.Helper()
	select {
	case h.progress <- detail:
	case <-time.After(10 * time.Second):
		t.Fatalf("the step did not take progress %q: it is no longer running", detail)
	}
	testenv.Eventually(t, "progress "+detail, func() bool { return tb.Poll(name).Progress == detail })
}

func start(t *testing.T, tb *Table, name string, step Step) Status {
	t.Helper()
	st, err := tb.Start(t.Context(), name, "queued", step)
	if err != nil {
		t.Fatalf("Start(%q): %v", name, err)
	}
	return st
}

// waitEnded waits until name's step has ended (Poll no longer Running) and
// returns the first Status that says so.
func waitEnded(t *testing.T, tb *Table, name string) Status {
	t.Helper()
	var st Status
	testenv.Eventually(t, name+" step ending", func() bool { st = tb.Poll(name); return !st.Running })
	return st
}

func TestStartRunsOnceAndJoins(t *testing.T) {
	tb := New(provider.OpCreate)
	h := newHeld()
	st := start(t, tb, "a", h.step)
	if !st.Running || st.Progress != "queued" || st.Since.IsZero() {
		t.Fatalf("Start = %+v, want Running with the initial progress and a start time", st)
	}
	<-h.started
	h.say(t, tb, "a", "downloading image debian-12: 212/400 MiB")

	// A second Start of a running name joins: its step never runs.
	var second atomic.Bool
	joined := start(t, tb, "a", func(context.Context, func(string)) error { second.Store(true); return nil })
	if !joined.Running || joined.Progress != "downloading image debian-12: 212/400 MiB" || !joined.Since.Equal(st.Since) {
		t.Errorf("second Start = %+v, want the running step's status", joined)
	}
	h.result <- nil
	if got := waitEnded(t, tb, "a"); got.Err != nil {
		t.Errorf("after a step that succeeded Poll = %v, want idle", got)
	}
	if second.Load() || h.runs.Load() != 1 {
		t.Errorf("steps run: held %d, joined ran %t; want the first only", h.runs.Load(), second.Load())
	}
	if n := tb.Len(); n != 0 {
		t.Errorf("Len after a success = %d, want 0: a success leaves nothing", n)
	}
}

func TestFailureIsHandedOverOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		class error
	}{
		{"classified quota", provider.Errorf(provider.ErrQuotaExceeded, "pool full"), provider.ErrQuotaExceeded},
		{"classified permanent", provider.Errorf(provider.ErrPermanent, "no such template"), provider.ErrPermanent},
		{"unclassified", errors.New("connection reset"), provider.ErrTransient},
	} {
		for _, via := range []string{"Poll", "Start"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				tb := New(provider.OpCreate)
				h := newHeld()
				start(t, tb, "a", h.step)
				<-h.started
				h.result <- tc.err
				// Wait for the end without taking the result.
				testenv.Eventually(t, "step ending", func() bool { return tb.peekDone("a") })
				var got Status
				if via == "Poll" {
					got = tb.Poll("a")
				} else {
					var ran atomic.Bool
					got = start(t, tb, "a", func(context.Context, func(string)) error { ran.Store(true); return nil })
					if ran.Load() || got.Running {
						t.Errorf("Start over a waiting failure started a step (%v); it must hand the failure over first", got)
					}
				}
				if !errors.Is(got.Err, tc.class) || provider.ClassOf(got.Err) != tc.class {
					t.Fatalf("%s after the step failed = %v, want class %s", via, got, provider.ClassName(tc.class))
				}
				var pe *provider.Error
				if !errors.As(got.Err, &pe) || pe.Op != provider.OpCreate {
					t.Errorf("result %#v is not a *provider.Error of op %q", got.Err, provider.OpCreate)
				}
				if again := tb.Poll("a"); again.Err != nil || again.Running {
					t.Errorf("Poll after the failure was handed over = %v, want idle", again)
				}
				// The next Start starts afresh.
				h2 := newHeld()
				if st := start(t, tb, "a", h2.step); !st.Running {
					t.Errorf("Start after the failure was handed over = %v, want a new step", st)
				}
				<-h2.started
				h2.result <- nil
				waitEnded(t, tb, "a")
			})
		}
	}
}

func TestStepRunsOnItsOwnCtx(t *testing.T) {
	tb := New(provider.OpCreate)
	var logged atomic.Value
	logger := funcr.New(func(_, args string) { logged.Store(args) }, funcr.Options{})
	callCtx, endCall := context.WithCancel(logr.NewContext(t.Context(), logger.WithValues("call", "create")))
	h := newHeld()
	if _, err := tb.Start(callCtx, "a", "", func(ctx context.Context, report func(string)) error {
		logr.FromContextOrDiscard(ctx).Info("step")
		return h.step(ctx, report)
	}); err != nil {
		t.Fatal(err)
	}
	<-h.started
	endCall() // the call returned
	h.say(t, tb, "a", "still going")
	if st := tb.Poll("a"); !st.Running {
		t.Fatalf("the step ended with its caller's ctx: %v", st)
	}
	if s, _ := logged.Load().(string); !strings.Contains(s, `"call"="create"`) {
		t.Errorf("the step's logger line %q lacks the caller's values", s)
	}
	h.result <- nil
	waitEnded(t, tb, "a")
}

func TestPanicIsTransient(t *testing.T) {
	tb := New(provider.OpCreate)
	start(t, tb, "a", func(context.Context, func(string)) error { panic("index out of range") })
	st := waitEnded(t, tb, "a")
	if provider.ClassOf(st.Err) != provider.ErrTransient || st.Err == nil || !strings.Contains(st.Err.Error(), "panicked") {
		t.Errorf("after a panicking step Poll = %v, want a Transient error saying it panicked", st)
	}
}

func TestCancelStopsTheStep(t *testing.T) {
	tb := New(provider.OpCreate)
	h := newHeld()
	start(t, tb, "a", h.step)
	<-h.started
	if err := tb.Cancel(t.Context(), "a"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	// Cancel returned: the step must have returned already.
	select {
	case err := <-h.ctxErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the step's ctx ended with %v, want context.Canceled", err)
		}
	default:
		t.Fatal("Cancel returned before the step saw its ctx end")
	}
	if st := tb.Poll("a"); st.Running || st.Err != nil {
		t.Errorf("Poll after Cancel = %v, want idle: a cancelled step's result is nobody's", st)
	}
	if n := tb.Len(); n != 0 {
		t.Errorf("Len after Cancel = %d, want 0", n)
	}
	if err := tb.Cancel(t.Context(), "never-started"); err != nil {
		t.Errorf("Cancel of a name with no step: %v", err)
	}
}

func TestCancelForgetsAWaitingFailure(t *testing.T) {
	tb := New(provider.OpCreate)
	h := newHeld()
	start(t, tb, "a", h.step)
	<-h.started
	h.result <- provider.Errorf(provider.ErrPermanent, "bad image")
	testenv.Eventually(t, "failure waiting", func() bool { return tb.Len() == 1 && tb.peekDone("a") })
	if err := tb.Cancel(t.Context(), "a"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if st := tb.Poll("a"); st.Err != nil {
		t.Errorf("Poll after Cancel = %v; Delete forgets the failure of what it deleted", st)
	}
}

func TestCancelIsBounded(t *testing.T) {
	tb := New(provider.OpCreate)
	unstuck := make(chan struct{})
	t.Cleanup(func() { close(unstuck) })
	started := make(chan struct{})
	start(t, tb, "a", func(context.Context, func(string)) error {
		close(started)
		<-unstuck // ignores its ctx
		return provider.Errorf(provider.ErrPermanent, "late failure")
	})
	<-started
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := tb.Cancel(ctx, "a")
	if provider.ClassOf(err) != provider.ErrTransient || err == nil {
		t.Fatalf("Cancel of a step that ignores its ctx = %v, want a Transient error once ctx ends", err)
	}
	if st := tb.Poll("a"); !st.Running {
		t.Errorf("Poll while the cancelled step still runs = %v, want Running", st)
	}
}

func TestCancelledStepResultIsDropped(t *testing.T) {
	tb := New(provider.OpCreate)
	unstuck := make(chan struct{})
	started := make(chan struct{})
	start(t, tb, "a", func(context.Context, func(string)) error {
		close(started)
		<-unstuck
		return provider.Errorf(provider.ErrPermanent, "late failure")
	})
	<-started
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := tb.Cancel(ctx, "a"); err == nil {
		t.Fatal("Cancel of a stuck step succeeded")
	}
	close(unstuck)
	if st := waitEnded(t, tb, "a"); st.Err != nil {
		t.Errorf("the cancelled step's late failure reached Poll: %v", st)
	}
}

func TestCloseStopsEverythingAndRefusesMore(t *testing.T) {
	tb := New(provider.OpCreate)
	hs := []*held{newHeld(), newHeld(), newHeld()}
	for i, h := range hs {
		start(t, tb, string(rune('a'+i)), h.step)
		<-h.started
	}
	if err := tb.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, h := range hs {
		select {
		case <-h.ctxErr:
		default:
			t.Errorf("step %d was still running when Close returned", i)
		}
	}
	if n := tb.Len(); n != 0 {
		t.Errorf("Len after Close = %d, want 0", n)
	}
	_, err := tb.Start(t.Context(), "d", "", func(context.Context, func(string)) error { return nil })
	if !errors.Is(err, ErrClosed) || provider.ClassOf(err) != provider.ErrTransient {
		t.Errorf("Start after Close = %v, want ErrClosed, Transient", err)
	}
}

func TestCloseIsBounded(t *testing.T) {
	tb := New(provider.OpCreate)
	unstuck := make(chan struct{})
	t.Cleanup(func() { close(unstuck) })
	started := make(chan struct{})
	start(t, tb, "a", func(context.Context, func(string)) error { close(started); <-unstuck; return nil })
	<-started
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := tb.Close(ctx); err == nil || !strings.Contains(err.Error(), "1 create steps still running") {
		t.Errorf("Close with a step that ignores its ctx = %v, want an error naming it", err)
	}
}

func TestProgressIsClipped(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"ascii", strings.Repeat("x", 1000)},
		{"multibyte on the cut", strings.Repeat("é", 500)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clip(tc.in)
			if len(got) > MaxProgress || !strings.HasSuffix(got, "…") || !utf8Valid(got) {
				t.Errorf("clip of %d bytes = %d bytes %q, want at most %d, valid UTF-8, ending in …", len(tc.in), len(got), got, MaxProgress)
			}
		})
	}
	if got := clip("short"); got != "short" {
		t.Errorf("clip(short) = %q", got)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// peekDone reports whether name's step ended, without handing anything
// over.
func (t *Table) peekDone(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.steps[name]
	if !ok {
		return false
	}
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func BenchmarkTable(b *testing.B) {
	ctx := context.Background()
	b.Run("start and finish", func(b *testing.B) {
		tb := New(provider.OpCreate)
		for b.Loop() {
			done := make(chan struct{})
			_, _ = tb.Start(ctx, "a", "", func(context.Context, func(string)) error { close(done); return nil })
			<-done
			for tb.Poll("a").Running {
			}
		}
	})
	b.Run("poll a running step", func(b *testing.B) {
		tb := New(provider.OpCreate)
		release := make(chan struct{})
		_, _ = tb.Start(ctx, "a", "working", func(context.Context, func(string)) error { <-release; return nil })
		for b.Loop() {
			tb.Poll("a")
		}
		close(release)
	})
}

// Running reports a running step and never hands a failure over: the next
// Poll still gets it.
func TestRunningHandsNothingOver(t *testing.T) {
	tab := New("create")
	release := make(chan struct{})
	if _, err := tab.Start(context.Background(), "a", "", func(ctx context.Context, _ func(string)) error {
		<-release
		return provider.Errorf(provider.ErrPermanent, "boom")
	}); err != nil {
		t.Fatal(err)
	}
	if !tab.Running("a") || tab.Running("b") {
		t.Fatal("Running: want a running, b not")
	}
	st := tab.Poll("a")
	close(release)
	<-st.Done
	if tab.Running("a") {
		t.Fatal("Running after the step ended")
	}
	if st := tab.Poll("a"); !errors.Is(st.Err, provider.ErrPermanent) {
		t.Fatalf("Poll after Running: %+v, want the failure still there", st)
	}
}
