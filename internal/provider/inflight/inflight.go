// Package inflight is the table of a provider's slow steps in flight, keyed
// by instance name, so that no provider call holds its caller longer than
// provider.CallBound however slow the backend is.
//
// Create starts the slow part of its work (an image download, a clone task,
// a boot wait) as a Step and returns at once with the instance
// Provisioning; Create and Get read the step's progress while it runs; the
// step's failure, classified, reaches the next Create or Get of that name
// once. The table holds memory only: after a restart it is empty, and
// Create resumes from what the backend shows, which is why every step must
// be idempotent (it ensures, it never assumes). Delete cancels a name's
// step and waits for it to stop before it removes anything, so a step never
// re-creates what Delete removed.
//
// A provider uses it with a per-name lock (internal/provider/keyedlock)
// around Create and Delete; docs/provider-contract.md §5 shows the flow.
package inflight

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Step is one slow piece of work for one instance. It runs on its own ctx,
// not the caller's (which ends when the call returns): that ctx carries the
// caller's values (its logger) and ends only when the step is cancelled
// (Cancel, Close). A step must return soon after its ctx ends (within
// StopBound), report what it is doing through progress, and classify its
// errors at the source (provider.Errorf); an unclassified error is
// Transient. A step must be idempotent: it may run again after a restart
// over whatever a previous run left.
type Step func(ctx context.Context, progress func(detail string)) error

// StopBound is how long Cancel waits, at most, for a cancelled step to
// return, so that Delete stays within provider.CallBound.
const StopBound = provider.CallBound / 2

// MaxProgress bounds a progress detail, in bytes: it lands in a status
// condition's message.
const MaxProgress = 256

// Status is what the table holds for one name.
type Status struct {
	// Running is set while a step for the name runs (a cancelled step that
	// has not stopped yet included).
	Running bool
	// Progress is the running step's latest detail.
	Progress string
	// Since is when the running step started.
	Since time.Time
	// Done, for a running step, is closed once it has ended and its result
	// is what Poll reports (for a provider's Close, and for tests that wait
	// for a step instead of polling).
	Done <-chan struct{}
	// Err is the failure of a step that ended, a *provider.Error with its
	// class. It is handed over once: the Status that carries it is the last
	// to see it.
	Err error
}

// ErrClosed is what Start returns after Close: the provider is shutting
// down.
var ErrClosed = errors.New("in-flight table is closed")

// Table is the set of steps in flight, by name. Its methods are safe for
// concurrent use. Make it with New.
type Table struct {
	op     string
	base   context.Context
	stop   context.CancelFunc
	mu     sync.Mutex
	closed bool
	steps  map[string]*entry
}

// entry is one name's step: running until done is closed, then (only when
// it failed and nobody cancelled it) its result, waiting to be handed over.
type entry struct {
	cancel    context.CancelFunc
	done      chan struct{}
	since     time.Time
	progress  string
	cancelled bool
	err       error
}

// New returns an empty table whose steps' errors carry op (normally
// provider.OpCreate): the call that receives one may be a Get, but the
// error is the create's.
func New(op string) *Table {
	base, stop := context.WithCancel(context.Background())
	return &Table{op: op, base: base, stop: stop, steps: map[string]*entry{}}
}

// Start runs step for name in the background, unless a step for name runs
// already: then the call joins it (step is not run) and gets its Status. A
// failed step's result waiting for name is handed over instead (Status.Err)
// and nothing starts; the next Start starts afresh. initial is the progress
// until the step reports its own. ctx gives the step its values, never its
// lifetime. After Close, Start returns ErrClosed, Transient.
func (t *Table) Start(ctx context.Context, name, initial string, step Step) (Status, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return Status{}, provider.Errorf(provider.ErrTransient, "%s of %q: %w", t.op, name, ErrClosed)
	}
	if e, ok := t.steps[name]; ok {
		return t.statusLocked(name, e), nil
	}
	stepCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopWithTable := context.AfterFunc(t.base, cancel)
	e := &entry{cancel: cancel, done: make(chan struct{}), since: time.Now(), progress: clip(initial)}
	t.steps[name] = e
	go t.run(stepCtx, name, e, step, func() { stopWithTable(); cancel() })
	return t.statusLocked(name, e), nil
}

// run is one step's goroutine: it turns a panic into a Transient result,
// classifies the error, and keeps it for the next Poll only when it failed
// and nobody cancelled it.
func (t *Table) run(ctx context.Context, name string, e *entry, step Step, release func()) {
	var err error
	defer func() {
		release()
		t.mu.Lock()
		defer t.mu.Unlock()
		if err != nil {
			err = provider.Wrap("", t.op, nil, err)
		}
		e.err = err
		close(e.done)
		if err == nil || e.cancelled || t.closed {
			// A success leaves nothing to say (the backend shows it); a
			// cancelled step's result is nobody's.
			if t.steps[name] == e {
				delete(t.steps, name)
			}
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			err = provider.Errorf(provider.ErrTransient, "%s step of %q panicked: %v", t.op, name, r)
		}
	}()
	err = step(ctx, func(detail string) {
		t.mu.Lock()
		defer t.mu.Unlock()
		select {
		case <-e.done:
		default:
			e.progress = clip(detail)
		}
	})
}

// Poll is what Create and Get read: the running step's progress, or the
// failure of the step that ended, handed over once (the entry is forgotten
// then), or the zero Status when nothing runs and nothing waits.
func (t *Table) Poll(name string) Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.steps[name]
	if !ok {
		return Status{}
	}
	return t.statusLocked(name, e)
}

// Running says whether name's step is still running, and hands nothing
// over: for a listing or a collector's check, which must not swallow a
// failure that Create or Get is to report.
func (t *Table) Running(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.steps[name]
	if !ok {
		return false
	}
	select {
	case <-e.done:
		return false
	default:
		return true
	}
}

// statusLocked reports e and hands its result over.
func (t *Table) statusLocked(name string, e *entry) Status {
	select {
	case <-e.done:
		delete(t.steps, name)
		return Status{Err: e.err}
	default:
		return Status{Running: true, Progress: e.progress, Since: e.since, Done: e.done}
	}
}

// Cancel ends name's step, as Delete must before it removes anything: it
// cancels the step's ctx and waits until the step returned, or until ctx
// ends or StopBound passed, whichever comes first; a waiting result is
// forgotten. A step that has not stopped by then is a Transient error (the
// caller's Delete is retried) and is still cancelled; its result will be
// dropped.
func (t *Table) Cancel(ctx context.Context, name string) error {
	t.mu.Lock()
	e, ok := t.steps[name]
	if !ok {
		t.mu.Unlock()
		return nil
	}
	e.cancelled = true
	e.cancel()
	t.mu.Unlock()

	wait, stop := context.WithTimeout(ctx, StopBound)
	defer stop()
	select {
	case <-e.done:
	case <-wait.Done():
		select {
		case <-e.done: // ended at the same moment
		default:
			return provider.Errorf(provider.ErrTransient, "the %s step of %q is still stopping", t.op, name)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.steps[name] == e {
		delete(t.steps, name)
	}
	return nil
}

// Close cancels every step, refuses new ones, and waits until all returned
// or ctx ended (then it returns a Transient error naming how many had not).
// It is what a provider's Close calls.
func (t *Table) Close(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	var running []*entry
	for _, e := range t.steps {
		e.cancelled = true
		running = append(running, e)
	}
	t.mu.Unlock()
	t.stop()
	for i, e := range running {
		select {
		case <-e.done:
		case <-ctx.Done():
			return provider.Errorf(provider.ErrTransient, "%d %s steps still running at close: %w", len(running)-i, t.op, ctx.Err())
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.steps)
	return nil
}

// Len is how many names the table holds (running steps and failures
// waiting to be handed over): its memory.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.steps)
}

// clip keeps a detail within MaxProgress bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= MaxProgress {
		return s
	}
	cut := MaxProgress - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// String is for logs and test failures.
func (s Status) String() string {
	switch {
	case s.Err != nil:
		return fmt.Sprintf("failed: %v", s.Err)
	case s.Running:
		return fmt.Sprintf("running since %s: %s", s.Since.Format(time.RFC3339), s.Progress)
	default:
		return "idle"
	}
}
