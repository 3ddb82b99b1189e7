package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

const msgDeleted = "garbage collection: deleted instance"

func deleted(providerName string, r Reason) float64 {
	return testutil.ToFloat64(deletedTotal.WithLabelValues(providerName, string(r)))
}

// TestOrphanCollectedOnlyAfterGrace: an instance whose UID is on no Proxy
// is kept while it is not older than the grace period and deleted after,
// with one log line that says only what the contract allows; the live
// Proxy's instance next to it stays.
func TestOrphanCollectedOnlyAfterGrace(t *testing.T) {
	w := newWorld(t, "inst-orphan", nil)
	p := w.provider("orphan-p", nil)
	px := w.proxy("web", "orphan-p")
	live := w.instance(p, px, "s1")
	w.record(px, live, "")
	orphan := w.plant(p, "proxy-gone-0123456789", "uid-of-a-deleted-proxy")

	for i, step := range []time.Duration{0, grace / 2, grace / 2} { // up to exactly the grace
		w.clock.Step(step)
		res := w.collect()
		if len(res.Actions) != 0 || res.Young != 1 || res.Listed != 2 || !exists(p, orphan) {
			t.Fatalf("pass %d at age %s: %+v, orphan exists %t; want it kept as young", i, w.clock.Since(t0), res, exists(p, orphan))
		}
	}
	w.clock.Step(time.Second)
	res := w.collect()
	if got := ids(res.Actions); !slices.Equal(got, []string{orphan}) || res.Actions[0].Reason != ReasonOrphan || res.Actions[0].Err != nil {
		t.Fatalf("past the grace: actions %+v, want the orphan deleted", res.Actions)
	}
	if a := res.Actions[0]; a.Age != grace+time.Second || a.FirstSeen || a.DryRun || a.Again {
		t.Errorf("action %+v: want age %s from CreatedAt", a, grace+time.Second)
	}
	if exists(p, orphan) || !exists(p, live) {
		t.Fatalf("orphan exists %t (want false), live instance exists %t (want true)", exists(p, orphan), exists(p, live))
	}
	if got := deleted("orphan-p", ReasonOrphan); got != 1 {
		t.Errorf("deleted_total{orphan} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(runsTotal.WithLabelValues("orphan-p")); got != 4 {
		t.Errorf("runs_total = %v, want 4", got)
	}

	lines := w.logs.entries(t, msgDeleted)
	if len(lines) != 1 {
		t.Fatalf("%d deletion log lines, want 1:\n%s", len(lines), w.logs.all())
	}
	var keys []string
	for k := range lines[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// funcr adds logger, level and msg; the rest is what a deletion may say.
	if want := []string{"age", "ageSince", "id", "level", "logger", "msg", "provider", "reason", "uid"}; !slices.Equal(keys, want) {
		t.Errorf("deletion log keys %v, want %v", keys, want)
	}
	if l := lines[0]; l["provider"] != "orphan-p" || l["id"] != orphan || l["uid"] != "uid-of-a-deleted-proxy" ||
		l["reason"] != "orphan" || l["age"] != "20m1s" || l["ageSince"] != "created" {
		t.Errorf("deletion log line %v", l)
	}
	if strings.Contains(w.logs.all(), live) {
		t.Errorf("the log mentions the live instance %s:\n%s", live, w.logs.all())
	}
}

// TestLiveProxyInstancesKept: nothing a live Proxy uses or may be about to
// record is collected, however old.
func TestLiveProxyInstancesKept(t *testing.T) {
	w := newWorld(t, "inst-live", nil)
	p := w.provider("live-p", nil)

	serving := w.proxy("serving", "live-p")
	servingID := w.instance(p, serving, "s1")
	w.record(serving, servingID, "")

	// No providerID yet: the Create is in flight (a blocking VM create).
	// The status is written as after an earlier failed attempt, so that
	// observedGeneration is current and only the empty providerID keeps
	// the instance.
	creating := w.proxy("creating", "live-p")
	w.record(creating, "", "")
	creatingID := w.instance(p, creating, "s1")

	// A spec change the reconciler has not recorded a pass for: its
	// replacement is being created while the status still names the old.
	changing := w.proxy("changing", "live-p")
	oldID := w.instance(p, changing, "s1")
	w.record(changing, oldID, "")
	changing.Spec.Port = 8080
	if err := env.Client.Update(context.Background(), changing); err != nil {
		t.Fatal(err)
	}
	if changing.Generation == changing.Status.ObservedGeneration {
		t.Fatalf("generation %d not bumped by the spec change", changing.Generation)
	}
	replacementID := w.instance(p, changing, "s2")

	kept := []string{servingID, creatingID, oldID, replacementID}
	for i := 0; i < 4; i++ {
		res := w.collect()
		if len(res.Actions) != 0 || res.Young != 0 || res.Listed != len(kept) {
			t.Fatalf("pass %d at %s: %+v; want all %d instances kept and none pending", i, w.clock.Since(t0), res, len(kept))
		}
		w.clock.Step(grace)
	}
	for _, id := range kept {
		if !exists(p, id) {
			t.Errorf("instance %s of a live Proxy was deleted", id)
		}
	}
	if n := p.Calls(provider.OpDelete); n != 0 {
		t.Errorf("%d Delete calls, want none", n)
	}
}

// TestDuplicateCollected: a second instance carrying the UID of a Proxy
// that records another is deleted after the grace; the recorded one stays.
func TestDuplicateCollected(t *testing.T) {
	w := newWorld(t, "inst-dup", nil)
	p := w.provider("dup-p", nil)
	px := w.proxy("web", "dup-p")
	recorded := w.instance(p, px, "s1")
	w.record(px, recorded, "")
	w.clock.Step(time.Minute)
	dup := w.instance(p, px, "s2")

	if res := w.collect(); len(res.Actions) != 0 || res.Young != 1 {
		t.Fatalf("young duplicate: %+v, want kept", res)
	}
	w.clock.Step(grace + time.Second)
	res := w.collect()
	if got := ids(res.Actions); !slices.Equal(got, []string{dup}) || res.Actions[0].Reason != ReasonDuplicate {
		t.Fatalf("actions %+v, want the duplicate %s deleted", res.Actions, dup)
	}
	if exists(p, dup) || !exists(p, recorded) {
		t.Errorf("duplicate exists %t (want false), recorded exists %t (want true)", exists(p, dup), exists(p, recorded))
	}
	if got := deleted("dup-p", ReasonDuplicate); got != 1 {
		t.Errorf("deleted_total{duplicate} = %v, want 1", got)
	}
}

// TestRetiringKept: during make before break both the new instance and the
// one it retires are the Proxy's; only a third is a duplicate.
func TestRetiringKept(t *testing.T) {
	w := newWorld(t, "inst-retire", nil)
	p := w.provider("retire-p", nil)
	px := w.proxy("web", "retire-p")
	old := w.instance(p, px, "s1")
	replacement := w.instance(p, px, "s2")
	stray := w.instance(p, px, "s3")
	w.record(px, replacement, old)

	w.clock.Step(grace + time.Second)
	res := w.collect()
	if got := ids(res.Actions); !slices.Equal(got, []string{stray}) {
		t.Fatalf("actions %v, want only %s", got, stray)
	}
	if !exists(p, old) || !exists(p, replacement) {
		t.Errorf("retiring exists %t, replacement exists %t; want both", exists(p, old), exists(p, replacement))
	}
}

// TestProxyOfAnotherProvider: an instance listed by a provider entry that
// is not the Proxy's is kept when it is the recorded one (two entries on
// one backend both list it) and collected as a duplicate otherwise.
func TestProxyOfAnotherProvider(t *testing.T) {
	w := newWorld(t, "inst-other", nil)
	shared := fake.NewBackend()
	left := w.provider("other-left", shared)
	right := w.provider("other-right", shared)
	elsewhere := w.provider("other-elsewhere", nil)

	px := w.proxy("web", "other-right")
	recorded := w.instance(right, px, "s1")
	w.record(px, recorded, "")
	stray := w.plant(elsewhere, "proxy-stray-0123456789", string(px.UID))

	w.clock.Step(grace + time.Second)
	res := w.c.CollectOnce(context.Background())
	for _, name := range []string{"other-left", "other-right"} {
		if r := res[name]; r.Err != nil || r.Listed != 1 || len(r.Actions) != 0 {
			t.Errorf("%s: %+v; want the shared recorded instance listed and kept", name, r)
		}
	}
	if r := res["other-elsewhere"]; len(r.Actions) != 1 || r.Actions[0].ID != stray || r.Actions[0].Reason != ReasonDuplicate {
		t.Errorf("other-elsewhere: %+v; want the stray collected as a duplicate", r)
	}
	if !exists(left, recorded) || exists(elsewhere, stray) {
		t.Errorf("recorded exists %t (want true), stray exists %t (want false)", exists(left, recorded), exists(elsewhere, stray))
	}
}

// TestInstallationsNeverCollectEachOther: two installations share one
// backend, each with its own Proxies that the other cannot see. Over
// several passes past the grace each collects its own orphan and nothing
// of the other's.
func TestInstallationsNeverCollectEachOther(t *testing.T) {
	backend := fake.NewBackend()
	a := newWorld(t, "inst-a", nil)
	b := newWorld(t, "inst-b", a.clock)
	pa := a.provider("shared", backend)
	pb := b.provider("shared", backend)

	type side struct {
		w       *world
		p       *fake.Provider
		live    []string
		orphan  string
		touched []string
	}
	sides := []*side{{w: a, p: pa}, {w: b, p: pb}}
	for _, s := range sides {
		for i := 0; i < 3; i++ {
			px := s.w.proxy(fmt.Sprintf("web-%d", i), "shared")
			id := s.w.instance(s.p, px, "s1")
			s.w.record(px, id, "")
			s.live = append(s.live, id)
		}
		s.orphan = s.w.plant(s.p, "proxy-orphan-"+s.w.installation, "uid-gone-"+s.w.installation)
	}
	if n := len(backend.Records()); n != 8 {
		t.Fatalf("backend holds %d instances, want 8", n)
	}

	for pass := 0; pass < 5; pass++ {
		for _, s := range sides {
			r := s.w.collect()
			if r.Listed > 4 {
				t.Errorf("%s lists %d instances: the other installation's are visible", s.w.installation, r.Listed)
			}
			s.touched = append(s.touched, ids(r.Actions)...)
		}
		a.clock.Step(grace/2 + time.Minute)
	}
	for _, s := range sides {
		if !slices.Equal(s.touched, []string{s.orphan}) {
			t.Errorf("%s deleted %v over 5 passes, want only its orphan %s", s.w.installation, s.touched, s.orphan)
		}
		for _, id := range s.live {
			if !exists(s.p, id) {
				t.Errorf("%s's live instance %s is gone", s.w.installation, id)
			}
		}
	}
	for _, r := range backend.Records() {
		if strings.HasPrefix(r.Name, "proxy-orphan-") {
			t.Errorf("orphan %s left on the backend", r.Name)
		}
	}
	if n := len(backend.Records()); n != 6 {
		t.Errorf("backend holds %d instances, want the 6 live ones: %v", n, backend.Records())
	}
}

// TestDryRun: nothing is deleted; what would be is reported every pass and
// logged and counted once.
func TestDryRun(t *testing.T) {
	w := newWorld(t, "inst-dry", nil)
	w.c.DryRun = true
	p := w.provider("dry-p", nil)
	px := w.proxy("web", "dry-p")
	recorded := w.instance(p, px, "s1")
	w.record(px, recorded, "")
	dup := w.instance(p, px, "s2")
	orphan := w.plant(p, "proxy-gone-0123456789", "uid-gone")
	w.clock.Step(grace + time.Second)

	for pass := 0; pass < 2; pass++ {
		res := w.collect()
		if len(res.Actions) != 2 {
			t.Fatalf("pass %d: actions %+v, want the duplicate and the orphan reported", pass, res.Actions)
		}
		for _, act := range res.Actions {
			if !act.DryRun || act.Again != (pass > 0) || act.Err != nil {
				t.Errorf("pass %d: action %+v", pass, act)
			}
		}
		w.clock.Step(time.Minute)
	}
	if n := p.Calls(provider.OpDelete); n != 0 {
		t.Errorf("%d Delete calls in dry run", n)
	}
	for _, id := range []string{recorded, dup, orphan} {
		if !exists(p, id) {
			t.Errorf("%s deleted in dry run", id)
		}
	}
	for _, r := range []Reason{ReasonOrphan, ReasonDuplicate} {
		if got := testutil.ToFloat64(wouldDeleteTotal.WithLabelValues("dry-p", string(r))); got != 1 {
			t.Errorf("would_delete_total{%s} = %v, want 1", r, got)
		}
		if got := deleted("dry-p", r); got != 0 {
			t.Errorf("deleted_total{%s} = %v in dry run", r, got)
		}
	}
	if n := len(w.logs.entries(t, "garbage collection (dry run): would delete instance")); n != 2 {
		t.Errorf("%d would-delete log lines, want 2 (once per instance)", n)
	}
}

// TestListFailureIsolated: a failed listing on one provider is counted and
// collects nothing there; the other provider's pass goes on.
func TestListFailureIsolated(t *testing.T) {
	w := newWorld(t, "inst-flaky", nil)
	flaky := w.provider("flaky-p", nil)
	steady := w.provider("steady-p", nil)
	flakyOrphan := w.plant(flaky, "proxy-gone-flaky", "uid-gone-1")
	steadyOrphan := w.plant(steady, "proxy-gone-steady", "uid-gone-2")
	w.clock.Step(grace + time.Second)
	flaky.FailNext(provider.OpList, errors.New("connection reset"))

	res := w.c.CollectOnce(context.Background())
	if r := res["flaky-p"]; r.Err == nil || !errors.Is(r.Err, provider.ErrTransient) || len(r.Actions) != 0 {
		t.Errorf("flaky-p: %+v; want the listing error and nothing collected", r)
	}
	if r := res["steady-p"]; r.Err != nil || !slices.Equal(ids(r.Actions), []string{steadyOrphan}) {
		t.Errorf("steady-p: %+v; want its orphan collected", r)
	}
	if !exists(flaky, flakyOrphan) || exists(steady, steadyOrphan) {
		t.Errorf("flaky orphan exists %t (want true), steady orphan exists %t (want false)", exists(flaky, flakyOrphan), exists(steady, steadyOrphan))
	}
	if got := testutil.ToFloat64(listErrorsTotal.WithLabelValues("flaky-p")); got != 1 {
		t.Errorf("list_errors_total{flaky-p} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(listErrorsTotal.WithLabelValues("steady-p")); got != 0 {
		t.Errorf("list_errors_total{steady-p} = %v, want 0", got)
	}

	res = w.c.CollectOnce(context.Background())
	if r := res["flaky-p"]; r.Err != nil || !slices.Equal(ids(r.Actions), []string{flakyOrphan}) {
		t.Errorf("flaky-p, next pass: %+v; want its orphan collected", r)
	}
	for _, name := range []string{"flaky-p", "steady-p"} {
		if got := testutil.ToFloat64(runsTotal.WithLabelValues(name)); got != 2 {
			t.Errorf("runs_total{%s} = %v, want 2", name, got)
		}
	}
}

// TestZeroCreatedAtAgedFromFirstSight: an instance with no CreatedAt is
// aged from the first pass that listed it, and forgotten when it is gone.
func TestZeroCreatedAtAgedFromFirstSight(t *testing.T) {
	w := newWorld(t, "inst-zero", nil)
	p := w.provider("zero-p", nil)
	plantUndated := func(name, uid string) string {
		p.Backend().SetClock(func() time.Time { return time.Time{} })
		defer p.Backend().SetClock(w.clock.Now)
		id := w.plant(p, name, uid)
		if r, _ := p.Backend().Lookup(name); !r.CreatedAt.IsZero() {
			t.Fatalf("planted %s with CreatedAt %s, want zero", name, r.CreatedAt)
		}
		return id
	}
	undated := plantUndated("proxy-undated", "uid-gone-1")

	w.clock.Step(10 * time.Hour) // the instance may be old, but nobody knows
	for _, step := range []time.Duration{0, grace} {
		w.clock.Step(step)
		if res := w.collect(); len(res.Actions) != 0 || res.Young != 1 {
			t.Fatalf("%s after first sight: %+v, want kept", step, res)
		}
	}
	w.clock.Step(time.Second)
	res := w.collect()
	if len(res.Actions) != 1 || res.Actions[0].ID != undated || !res.Actions[0].FirstSeen || res.Actions[0].Age != grace+time.Second {
		t.Fatalf("past grace since first sight: %+v", res.Actions)
	}
	if l := w.logs.entries(t, msgDeleted); len(l) != 1 || l[0]["ageSince"] != "firstSeen" {
		t.Errorf("deletion log %v, want ageSince firstSeen", l)
	}

	// Forgetting: seen, gone, back under the same ID: aged afresh.
	again := plantUndated("proxy-undated-2", "uid-gone-2")
	w.collect()
	p.Remove("proxy-undated-2")
	w.clock.Step(time.Minute)
	w.collect()
	plantUndated("proxy-undated-2", "uid-gone-2")
	w.clock.Step(grace)
	if res := w.collect(); len(res.Actions) != 0 || res.Young != 1 || !exists(p, again) {
		t.Errorf("returned instance: %+v; want it aged from its return, kept", res)
	}
}

// TestStartWaitsForCacheSync: Start lists nothing until the cache says it
// synced, then runs a first pass at once and one per tick.
func TestStartWaitsForCacheSync(t *testing.T) {
	t.Run("never synced", func(t *testing.T) {
		w := newWorld(t, "inst-nosync", nil)
		p := w.provider("nosync-p", nil)
		orphan := w.plant(p, "proxy-gone", "uid-gone")
		w.clock.Step(grace + time.Second)
		w.c.WaitForCacheSync = func(context.Context) bool { return false }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.c.Start(ctx) }()
		select {
		case err := <-done:
			if err == nil {
				t.Error("Start returned nil though the cache never synced")
			}
		case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
			cancel()
			<-done
			t.Error("Start did not return though the cache never synced")
		}
		cancel()
		if n := p.Calls(provider.OpList); n != 0 || !exists(p, orphan) {
			t.Errorf("%d listings before the cache synced; orphan exists %t", n, exists(p, orphan))
		}
	})

	t.Run("synced later", func(t *testing.T) {
		w := newWorld(t, "inst-sync", nil)
		p := w.provider("sync-p", nil)
		orphan := w.plant(p, "proxy-gone", "uid-gone")
		w.clock.Step(grace + time.Second)
		waiting, synced := make(chan struct{}), make(chan struct{})
		w.c.WaitForCacheSync = func(ctx context.Context) bool {
			close(waiting)
			select {
			case <-synced:
				return true
			case <-ctx.Done():
				return false
			}
		}
		passes := make(chan map[string]Result, 10)
		w.c.afterCollect = func(r map[string]Result) { passes <- r }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.c.Start(ctx) }()
		defer func() {
			cancel()
			if err := recv(t, done, "Start to return"); err != nil {
				t.Errorf("Start: %v", err)
			}
		}()

		select {
		case <-waiting:
		case <-time.After(30 * time.Second): // a hang guard
			t.Fatal("Start never called WaitForCacheSync")
		}
		for i := 0; i < 3; i++ {
			w.clock.Step(w.c.Interval) // ticks, had a ticker been made
		}
		if n := p.Calls(provider.OpList); n != 0 || !exists(p, orphan) {
			t.Fatalf("%d listings while the cache syncs; orphan exists %t", n, exists(p, orphan))
		}
		close(synced)
		if r := recv(t, passes, "the first pass"); len(r["sync-p"].Actions) != 1 || exists(p, orphan) {
			t.Fatalf("first pass: %+v; want the orphan collected", r)
		}
		testenv.Eventually(t, "the ticker", w.clock.HasWaiters)
		w.clock.Step(w.c.Interval)
		if r := recv(t, passes, "the second pass"); r["sync-p"].Listed != 0 || r["sync-p"].Err != nil {
			t.Errorf("second pass: %+v", r)
		}
		if n := p.Calls(provider.OpList); n != 2 {
			t.Errorf("%d listings after one tick, want 2", n)
		}
	})
}

// TestHungProviderDoesNotDelayOthers: a provider whose listing hangs holds
// only its own pass; the ticks go on collecting on the others, and skip it
// while it hangs.
func TestHungProviderDoesNotDelayOthers(t *testing.T) {
	w := newWorld(t, "inst-hung", nil)
	stuck := w.provider("hung-p", nil)
	fine := w.provider("fine-p", nil)
	stuckOrphan := w.plant(stuck, "proxy-gone-stuck", "uid-gone-1")
	fineOrphan := w.plant(fine, "proxy-gone-fine", "uid-gone-2")
	w.clock.Step(grace + time.Second)
	release := stuck.Block(provider.OpList)
	defer release()

	passes := make(chan map[string]Result, 10)
	w.c.afterCollect = func(r map[string]Result) { passes <- r }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.c.Start(ctx) }()

	testenv.Eventually(t, "the fine provider's pass to end", func() bool { return !exists(fine, fineOrphan) && w.c.idle("fine-p") })
	testenv.Eventually(t, "the ticker", w.clock.HasWaiters)
	w.clock.Step(w.c.Interval)
	r := recv(t, passes, "the tick's pass") // the second CollectOnce; the first still waits for hung-p
	if !r["hung-p"].Skipped || r["fine-p"].Skipped || r["fine-p"].Err != nil {
		t.Errorf("tick while hung-p hangs: %+v; want hung-p skipped and fine-p run", r)
	}
	if !exists(stuck, stuckOrphan) {
		t.Error("the hung provider's orphan went while its listing hung")
	}
	release()
	if r := recv(t, passes, "the released pass"); len(r["hung-p"].Actions) != 1 {
		t.Errorf("first pass once released: %+v; want hung-p's orphan collected", r)
	}
	if exists(stuck, stuckOrphan) {
		t.Error("hung-p's orphan survived its pass")
	}
	cancel()
	if err := recv(t, done, "Start to return"); err != nil {
		t.Errorf("Start: %v", err)
	}
}

func TestCheckGrace(t *testing.T) {
	if err := CheckGrace(DefaultGrace, DefaultCallTimeout); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	if err := CheckGrace(10*time.Minute, 15*time.Minute); err == nil {
		t.Error("a grace shorter than the call timeout was accepted")
	}
}

// TestClassify covers the rule set beyond the envtest cases: empty IDs and
// UIDs, and every status combination. u2 is a second Proxy, so that an
// instance's UID and the Proxy that records it can differ.
func TestClassify(t *testing.T) {
	px := func(uid types.UID, gen, observed int64, providerID, retiring string) *egressv1.Proxy {
		return &egressv1.Proxy{
			ObjectMeta: metav1.ObjectMeta{UID: uid, Generation: gen},
			Status:     egressv1.ProxyStatus{ProviderID: providerID, RetiringProviderID: retiring, ObservedGeneration: observed},
		}
	}
	for _, tc := range []struct {
		name    string
		inst    provider.Instance
		proxies []*egressv1.Proxy
		want    Reason
		collect bool
	}{
		{"no ID", provider.Instance{UID: "gone"}, nil, "", false},
		{"empty UID, recorded", provider.Instance{ID: "x"}, []*egressv1.Proxy{px("u1", 1, 1, "x", "")}, "", false},
		{"empty UID, recorded as retiring", provider.Instance{ID: "x"}, []*egressv1.Proxy{px("u1", 1, 1, "y", "x")}, "", false},
		{"empty UID, unrecorded", provider.Instance{ID: "x"}, []*egressv1.Proxy{px("u1", 1, 1, "y", "")}, ReasonOrphan, true},
		{"no Proxy", provider.Instance{ID: "x", UID: "gone"}, []*egressv1.Proxy{px("u1", 1, 1, "y", "")}, ReasonOrphan, true},
		{"no Proxy of its UID, recorded by another", provider.Instance{ID: "x", UID: "gone"}, []*egressv1.Proxy{px("u1", 1, 1, "x", "")}, "", false},
		{"recorded", provider.Instance{ID: "x", UID: "u1"}, []*egressv1.Proxy{px("u1", 1, 1, "x", "")}, "", false},
		{"retiring", provider.Instance{ID: "x", UID: "u1"}, []*egressv1.Proxy{px("u1", 1, 1, "y", "x")}, "", false},
		{"another Proxy's UID, recorded", provider.Instance{ID: "x", UID: "u1"},
			[]*egressv1.Proxy{px("u1", 2, 2, "y", ""), px("u2", 1, 1, "z", "x")}, "", false},
		{"create in flight", provider.Instance{ID: "x", UID: "u1"}, []*egressv1.Proxy{px("u1", 1, 1, "", "")}, "", false},
		{"create in flight while retiring", provider.Instance{ID: "x", UID: "u1"}, []*egressv1.Proxy{px("u1", 2, 2, "", "y")}, "", false},
		{"spec change pending", provider.Instance{ID: "x", UID: "u1"}, []*egressv1.Proxy{px("u1", 2, 1, "y", "")}, "", false},
		{"duplicate", provider.Instance{ID: "x", UID: "u1"}, []*egressv1.Proxy{px("u1", 2, 2, "y", "z")}, ReasonDuplicate, true},
		{"duplicate, another Proxy records others", provider.Instance{ID: "x", UID: "u1"},
			[]*egressv1.Proxy{px("u1", 2, 2, "y", ""), px("u2", 1, 1, "z", "w")}, ReasonDuplicate, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			byUID := map[types.UID]*egressv1.Proxy{}
			recorded := map[string]bool{}
			for _, p := range tc.proxies {
				byUID[p.UID] = p
				for _, id := range p.Status.RecordedProviderIDs() {
					recorded[id] = true
				}
			}
			got, collect := classify(tc.inst, byUID, recorded)
			if got != tc.want || collect != tc.collect {
				t.Errorf("classify = %q, %t; want %q, %t", got, collect, tc.want, tc.collect)
			}
		})
	}
}

// TestGCAndAdoptionAgree (issue 7, item 3): the contract adopts an instance
// whose UID mark is empty, so the collector must never delete an instance
// that a Proxy's status records, whatever its UID mark says. Kept over
// several passes past the grace: an empty-UID instance that a Proxy
// records, and an instance carrying another Proxy's UID that this Proxy
// records. Collected: an empty-UID instance no Proxy records.
func TestGCAndAdoptionAgree(t *testing.T) {
	w := newWorld(t, "inst-agree", nil)
	p := w.provider("agree-p", nil)

	web := w.proxy("web", "agree-p")
	// Left by a crash before its UID mark was written, then adopted by name
	// and recorded.
	emptyUID := w.plant(p, provider.InstanceName(web.Namespace, web.Name, string(web.UID), "s1"), "")

	other := w.proxy("other", "agree-p")
	otherOwn := w.instance(p, other, "s1")
	w.record(other, otherOwn, "")
	// Carries other's UID (for its owner it is a duplicate), but web
	// records it as the instance its replacement retires.
	foreignUID := w.plant(p, "proxy-foreign-uid-0123456789", string(other.UID))
	w.record(web, emptyUID, foreignUID)

	// Nobody records it: a true orphan.
	unrecorded := w.plant(p, "proxy-unrecorded-0123456789", "")

	var collected []string
	for pass := 0; pass < 3; pass++ {
		w.clock.Step(grace + time.Second)
		res := w.collect()
		for _, a := range res.Actions {
			if a.Err != nil {
				t.Errorf("pass %d: deleting %s: %v", pass, a.ID, a.Err)
			}
		}
		collected = append(collected, ids(res.Actions)...)
	}
	if !slices.Equal(collected, []string{unrecorded}) {
		t.Errorf("collected %v over 3 passes past the grace, want only the unrecorded %s", collected, unrecorded)
	}
	for what, id := range map[string]string{"empty-UID recorded": emptyUID, "other-UID recorded": foreignUID, "other's own": otherOwn} {
		if !exists(p, id) {
			t.Errorf("the %s instance %s was deleted", what, id)
		}
	}
	if exists(p, unrecorded) {
		t.Errorf("the unrecorded empty-UID instance %s survived", unrecorded)
	}
}
