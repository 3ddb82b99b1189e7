package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// logVerbosity captures every tier providers use, wire logs (V(5))
// included, because a secret leaks at whatever tier it is logged.
const logVerbosity = 10

// logBuffer collects a provider's log lines; providers may log from their
// own goroutines, hence the mutex.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) write(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prefix != "" {
		l.b.WriteString(prefix)
		l.b.WriteByte(' ')
	}
	l.b.WriteString(args)
	l.b.WriteByte('\n')
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// env is one case's world: a fresh provider and backend from the harness,
// and the capturing logger every call carries.
type env struct {
	t *testing.T
	h Harness
	// bound is the provider behind the method boundary, and p its
	// lifecycle part (see bind).
	bound        provider.Bounded
	p            provider.Provider
	b            Backend
	installation string
	logs         *logBuffer
	logger       logr.Logger
	// ctx lives as long as the case and carries the logger.
	ctx context.Context
}

func newEnv(t *testing.T, h Harness) *env {
	t.Helper()
	installation := "conformance-" + randHex(t)
	p, b := h.New(t, installation)
	if p == nil || b == nil {
		t.Fatalf("Harness.New returned provider %v and backend %v; both are needed", p, b)
	}
	logs := &logBuffer{}
	logger := funcr.New(logs.write, funcr.Options{Verbosity: logVerbosity})
	e := &env{
		t: t, h: h, b: b, installation: installation,
		logs: logs, logger: logger,
		ctx: logr.NewContext(t.Context(), logger),
	}
	e.bind(p)
	t.Cleanup(func() {
		switch text := logs.String(); {
		case !t.Failed():
		case text == "":
			t.Log("the provider logged nothing in this case")
		default:
			t.Logf("provider log of this case:\n%s", text)
		}
	})
	return e
}

// bind makes p the case's provider, behind the method boundary as the
// registry puts it, so that the cases test the path the controllers call.
func (e *env) bind(p provider.Provider) {
	e.bound = provider.WithBoundary(e.h.Name, e.h.typeName(), p)
	e.p = e.bound.Provider
}

func randHex(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("crypto/rand: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// request returns the harness's request for a new Proxy with a fresh UID,
// so that cases never collide on a shared backend.
func (e *env) request(proxyName string) provider.CreateRequest {
	e.t.Helper()
	uid := "uid-" + randHex(e.t)
	req := e.h.Request(e.t, proxyName, uid)
	if req.ProxyName == "" {
		req.ProxyName = proxyName
	}
	if req.UID == "" {
		req.UID = uid
	}
	if req.Namespace == "" {
		req.Namespace = "conformance"
	}
	if req.Name == "" {
		req.Name = provider.InstanceName(req.Namespace, req.ProxyName, req.UID, "")
	}
	return req
}

// errPanicked stands in for the result of a call that panicked; guard has
// already failed the case.
var errPanicked = errors.New("providertest: the call panicked")

// guard runs one provider call and turns a panic into a failure of the
// case: a provider must never panic on what it is given. It uses Errorf, not
// Fatalf, so it is safe in the goroutines of the liveness checks.
func guard(t *testing.T, what string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// callCtx gives a call the capturing logger whatever ctx it is made with,
// and bounds it by the harness's CallTimeout.
func (e *env) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(logr.NewContext(ctx, e.logger), e.h.callTimeout())
}

func (e *env) create(ctx context.Context, req provider.CreateRequest) (inst provider.Instance, err error) {
	ctx, cancel := e.callCtx(ctx)
	defer cancel()
	err = errPanicked
	guard(e.t, "Create", func() { inst, err = e.p.Create(ctx, req) })
	return inst, err
}

func (e *env) get(ctx context.Context, id string) (inst provider.Instance, err error) {
	ctx, cancel := e.callCtx(ctx)
	defer cancel()
	err = errPanicked
	guard(e.t, fmt.Sprintf("Get(%q)", id), func() { inst, err = e.p.Get(ctx, id) })
	return inst, err
}

func (e *env) delete(ctx context.Context, id string) (err error) {
	ctx, cancel := e.callCtx(ctx)
	defer cancel()
	err = errPanicked
	guard(e.t, fmt.Sprintf("Delete(%q)", id), func() { err = e.p.Delete(ctx, id) })
	return err
}

func (e *env) list(ctx context.Context) (list []provider.Instance, err error) {
	ctx, cancel := e.callCtx(ctx)
	defer cancel()
	err = errPanicked
	guard(e.t, "ListByTag", func() { list, err = e.p.ListByTag(ctx) })
	return list, err
}

// check runs Check when the provider is a Checker; ok is false when it is
// not.
func (e *env) check(ctx context.Context) (res provider.CheckResult, ok bool) {
	c := e.bound.Checker
	if c == nil {
		return res, false
	}
	ctx, cancel := e.callCtx(ctx)
	defer cancel()
	res = provider.CheckResult{Healthy: false, Reason: "Panicked"}
	guard(e.t, "Check", func() { res = c.Check(ctx) })
	return res, true
}

// call makes the call named op (one of the four lifecycle ops) and returns
// its error, so that per-op cases are one table.
func (e *env) call(ctx context.Context, op, id string, req provider.CreateRequest) error {
	var err error
	switch op {
	case provider.OpCreate:
		_, err = e.create(ctx, req)
	case provider.OpGet:
		_, err = e.get(ctx, id)
	case provider.OpDelete:
		err = e.delete(ctx, id)
	case provider.OpList:
		_, err = e.list(ctx)
	default:
		e.t.Fatalf("providertest: no call for op %q", op)
	}
	return err
}

func (e *env) mustCreate(req provider.CreateRequest) provider.Instance {
	e.t.Helper()
	inst, err := e.create(e.ctx, req)
	if err != nil {
		e.t.Fatalf("Create(%q): %v", req.Name, err)
	}
	if inst.ID == "" {
		e.t.Fatalf("Create(%q) returned an empty ID", req.Name)
	}
	return inst
}

func (e *env) mustList() []provider.Instance {
	e.t.Helper()
	list, err := e.list(e.ctx)
	if err != nil {
		e.t.Fatalf("ListByTag: %v", err)
	}
	return list
}

func (e *env) mustDelete(id string) {
	e.t.Helper()
	if err := e.delete(e.ctx, id); err != nil {
		e.t.Fatalf("Delete(%q): %v", id, err)
	}
}

func find(list []provider.Instance, id string) (provider.Instance, bool) {
	for _, in := range list {
		if in.ID == id {
			return in, true
		}
	}
	return provider.Instance{}, false
}

func ids(list []provider.Instance) []string {
	out := make([]string, len(list))
	for i, in := range list {
		out[i] = in.ID
	}
	return out
}

var allClasses = []error{provider.ErrNotFound, provider.ErrTransient, provider.ErrPermanent, provider.ErrQuotaExceeded}

func className(class error) string { return provider.ClassName(class) }

// expectClass fails the case unless err is non-nil and carries exactly one
// class, one of want: the reconciler decides on the class alone, so an
// error matching two classes is as wrong as one matching the wrong class.
func expectClass(t *testing.T, what string, err error, want ...error) bool {
	t.Helper()
	var names []string
	for _, w := range want {
		names = append(names, className(w))
	}
	if err == nil {
		t.Errorf("%s: got no error, want class %s", what, strings.Join(names, " or "))
		return false
	}
	if errors.Is(err, errPanicked) {
		return false // guard has reported it
	}
	var matched []error
	var matchedNames []string
	for _, c := range allClasses {
		if errors.Is(err, c) {
			matched = append(matched, c)
			matchedNames = append(matchedNames, className(c))
		}
	}
	if len(matched) != 1 {
		t.Errorf("%s: error %q matches classes %v, want exactly one of %s", what, err, matchedNames, strings.Join(names, " or "))
		return false
	}
	for _, w := range want {
		if matched[0] == w {
			return true
		}
	}
	t.Errorf("%s: error %q has class %s, want %s", what, err, matchedNames[0], strings.Join(names, " or "))
	return false
}

// eventually polls cond until it reports done, and fails the case with
// cond's last reason once the harness's PollTimeout has passed: backends
// that answer early (a Delete that returns before the instance is gone)
// get time, but never forever.
func (e *env) eventually(what string, cond func() (done bool, why string)) bool {
	e.t.Helper()
	deadline := time.Now().Add(e.h.pollTimeout())
	wait := 10 * time.Millisecond
	for {
		done, why := cond()
		if done {
			return true
		}
		if time.Now().After(deadline) {
			e.t.Errorf("%s: not reached within %v: %s", what, e.h.pollTimeout(), why)
			return false
		}
		select {
		case <-time.After(wait):
		case <-e.ctx.Done():
			e.t.Errorf("%s: case ended while waiting: %s", what, why)
			return false
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// waitRunning waits until the instance runs, through the harness's
// WaitRunning when it has one, else by polling Get, where only Transient
// errors are worth another try.
func (e *env) waitRunning(id string) (provider.Instance, bool) {
	e.t.Helper()
	if e.h.WaitRunning != nil {
		ctx, cancel := context.WithTimeout(logr.NewContext(e.ctx, e.logger), e.h.pollTimeout())
		defer cancel()
		var inst provider.Instance
		guard(e.t, "Harness.WaitRunning", func() { inst = e.h.WaitRunning(ctx, e.t, e.p, id) })
		return inst, inst.State == provider.StateRunning
	}
	var inst provider.Instance
	ok := e.eventually(fmt.Sprintf("Get(%q) reaching Running", id), func() (bool, string) {
		got, err := e.get(e.ctx, id)
		switch {
		case err != nil && !errors.Is(err, provider.ErrTransient):
			e.t.Fatalf("Get(%q) while waiting for Running: %v", id, err)
		case err != nil:
			return false, err.Error()
		case got.State == provider.StateTerminated:
			e.t.Fatalf("Get(%q) while waiting for Running: instance is Terminated", id)
		}
		inst = got
		return got.State == provider.StateRunning, fmt.Sprintf("state %q", got.State)
	})
	return inst, ok
}

// waitGone polls Get until NotFound, for providers whose Delete returns
// before the backend finished.
func (e *env) waitGone(id string) bool {
	e.t.Helper()
	return e.eventually(fmt.Sprintf("Get(%q) after Delete reaching NotFound", id), func() (bool, string) {
		got, err := e.get(e.ctx, id)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			return true, ""
		case err == nil:
			return false, fmt.Sprintf("still there in state %q", got.State)
		case errors.Is(err, provider.ErrTransient):
			return false, err.Error()
		default:
			e.t.Fatalf("Get(%q) after Delete: %v, want NotFound (or Transient while the backend catches up)", id, err)
			return false, ""
		}
	})
}

// within runs f and waits at most limit for it: the liveness half of the
// ctx rule. A call that never returns is left running (the case's cleanup
// releases what blocks it) and reported as not finished.
func within[T any](limit time.Duration, f func() T) (T, bool) {
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v, true
	case <-time.After(limit):
		var zero T
		return zero, false
	}
}

// expectUntouched proves that an instance the provider refused is still
// there with the marks it was planted with: through the backend when it is
// an Inspector, and always through a second Create, which a deleted or
// re-marked instance would no longer refuse.
func (e *env) expectUntouched(req provider.CreateRequest, planted *provider.Marks) {
	e.t.Helper()
	if in, ok := e.b.(Inspector); ok {
		marks, exists := in.Inspect(e.t, req.Name)
		switch {
		case !exists:
			e.t.Errorf("instance %q, which the provider must leave alone, is gone", req.Name)
		case normMarks(marks) != normMarks(planted):
			e.t.Errorf("instance %q, which the provider must leave alone, has marks %+v, planted with %+v", req.Name, normMarks(marks), normMarks(planted))
		}
	}
	_, err := e.create(e.ctx, req)
	expectClass(e.t, fmt.Sprintf("Create(%q) again over the instance it refused (a success means it was deleted or re-marked)", req.Name), err, provider.ErrPermanent)
}

// normMarks treats "no marks" and zero marks alike: label-based backends
// cannot tell them apart, and neither is ours.
func normMarks(m *provider.Marks) provider.Marks {
	if m == nil {
		return provider.Marks{}
	}
	return *m
}
