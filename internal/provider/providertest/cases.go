package providertest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
)

// livenessLimit bounds how long a call with an ended ctx may take to return.
// It is generous on purpose: the rule is that the call ends, not how fast.
const livenessLimit = 10 * time.Second

// shortDeadline is the ctx deadline given to a call the backend holds.
const shortDeadline = 200 * time.Millisecond

// Rule: Create is idempotent by name, so a crash between Create and the
// status write adopts instead of duplicating.
func testCreateIsIdempotentByName(t *testing.T, h Harness) {
	e := newEnv(t, h)
	req := e.request("idem")
	first := e.mustCreate(req)
	second := e.mustCreate(req)
	if second.ID != first.ID {
		t.Errorf("second Create of %q returned ID %q, the first returned %q", req.Name, second.ID, first.ID)
	}
	list := e.mustList()
	if _, ok := find(list, first.ID); !ok || len(list) != 1 {
		t.Errorf("ListByTag after two Creates of %q lists %v, want exactly [%s]", req.Name, ids(list), first.ID)
	}
}

// Rule: Create adopts an instance with the request's name that carries the
// managed mark, this installation's identity and the request's UID, or an
// empty UID (an instance made before its UID was written).
func testAdoptsOwnInstance(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name    string
		markUID func(req provider.CreateRequest) string
	}{
		{"same UID", func(req provider.CreateRequest) string { return req.UID }},
		{"empty UID", func(provider.CreateRequest) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, h)
			req := e.request("adopt")
			e.b.Plant(t, req.Name, &provider.Marks{Managed: true, UID: tc.markUID(req), Installation: e.installation})
			inst, err := e.create(e.ctx, req)
			if err != nil {
				t.Fatalf("Create over our own instance %q (%s mark) did not adopt it: %v", req.Name, tc.name, err)
			}
			if list := e.mustList(); len(list) != 1 || list[0].ID != inst.ID {
				t.Errorf("ListByTag after adopting %q lists %v, want exactly [%s]", req.Name, ids(list), inst.ID)
			}
			if _, err := e.get(e.ctx, inst.ID); err != nil {
				t.Errorf("Get(%q) of the adopted instance: %v", inst.ID, err)
			}
		})
	}
}

// Rule: Create that adopts an instance whose UID mark is empty writes the
// request's UID into the mark, in the backend: the name derives from the
// Proxy's UID and shape, so the name is the evidence of ownership, and a
// mark left empty would keep the instance looking like an orphan to the
// garbage collector (and adoptable by anyone). ListByTag and Get, which read
// the backend, must report the request's UID afterwards, and so must the
// backend itself when it is an Inspector.
func testAdoptionFillsEmptyUIDMark(t *testing.T, h Harness) {
	e := newEnv(t, h)
	req := e.request("fill-uid")
	e.b.Plant(t, req.Name, &provider.Marks{Managed: true, Installation: e.installation})
	inst, err := e.create(e.ctx, req)
	if err != nil {
		t.Fatalf("Create over our own instance %q with an empty UID mark did not adopt it: %v", req.Name, err)
	}
	if inst.UID != req.UID {
		t.Errorf("Create adopting %q returned UID %q, want the request's %q", req.Name, inst.UID, req.UID)
	}
	list := e.mustList()
	if len(list) != 1 || list[0].ID != inst.ID || list[0].UID != req.UID {
		t.Errorf("ListByTag after adopting %q lists %+v, want exactly [%s] with UID %q", req.Name, list, inst.ID, req.UID)
	}
	if got, err := e.get(e.ctx, inst.ID); err != nil {
		t.Errorf("Get(%q) of the adopted instance: %v", inst.ID, err)
	} else if got.UID != req.UID {
		t.Errorf("Get(%q) of the adopted instance gives UID %q, want the request's %q", inst.ID, got.UID, req.UID)
	}
	if in, ok := e.b.(Inspector); ok {
		marks, exists := in.Inspect(t, req.Name)
		if want := (provider.Marks{Managed: true, UID: req.UID, Installation: e.installation}); !exists || normMarks(marks) != want {
			t.Errorf("the backend holds instance %q (exists %t) with marks %+v, want %+v", req.Name, exists, normMarks(marks), want)
		}
	}
}

// Rule: a Stopped instance that Create adopts is started again. Needs a
// backend that is a Stopper; skipped otherwise.
func testAdoptingStoppedStartsIt(t *testing.T, h Harness) {
	e := newEnv(t, h)
	stopper, ok := e.b.(Stopper)
	if !ok {
		t.Skip("backend is not a providertest.Stopper")
	}
	req := e.request("stopped")
	created := e.mustCreate(req)
	if _, ok := e.waitRunning(created.ID); !ok {
		t.Fatalf("instance %q never ran before being stopped", created.ID)
	}
	stopper.Stop(t, created.ID)
	if !e.eventually(fmt.Sprintf("Get(%q) reporting Stopped after the backend stopped it", created.ID), func() (bool, string) {
		got, err := e.get(e.ctx, created.ID)
		if err != nil {
			return false, err.Error()
		}
		return got.State == provider.StateStopped, fmt.Sprintf("state %q", got.State)
	}) {
		return
	}
	again := e.mustCreate(req)
	if again.ID != created.ID {
		t.Errorf("Create over the stopped instance returned ID %q, want the adopted %q", again.ID, created.ID)
	}
	if inst, ok := e.waitRunning(created.ID); !ok {
		t.Errorf("adopted stopped instance %q did not run again (last state %q)", created.ID, inst.State)
	}
}

// Rule: Create refuses, as Permanent, an instance of ours that belongs to
// another Proxy, and leaves it alone (three of the earlier providers adopted it).
func testRefusesOtherUID(t *testing.T, h Harness) {
	e := newEnv(t, h)
	req := e.request("other-uid")
	theirs := provider.Marks{Managed: true, UID: "uid-other-" + randHex(t), Installation: e.installation}
	e.b.Plant(t, req.Name, &theirs)
	_, err := e.create(e.ctx, req)
	expectClass(t, fmt.Sprintf("Create(%q) over an instance owned by another Proxy's UID", req.Name), err, provider.ErrPermanent)
	// Same installation, so it is ours to list, under its owner's UID.
	list := e.mustList()
	if len(list) != 1 || list[0].UID != theirs.UID {
		t.Errorf("ListByTag lists %+v, want exactly the planted instance with UID %q", list, theirs.UID)
	}
	e.expectUntouched(req, &theirs)
}

// Rule: Create refuses, as Permanent, an instance without the managed mark
// (somebody else's), leaves it alone, and ListByTag never lists it.
func testRefusesUnmarked(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name  string
		marks func(e *env, req provider.CreateRequest) *provider.Marks
	}{
		{"no marks", func(*env, provider.CreateRequest) *provider.Marks { return nil }},
		{"no managed mark", func(e *env, req provider.CreateRequest) *provider.Marks {
			return &provider.Marks{UID: req.UID, Installation: e.installation}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, h)
			req := e.request("unmarked")
			marks := tc.marks(e, req)
			e.b.Plant(t, req.Name, marks)
			_, err := e.create(e.ctx, req)
			expectClass(t, fmt.Sprintf("Create(%q) over an unmarked instance", req.Name), err, provider.ErrPermanent)
			if list := e.mustList(); len(list) != 0 {
				t.Errorf("ListByTag lists %+v; an unmarked instance is never listed", list)
			}
			e.expectUntouched(req, marks)
		})
	}
}

// Rule: another installation's instances are invisible: not listed, never
// adopted (even with the same UID, as after a cluster restore), and our own
// Deletes never reach them (the earlier providers' GC did not know installations).
func testIgnoresOtherInstallation(t *testing.T, h Harness) {
	e := newEnv(t, h)
	req := e.request("foreign")
	foreign := provider.Marks{Managed: true, UID: req.UID, Installation: "other-" + randHex(t)}
	e.b.Plant(t, req.Name, &foreign)
	if list := e.mustList(); len(list) != 0 {
		t.Errorf("ListByTag lists %+v; another installation's instance must be invisible", list)
	}
	_, err := e.create(e.ctx, req)
	expectClass(t, fmt.Sprintf("Create(%q) over another installation's instance", req.Name), err, provider.ErrPermanent)

	mine := e.mustCreate(e.request("mine"))
	e.mustDelete(mine.ID)
	e.waitGone(mine.ID)
	e.expectUntouched(req, &foreign)
}

// Rule: an instance that no longer carries our mark is not ours: Get is
// NotFound, ListByTag skips it, and Delete succeeds (ours is gone) without
// touching it. The name was reused after ours vanished.
func testLostMarkIsNotOurs(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name  string
		marks func(req provider.CreateRequest) *provider.Marks
	}{
		{"unmarked", func(provider.CreateRequest) *provider.Marks { return nil }},
		{"other installation", func(req provider.CreateRequest) *provider.Marks {
			return &provider.Marks{Managed: true, UID: req.UID, Installation: "other-" + randHex(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, h)
			req := e.request("lost-mark")
			inst := e.mustCreate(req)
			e.b.Vanish(t, inst.ID)
			marks := tc.marks(req)
			e.b.Plant(t, req.Name, marks)
			_, err := e.get(e.ctx, inst.ID)
			expectClass(t, fmt.Sprintf("Get(%q) after its name was reused (%s)", inst.ID, tc.name), err, provider.ErrNotFound)
			if list := e.mustList(); len(list) != 0 {
				t.Errorf("ListByTag lists %+v, want nothing", list)
			}
			if err := e.delete(e.ctx, inst.ID); err != nil {
				t.Errorf("Delete(%q) after its name was reused (%s): %v, want success: ours is gone", inst.ID, tc.name, err)
			}
			e.expectUntouched(req, marks)
		})
	}
}

// Rule: Get of an instance that is gone is NotFound. The ID is well-formed
// (it came from Create), so the provider must ask the backend, not reject
// the ID.
func testGetMissingIsNotFound(t *testing.T, h Harness) {
	e := newEnv(t, h)
	inst := e.mustCreate(e.request("missing"))
	e.b.Vanish(t, inst.ID)
	_, err := e.get(e.ctx, inst.ID)
	expectClass(t, fmt.Sprintf("Get(%q) after the instance vanished", inst.ID), err, provider.ErrNotFound)
}

// Rule: Delete of something already gone succeeds, so a finalizer never
// sticks on an instance a human removed.
func testDeleteMissingSucceeds(t *testing.T, h Harness) {
	t.Run("vanished", func(t *testing.T) {
		e := newEnv(t, h)
		inst := e.mustCreate(e.request("del-missing"))
		e.b.Vanish(t, inst.ID)
		for i := 1; i <= 2; i++ {
			if err := e.delete(e.ctx, inst.ID); err != nil {
				t.Errorf("Delete #%d of vanished %q: %v, want success", i, inst.ID, err)
			}
		}
	})
	t.Run("deleted twice", func(t *testing.T) {
		e := newEnv(t, h)
		inst := e.mustCreate(e.request("del-twice"))
		e.mustDelete(inst.ID)
		e.waitGone(inst.ID)
		if err := e.delete(e.ctx, inst.ID); err != nil {
			t.Errorf("second Delete of %q: %v, want success", inst.ID, err)
		}
	})
}

// Rule: once Delete is done (Get NotFound, polled for providers whose
// Delete returns early) nothing is left: ListByTag no longer lists it, and
// only the target went.
func testDeleteLeavesNothing(t *testing.T, h Harness) {
	e := newEnv(t, h)
	gone := e.mustCreate(e.request("del-gone"))
	kept := e.mustCreate(e.request("del-kept"))
	e.mustDelete(gone.ID)
	if !e.waitGone(gone.ID) {
		return
	}
	e.eventually(fmt.Sprintf("ListByTag dropping deleted %q", gone.ID), func() (bool, string) {
		list := e.mustList()
		_, listed := find(list, gone.ID)
		return !listed, fmt.Sprintf("lists %v", ids(list))
	})
	if _, ok := find(e.mustList(), kept.ID); !ok {
		t.Errorf("ListByTag lost %q when only %q was deleted", kept.ID, gone.ID)
	}
	if _, err := e.get(e.ctx, kept.ID); err != nil {
		t.Errorf("Get(%q) after deleting another instance: %v", kept.ID, err)
	}
}

// Rule: ListByTag returns exactly this installation's marked instances,
// each with ID, UID and CreatedAt, so the garbage collector can judge age
// without further calls.
func testListByTagReturnsMarkedOnly(t *testing.T, h Harness) {
	start := time.Now()
	e := newEnv(t, h)
	reqs := []provider.CreateRequest{e.request("list-a"), e.request("list-b")}
	var want []provider.Instance
	for _, req := range reqs {
		want = append(want, e.mustCreate(req))
	}
	unmarked := e.request("list-unmarked")
	e.b.Plant(t, unmarked.Name, nil)
	unmanaged := e.request("list-unmanaged")
	e.b.Plant(t, unmanaged.Name, &provider.Marks{UID: unmanaged.UID, Installation: e.installation})
	foreign := e.request("list-foreign")
	e.b.Plant(t, foreign.Name, &provider.Marks{Managed: true, UID: foreign.UID, Installation: "other-" + randHex(t)})

	list := e.mustList()
	end := time.Now()
	if len(list) != len(want) {
		t.Errorf("ListByTag lists %d instances %+v, want exactly our %d %v", len(list), list, len(want), ids(want))
	}
	skew := h.clockSkew()
	for i, w := range want {
		got, ok := find(list, w.ID)
		if !ok {
			t.Errorf("ListByTag misses %q", w.ID)
			continue
		}
		if got.UID != reqs[i].UID {
			t.Errorf("ListByTag gives %q UID %q, want %q", w.ID, got.UID, reqs[i].UID)
		}
		switch {
		case got.CreatedAt.IsZero():
			t.Errorf("ListByTag gives %q no CreatedAt; a zero age is never collected", w.ID)
		case got.CreatedAt.Before(start.Add(-skew)) || got.CreatedAt.After(end.Add(skew)):
			t.Errorf("ListByTag gives %q CreatedAt %v, want between %v and %v (±%v)", w.ID, got.CreatedAt, start, end, skew)
		}
	}
}

// garbageIDs are IDs no provider could have returned; built around a real
// one so that a parser that trusts a prefix is caught too.
func garbageIDs(real string) []string {
	return []string{
		"", "garbage", "/", "//", "../../../etc/passwd", strings.Repeat("x/", 300),
		"\x00", "id\nwith-newline", "%00", "garbage:" + real, real + "\x00", real + "/../..",
	}
}

// Rule: IDs round-trip (Get and Delete take what Create and ListByTag
// return), and a malformed ID is a Permanent or NotFound error, never a
// panic and never Transient (which would be retried forever).
func testIDsRoundTrip(t *testing.T, h Harness) {
	e := newEnv(t, h)
	req := e.request("ids")
	created := e.mustCreate(req)
	list := e.mustList()
	if len(list) != 1 || list[0].ID != created.ID {
		t.Errorf("ListByTag lists %v, want the ID Create returned, %q", ids(list), created.ID)
	}
	if got, err := e.get(e.ctx, created.ID); err != nil {
		t.Errorf("Get(%q): %v", created.ID, err)
	} else if got.ID != created.ID {
		t.Errorf("Get(%q) returned ID %q", created.ID, got.ID)
	}
	if len(list) == 1 {
		e.mustDelete(list[0].ID)
		e.waitGone(created.ID)
	}
	for _, id := range garbageIDs(created.ID) {
		_, err := e.get(e.ctx, id)
		expectClass(t, fmt.Sprintf("Get(%q)", id), err, provider.ErrPermanent, provider.ErrNotFound)
		// Delete may also call a malformed ID gone; it must not ask for a
		// retry.
		if err := e.delete(e.ctx, id); err != nil {
			expectClass(t, fmt.Sprintf("Delete(%q)", id), err, provider.ErrPermanent, provider.ErrNotFound)
		}
	}
}

// Rule: a created instance reaches Running with an IP, and Get reads its ID
// and UID back.
func testGetReachesRunning(t *testing.T, h Harness) {
	e := newEnv(t, h)
	req := e.request("running")
	created := e.mustCreate(req)
	inst, ok := e.waitRunning(created.ID)
	if !ok {
		t.Fatalf("instance %q never reached Running (last state %q)", created.ID, inst.State)
	}
	if net.ParseIP(inst.IP) == nil {
		t.Errorf("Running instance %q has IP %q, want an IP address", created.ID, inst.IP)
	}
	if inst.ID != created.ID || inst.UID != req.UID {
		t.Errorf("Get gives ID %q UID %q, want %q and %q", inst.ID, inst.UID, created.ID, req.UID)
	}
}

// opClasses are the classes a backend failure of each op can take; only
// get has NotFound, since Delete of something gone succeeds and Create and
// ListByTag have no single target.
var opClasses = []struct {
	op      string
	classes []error
}{
	{provider.OpCreate, []error{provider.ErrTransient, provider.ErrPermanent, provider.ErrQuotaExceeded}},
	{provider.OpGet, []error{provider.ErrTransient, provider.ErrPermanent, provider.ErrQuotaExceeded, provider.ErrNotFound}},
	{provider.OpDelete, []error{provider.ErrTransient, provider.ErrPermanent, provider.ErrQuotaExceeded}},
	{provider.OpList, []error{provider.ErrTransient, provider.ErrPermanent, provider.ErrQuotaExceeded}},
}

// needsID says whether op takes an existing instance's ID.
func needsID(op string) bool { return op == provider.OpGet || op == provider.OpDelete }

// Rule: every error is one *provider.Error naming the configured provider
// (not its type: the earlier kubernetes provider hardcoded its name) and the op, with
// the class the backend's failure deserves.
func testErrorsCarryConfiguredName(t *testing.T, h Harness) {
	for _, oc := range opClasses {
		for _, class := range oc.classes {
			t.Run(oc.op+"/"+className(class), func(t *testing.T) {
				e := newEnv(t, h)
				req := e.request("errors")
				var id string
				if needsID(oc.op) {
					id = e.mustCreate(req).ID
				}
				e.b.FailNext(t, oc.op, class)
				err := e.call(e.ctx, oc.op, id, req)
				expectClass(t, fmt.Sprintf("%s after FailNext(%s, %s)", oc.op, oc.op, className(class)), err, class)
				var pe *provider.Error
				if !errors.As(err, &pe) {
					t.Fatalf("%s error %q is a %T, not a *provider.Error", oc.op, err, err)
				}
				if pe.Provider != h.Name || pe.Op != oc.op {
					t.Errorf("%s error names provider %q op %q, want %q and %q", oc.op, pe.Provider, pe.Op, h.Name, oc.op)
				}
			})
		}
	}
}

// Rule: every call honours ctx: with an ended ctx it returns (bounded by
// livenessLimit) a Transient error, whether the ctx ended before the call
// or while the backend held it; Check reports not Healthy instead.
func testCancelledContextEndsEveryCall(t *testing.T, h Harness) {
	ops := []string{provider.OpCreate, provider.OpGet, provider.OpDelete, provider.OpList}
	t.Run("already cancelled", func(t *testing.T) {
		e := newEnv(t, h)
		id := e.mustCreate(e.request("cancel")).ID
		req := e.request("cancel-new")
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		for _, op := range ops {
			err, ok := within(livenessLimit, func() error { return e.call(ctx, op, id, req) })
			if !ok {
				t.Errorf("%s with a cancelled ctx did not return within %v", op, livenessLimit)
				continue
			}
			expectClass(t, op+" with a cancelled ctx", err, provider.ErrTransient)
		}
		e.expectCheckEnds(ctx, "a cancelled ctx")
	})
	for _, op := range append(ops, provider.OpCheck) {
		t.Run("blocked "+op, func(t *testing.T) {
			e := newEnv(t, h)
			if op == provider.OpCheck && e.bound.Checker == nil {
				t.Skip("provider is not a provider.Checker")
			}
			req := e.request("blocked")
			var id string
			if needsID(op) {
				id = e.mustCreate(req).ID
			}
			release := e.b.Block(t, op)
			if release == nil {
				t.Skipf("backend cannot hold %s", op)
			}
			t.Cleanup(release)
			ctx, cancel := context.WithTimeout(e.ctx, shortDeadline)
			defer cancel()
			if op == provider.OpCheck {
				e.expectCheckEnds(ctx, "a deadline while the backend holds it")
				return
			}
			start := time.Now()
			err, ok := within(livenessLimit, func() error { return e.call(ctx, op, id, req) })
			if !ok {
				t.Fatalf("%s held by the backend did not return within %v of its %v deadline", op, livenessLimit, shortDeadline)
			}
			expectClass(t, fmt.Sprintf("%s held by the backend past its deadline", op), err, provider.ErrTransient)
			if elapsed := time.Since(start); elapsed < shortDeadline {
				// Legal (a provider may refuse a budget too short to start),
				// but then this case did not reach the backend.
				t.Logf("%s returned after %v, before its %v deadline", op, elapsed, shortDeadline)
			}
			release()
			// A call that was cut short must end only itself.
			if _, err := e.list(e.ctx); err != nil {
				t.Errorf("ListByTag after a cut-short %s: %v", op, err)
			}
		})
	}
}

// expectCheckEnds proves Check returns, not Healthy, when ctx has ended
// (why says how).
func (e *env) expectCheckEnds(ctx context.Context, why string) {
	e.t.Helper()
	if e.bound.Checker == nil {
		return
	}
	res, ok := within(livenessLimit, func() provider.CheckResult {
		r, _ := e.check(ctx)
		return r
	})
	switch {
	case !ok:
		e.t.Errorf("Check with %s did not return within %v", why, livenessLimit)
	case res.Healthy:
		e.t.Errorf("Check with %s reported Healthy (%+v)", why, res)
	}
}

// Rule: cloud-init never reaches an error or a log line, on any path,
// failing ones included (refusals and wrapped backend errors are where
// requests get dumped), at any log tier, whether the line goes to the ctx's
// logger or to a global one (ctrl.Log, klog, the standard log, slog's
// default: see captureGlobalLogs). The base64 form is checked too, since
// backends take user-data encoded.
func testCloudInitNeverLeaks(t *testing.T, h Harness) {
	sentinel := "SENTINEL-cloudinit-" + randHex(t)
	testSecretNeverLeaks(t, h, func(req provider.CreateRequest) provider.CreateRequest {
		ci := req.CloudInit.Reveal()
		if ci == "" {
			ci = "#cloud-config\n"
		}
		req.CloudInit = provider.Sensitive(ci + "# " + sentinel + "\n")
		return req
	}, func(req provider.CreateRequest) map[string]string {
		return map[string]string{
			"the sentinel":         sentinel,
			"the base64 user-data": base64.StdEncoding.EncodeToString([]byte(req.CloudInit.Reveal())),
		}
	})
}

// Rule: the clientAuth users (an htpasswd file: user names and bcrypt
// hashes) never reach an error or a log line, on the same paths as
// cloud-init, and UpdateUsers' when the provider rotates users in place.
// The request brings no cloud-init of its own, as a Proxy with clientAuth
// must not.
func testClientAuthNeverLeaks(t *testing.T, h Harness) {
	user := "SENTINELuser" + randHex(t)
	var file, rotated string
	testSecretNeverLeaks(t, h, func(req provider.CreateRequest) provider.CreateRequest {
		if file == "" {
			file = clientauthtest.Line(t, user, "SENTINELpw-"+randHex(t))
			rotated = clientauthtest.Line(t, user, "SENTINELpw2-"+randHex(t))
		}
		req.CloudInit = ""
		req.ClientAuth = provider.Sensitive(file)
		return req
	}, func(provider.CreateRequest) map[string]string {
		return map[string]string{
			"the user":         user,
			"SENTINELpw":       "SENTINELpw",
			"the hash":         strings.TrimSpace(strings.SplitN(file, ":", 2)[1]),
			"the rotated hash": strings.TrimSpace(strings.SplitN(rotated, ":", 2)[1]),
			"the base64 file":  base64.StdEncoding.EncodeToString([]byte(file)),
		}
	}, func(e *env, inst provider.Instance, note func(string, error)) {
		if e.bound.Users == nil {
			return
		}
		note("UpdateUsers", e.bound.Users.UpdateUsers(e.ctx, inst.ID, provider.Sensitive(rotated)))
		note("UpdateUsers of a malformed file", e.bound.Users.UpdateUsers(e.ctx, inst.ID, provider.Sensitive(user+":"+user+"\n")))
		note("UpdateUsers of a gone instance", e.bound.Users.UpdateUsers(e.ctx, inst.ID+"x", provider.Sensitive(rotated)))
	})
}

// testSecretNeverLeaks is the body of the secret cases: withSecret puts
// the secret into a request, needles says what must never be seen, and
// more runs the case's own calls against the instance made.
func testSecretNeverLeaks(t *testing.T, h Harness, withSecret func(provider.CreateRequest) provider.CreateRequest,
	needles func(provider.CreateRequest) map[string]string, more ...func(e *env, inst provider.Instance, note func(string, error))) {
	e := newEnv(t, h)
	globals := captureGlobalLogs(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("global loggers during this case:\n%s", globals.String())
		}
	})
	request := func(proxyName string) provider.CreateRequest { return withSecret(e.request(proxyName)) }
	var texts []string // every error and result text the provider produced
	note := func(what string, err error) {
		if err != nil {
			texts = append(texts, fmt.Sprintf("%s error: %v | %+v", what, err, err))
		}
	}
	expectFailure := func(what string, err error) {
		if err == nil {
			t.Errorf("%s succeeded; the leak check of its error is vacuous", what)
		}
		note(what, err)
	}

	scan := func(req provider.CreateRequest) {
		logs := e.logs.String()
		if logs == "" {
			t.Log("the provider logged nothing; only its errors were checked")
		}
		for what, needle := range needles(req) {
			for _, text := range texts {
				if strings.Contains(text, needle) {
					t.Errorf("%s leaked into an error or result: %s", what, text)
				}
			}
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, needle) {
					t.Errorf("%s leaked into a log line: %s", what, line)
				}
			}
			for _, line := range strings.Split(globals.String(), "\n") {
				if strings.Contains(line, needle) {
					t.Errorf("%s leaked into a line of a global logger: %s", what, line)
				}
			}
		}
	}

	req := request("leak")
	// Scan even when a step below ends the case early.
	defer scan(req)
	inst := e.mustCreate(req)
	for _, class := range []error{provider.ErrTransient, provider.ErrPermanent, provider.ErrQuotaExceeded} {
		e.b.FailNext(t, provider.OpCreate, class)
		_, err := e.create(e.ctx, request("leak-fail"))
		expectFailure("Create after FailNext("+className(class)+")", err)
	}
	refused := request("leak-refused")
	e.b.Plant(t, refused.Name, &provider.Marks{Managed: true, UID: "uid-other-" + randHex(t), Installation: e.installation})
	_, err := e.create(e.ctx, refused)
	expectFailure("Create refused for UID mismatch", err)
	cancelled, cancel := context.WithCancel(e.ctx)
	cancel()
	_, err = e.create(cancelled, request("leak-cancelled"))
	expectFailure("Create with a cancelled ctx", err)

	for _, m := range more {
		m(e, inst, note)
	}
	for _, op := range []string{provider.OpGet, provider.OpList, provider.OpDelete} {
		e.b.FailNext(t, op, provider.ErrTransient)
		expectFailure(op+" after FailNext(Transient)", e.call(e.ctx, op, inst.ID, req))
		note(op, e.call(e.ctx, op, inst.ID, req))
	}
	if res, ok := e.check(e.ctx); ok {
		texts = append(texts, fmt.Sprintf("Check result: %+v", res))
	}
}
