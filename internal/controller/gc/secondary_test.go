package gc

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

const msgSecondaryDeleted = "garbage collection: deleted secondary resource"

func secondariesDeleted(providerName, kind string, r Reason) float64 {
	return testutil.ToFloat64(secondariesDeletedTotal.WithLabelValues(providerName, kind, string(r)))
}

// plantSecondary stages a secondary resource of kind for the instance
// named instance, with this installation's marks and uid, as a crash
// between a provider's steps would leave it, and returns its ID.
func (w *world) plantSecondary(p *fake.Provider, kind, instance, uid string) string {
	return p.Backend().PlantSecondary(kind, instance, &provider.Marks{Managed: true, UID: uid, Installation: w.installation}).ID
}

// setStatus writes px's status as the reconciler does after a pass
// (observedGeneration current), after edit.
func (w *world) setStatus(px *egressv1.Proxy, edit func(st *egressv1.ProxyStatus)) {
	w.t.Helper()
	edit(&px.Status)
	px.Status.ObservedGeneration = px.Generation
	if err := env.Client.Status().Update(context.Background(), px); err != nil {
		w.t.Fatalf("status of Proxy %s: %v", px.Name, err)
	}
}

func secondaryExists(p *fake.Provider, kind, instance string) bool {
	_, ok := p.Backend().LookupSecondary(kind, instance)
	return ok
}

// TestSecondaryWithoutInstanceCollectedAfterGrace (issue 8, item 2): a
// secondary resource whose instance is gone and whose owner is on no Proxy
// (the earlier providers' overlay without its domain) is kept while it is not older
// than the grace and deleted through the provider after, with one log line
// that says only what a deletion may say; the live instance's own
// secondary next to it stays.
func TestSecondaryWithoutInstanceCollectedAfterGrace(t *testing.T) {
	w := newWorld(t, "sec-orphan", nil)
	p := w.provider("sec-orphan-p", nil)
	px := w.proxy("web", "sec-orphan-p")
	live := w.instance(p, px, "s1")
	liveName := live[len("fake/"):]
	w.setStatus(px, func(st *egressv1.ProxyStatus) { st.ProviderID, st.InstanceName = live, liveName })
	liveSecondary := w.plantSecondary(p, "volume", liveName, string(px.UID))
	orphan := w.plantSecondary(p, "volume", "proxy-gone-0123456789", "uid-of-a-deleted-proxy")

	for i, step := range []time.Duration{0, grace / 2, grace / 2} { // up to exactly the grace
		w.clock.Step(step)
		res := w.collect()
		if len(res.SecondaryActions) != 0 || res.SecondariesYoung != 1 || res.SecondariesListed != 2 {
			t.Fatalf("pass %d at age %s: %+v; want the orphan kept as young", i, w.clock.Since(t0), res)
		}
	}
	if !secondaryExists(p, "volume", "proxy-gone-0123456789") {
		t.Fatal("the young orphan secondary was deleted")
	}
	w.clock.Step(time.Second)
	res := w.collect()
	if got := ids(res.SecondaryActions); !slices.Equal(got, []string{orphan}) {
		t.Fatalf("past the grace: secondary actions %+v, want the orphan %s deleted", res.SecondaryActions, orphan)
	}
	a := res.SecondaryActions[0]
	if a.Reason != ReasonOrphan || a.Kind != "volume" || a.Instance != "proxy-gone-0123456789" || a.UID != "uid-of-a-deleted-proxy" ||
		a.Age != grace+time.Second || a.FirstSeen || a.DryRun || a.Again || a.Err != nil {
		t.Errorf("action %+v", a)
	}
	if len(res.Actions) != 0 {
		t.Errorf("instance actions %+v, want none", res.Actions)
	}
	if secondaryExists(p, "volume", "proxy-gone-0123456789") || !secondaryExists(p, "volume", liveName) || !exists(p, live) {
		t.Fatalf("orphan secondary exists %t (want false), live secondary exists %t, live instance exists %t (want true)",
			secondaryExists(p, "volume", "proxy-gone-0123456789"), secondaryExists(p, "volume", liveName), exists(p, live))
	}
	if got := p.DeletedSecondaries(); !slices.Equal(got, []string{orphan}) {
		t.Errorf("DeleteSecondary calls %v, want only %s", got, orphan)
	}
	if got := secondariesDeleted("sec-orphan-p", "volume", ReasonOrphan); got != 1 {
		t.Errorf("secondaries_deleted_total{volume,orphan} = %v, want 1", got)
	}

	lines := w.logs.entries(t, msgSecondaryDeleted)
	if len(lines) != 1 {
		t.Fatalf("%d secondary deletion log lines, want 1:\n%s", len(lines), w.logs.all())
	}
	var keys []string
	for k := range lines[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{"age", "ageSince", "id", "instance", "kind", "level", "logger", "msg", "provider", "reason", "uid"}; !slices.Equal(keys, want) {
		t.Errorf("secondary deletion log keys %v, want %v", keys, want)
	}
	if l := lines[0]; l["id"] != orphan || l["kind"] != "volume" || l["instance"] != "proxy-gone-0123456789" ||
		l["reason"] != "orphan" || l["age"] != "20m1s" || l["ageSince"] != "created" {
		t.Errorf("secondary deletion log line %v", l)
	}
	if strings.Contains(w.logs.all(), liveSecondary) {
		t.Errorf("the log mentions the live secondary %s:\n%s", liveSecondary, w.logs.all())
	}
	// Gone: the next pass lists and deletes nothing more.
	if res := w.collect(); res.SecondariesListed != 1 || len(res.SecondaryActions) != 0 {
		t.Errorf("the pass after: %+v", res)
	}
}

// TestSecondaryKeptWhileNeeded (issue 8, item 2): nothing an instance, an
// in-flight create or a retiring instance still needs is collected, however
// old: a secondary whose instance exists (even one that is not ours), one
// whose owner's create is in flight or whose spec change is not yet acted
// on, and one whose instance name or ID a Proxy records (as current,
// retiring or superseded) though the instance itself is gone.
func TestSecondaryKeptWhileNeeded(t *testing.T) {
	w := newWorld(t, "sec-keep", nil)
	p := w.provider("sec-keep-p", nil)

	// Its instance exists but is not ours (unmarked): it may still use it.
	p.Backend().Plant("proxy-humans-0123456789", nil)
	w.plantSecondary(p, "volume", "proxy-humans-0123456789", "uid-gone-1")

	// The create is in flight: no providerID yet (observedGeneration is
	// current, so only the empty providerID keeps it).
	creating := w.proxy("creating", "sec-keep-p")
	w.setStatus(creating, func(*egressv1.ProxyStatus) {})
	w.plantSecondary(p, "volume", provider.InstanceName(creating.Namespace, creating.Name, string(creating.UID), "s1"), string(creating.UID))

	// A spec change not yet acted on: its replacement may be being made.
	changing := w.proxy("changing", "sec-keep-p")
	w.setStatus(changing, func(st *egressv1.ProxyStatus) {
		st.ProviderID, st.InstanceName = "fake/proxy-changing-old", "proxy-changing-old"
	})
	changing.Spec.Port = 8080
	if err := env.Client.Update(context.Background(), changing); err != nil {
		t.Fatal(err)
	}
	w.plantSecondary(p, "volume", provider.InstanceName(changing.Namespace, changing.Name, string(changing.UID), "s2"), string(changing.UID))

	// The current instance was lost (the reconciler creates it again under
	// the same name, and will use what is left of it); its secondary has
	// no UID mark yet, so only the recorded name keeps it.
	lost := w.proxy("lost", "sec-keep-p")
	lostName := provider.InstanceName(lost.Namespace, lost.Name, string(lost.UID), "s1")
	w.plantSecondary(p, "seed-iso", lostName, "")

	// Make before break: the retiring instance is gone, its seed is not.
	retiring := w.proxy("retiring", "sec-keep-p")
	retiringName := provider.InstanceName(retiring.Namespace, retiring.Name, string(retiring.UID), "s1")
	w.plantSecondary(p, "seed-iso", retiringName, string(retiring.UID))

	// Superseded: recorded by ID only; the reconciler deletes it itself.
	superseded := w.proxy("superseded", "sec-keep-p")
	supersededName := provider.InstanceName(superseded.Namespace, superseded.Name, string(superseded.UID), "s0")
	w.plantSecondary(p, "volume", supersededName, string(superseded.UID))

	w.setStatus(lost, func(st *egressv1.ProxyStatus) { st.ProviderID, st.InstanceName = fake.ID(lostName), lostName })
	for _, px := range []*egressv1.Proxy{retiring, superseded} {
		current := w.instance(p, px, "s9")
		w.setStatus(px, func(st *egressv1.ProxyStatus) {
			st.ProviderID, st.InstanceName = current, current[len("fake/"):]
			if px == retiring {
				st.RetiringProviderID, st.RetiringInstanceName = fake.ID(retiringName), retiringName
			} else {
				st.SupersededProviderIDs = []string{fake.ID(supersededName)}
			}
		})
	}

	const kept = 6
	for pass := 0; pass < 4; pass++ {
		w.clock.Step(grace + time.Second)
		res := w.collect()
		if len(res.SecondaryActions) != 0 || res.SecondariesYoung != 0 || res.SecondariesListed != kept {
			t.Fatalf("pass %d: %+v; want all %d secondaries kept and none pending", pass, res, kept)
		}
	}
	if n := p.Calls(provider.OpDeleteSecondary); n != 0 {
		t.Errorf("%d DeleteSecondary calls, want none", n)
	}
	if n := len(p.Backend().Secondaries()); n != kept {
		t.Errorf("%d secondaries left, want %d: %v", n, kept, p.Backend().Secondaries())
	}
}

// TestSecondaryLeftoverOfLiveProxyCollected (issue 8, item 2): a secondary
// of a live, settled Proxy whose instance is gone and whose name and ID the
// Proxy no longer records (a Delete that crashed half-way through a
// replaced instance's objects) is collected after the grace as a leftover;
// the Proxy's current instance and its secondary stay.
func TestSecondaryLeftoverOfLiveProxyCollected(t *testing.T) {
	w := newWorld(t, "sec-leftover", nil)
	p := w.provider("sec-leftover-p", nil)
	px := w.proxy("web", "sec-leftover-p")
	current := w.instance(p, px, "s2")
	w.setStatus(px, func(st *egressv1.ProxyStatus) { st.ProviderID, st.InstanceName = current, current[len("fake/"):] })
	w.plantSecondary(p, "volume", current[len("fake/"):], string(px.UID))
	oldName := provider.InstanceName(px.Namespace, px.Name, string(px.UID), "s1")
	leftover := w.plantSecondary(p, "volume", oldName, string(px.UID))

	w.clock.Step(grace + time.Second)
	res := w.collect()
	if len(res.SecondaryActions) != 1 || res.SecondaryActions[0].ID != leftover || res.SecondaryActions[0].Reason != ReasonLeftover {
		t.Fatalf("secondary actions %+v, want the leftover %s collected as %s", res.SecondaryActions, leftover, ReasonLeftover)
	}
	if secondaryExists(p, "volume", oldName) || !secondaryExists(p, "volume", current[len("fake/"):]) || !exists(p, current) {
		t.Errorf("leftover exists %t (want false); current secondary %t and instance %t (want true)",
			secondaryExists(p, "volume", oldName), secondaryExists(p, "volume", current[len("fake/"):]), exists(p, current))
	}
	if got := secondariesDeleted("sec-leftover-p", "volume", ReasonLeftover); got != 1 {
		t.Errorf("secondaries_deleted_total{volume,leftover} = %v, want 1", got)
	}
}

// TestSecondaryDryRun (issue 8, item 2): nothing is deleted; what would be
// is reported every pass and logged and counted once.
func TestSecondaryDryRun(t *testing.T) {
	w := newWorld(t, "sec-dry", nil)
	w.c.DryRun = true
	p := w.provider("sec-dry-p", nil)
	w.plantSecondary(p, "volume", "proxy-gone-0123456789", "uid-gone")
	w.plantSecondary(p, "seed-iso", "proxy-gone-0123456789", "uid-gone")
	w.clock.Step(grace + time.Second)

	for pass := 0; pass < 2; pass++ {
		res := w.collect()
		if len(res.SecondaryActions) != 2 {
			t.Fatalf("pass %d: secondary actions %+v, want both reported", pass, res.SecondaryActions)
		}
		for _, a := range res.SecondaryActions {
			if !a.DryRun || a.Again != (pass > 0) || a.Err != nil {
				t.Errorf("pass %d: action %+v", pass, a)
			}
		}
		w.clock.Step(time.Minute)
	}
	if n := p.Calls(provider.OpDeleteSecondary); n != 0 {
		t.Errorf("%d DeleteSecondary calls in dry run", n)
	}
	if n := len(p.Backend().Secondaries()); n != 2 {
		t.Errorf("%d secondaries left after a dry run, want 2", n)
	}
	for _, kind := range []string{"volume", "seed-iso"} {
		if got := testutil.ToFloat64(secondariesWouldDeleteTotal.WithLabelValues("sec-dry-p", kind, string(ReasonOrphan))); got != 1 {
			t.Errorf("secondaries_would_delete_total{%s} = %v, want 1", kind, got)
		}
		if got := secondariesDeleted("sec-dry-p", kind, ReasonOrphan); got != 0 {
			t.Errorf("secondaries_deleted_total{%s} = %v in dry run", kind, got)
		}
	}
	if n := len(w.logs.entries(t, "garbage collection (dry run): would delete secondary resource")); n != 2 {
		t.Errorf("%d would-delete log lines, want 2 (once per resource)", n)
	}
}

// TestSecondaryInstallationsNeverCollectEachOther (issue 8, item 2): two
// installations share one backend, each with an orphan secondary and a
// live instance's secondary; each collects only its own orphan.
func TestSecondaryInstallationsNeverCollectEachOther(t *testing.T) {
	backend := fake.NewBackend()
	a := newWorld(t, "sec-inst-a", nil)
	b := newWorld(t, "sec-inst-b", a.clock)
	sides := map[*world]*fake.Provider{a: a.provider("shared", backend), b: b.provider("shared", backend)}
	orphans := map[*world]string{}
	for w, p := range sides {
		px := w.proxy("web", "shared")
		id := w.instance(p, px, "s1")
		w.setStatus(px, func(st *egressv1.ProxyStatus) { st.ProviderID, st.InstanceName = id, id[len("fake/"):] })
		w.plantSecondary(p, "volume", id[len("fake/"):], string(px.UID))
		orphans[w] = w.plantSecondary(p, "volume", "proxy-orphan-"+w.installation, "uid-gone-"+w.installation)
	}
	touched := map[*world][]string{}
	for pass := 0; pass < 4; pass++ {
		for w := range sides {
			r := w.collect()
			if r.SecondariesListed > 2 {
				t.Errorf("%s lists %d secondaries: the other installation's are visible", w.installation, r.SecondariesListed)
			}
			touched[w] = append(touched[w], ids(r.SecondaryActions)...)
		}
		a.clock.Step(grace/2 + time.Minute)
	}
	for w := range sides {
		if !slices.Equal(touched[w], []string{orphans[w]}) {
			t.Errorf("%s deleted %v, want only its orphan %s", w.installation, touched[w], orphans[w])
		}
	}
	if n := len(backend.Secondaries()); n != 2 {
		t.Errorf("backend holds %d secondaries, want the 2 live ones: %v", n, backend.Secondaries())
	}
}

// TestSecondaryListFailureIsolated (issue 8, item 2): a failed secondary
// listing collects no secondary that pass and is counted; the instances
// are still collected, and the next pass collects the secondaries.
func TestSecondaryListFailureIsolated(t *testing.T) {
	w := newWorld(t, "sec-flaky", nil)
	p := w.provider("sec-flaky-p", nil)
	orphanInstance := w.plant(p, "proxy-gone-instance", "uid-gone-1")
	w.plantSecondary(p, "volume", "proxy-gone-0123456789", "uid-gone-2")
	w.clock.Step(grace + time.Second)
	p.FailNext(provider.OpListSecondary, errors.New("pool unreachable"))

	res := w.c.CollectOnce(context.Background())["sec-flaky-p"]
	if res.Err != nil || !errors.Is(res.SecondaryErr, provider.ErrTransient) || len(res.SecondaryActions) != 0 {
		t.Errorf("pass: %+v; want the secondary listing error and no secondary collected", res)
	}
	if !slices.Equal(ids(res.Actions), []string{orphanInstance}) || exists(p, orphanInstance) {
		t.Errorf("instance actions %+v; want the orphan instance collected regardless", res.Actions)
	}
	if got := testutil.ToFloat64(secondaryListErrorsTotal.WithLabelValues("sec-flaky-p")); got != 1 {
		t.Errorf("secondary_list_errors_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(listErrorsTotal.WithLabelValues("sec-flaky-p")); got != 0 {
		t.Errorf("list_errors_total = %v, want 0: ListByTag did not fail", got)
	}
	if r := w.collect(); len(r.SecondaryActions) != 1 || secondaryExists(p, "volume", "proxy-gone-0123456789") {
		t.Errorf("next pass: %+v; want the orphan secondary collected", r)
	}
}

// TestSecondaryDeleteFailureRetried (issue 8, item 2): a failed
// DeleteSecondary is counted, logged and tried again the next pass.
func TestSecondaryDeleteFailureRetried(t *testing.T) {
	w := newWorld(t, "sec-delfail", nil)
	p := w.provider("sec-delfail-p", nil)
	id := w.plantSecondary(p, "volume", "proxy-gone-0123456789", "uid-gone")
	w.clock.Step(grace + time.Second)
	p.FailNext(provider.OpDeleteSecondary, provider.ErrQuotaExceeded)

	res := w.collect()
	if len(res.SecondaryActions) != 1 || !errors.Is(res.SecondaryActions[0].Err, provider.ErrQuotaExceeded) {
		t.Fatalf("secondary actions %+v, want one failed deletion", res.SecondaryActions)
	}
	if got := testutil.ToFloat64(secondaryDeleteErrorsTotal.WithLabelValues("sec-delfail-p", "volume")); got != 1 {
		t.Errorf("secondary_delete_errors_total = %v, want 1", got)
	}
	res = w.collect()
	if len(res.SecondaryActions) != 1 || res.SecondaryActions[0].Err != nil || res.SecondaryActions[0].Again {
		t.Fatalf("retry: %+v, want a first successful deletion", res.SecondaryActions)
	}
	if secondaryExists(p, "volume", "proxy-gone-0123456789") || !slices.Equal(p.DeletedSecondaries(), []string{id, id}) {
		t.Errorf("after the retry: exists %t, DeleteSecondary calls %v", secondaryExists(p, "volume", "proxy-gone-0123456789"), p.DeletedSecondaries())
	}
	if got := secondariesDeleted("sec-delfail-p", "volume", ReasonOrphan); got != 1 {
		t.Errorf("secondaries_deleted_total = %v, want 1", got)
	}
}

// TestSecondaryZeroCreatedAtAgedFromFirstSight (issue 8, item 2): a
// secondary with no CreatedAt is aged from the first pass that listed it.
func TestSecondaryZeroCreatedAtAgedFromFirstSight(t *testing.T) {
	w := newWorld(t, "sec-zero", nil)
	p := w.provider("sec-zero-p", nil)
	p.Backend().SetClock(func() time.Time { return time.Time{} })
	id := w.plantSecondary(p, "volume", "proxy-gone-0123456789", "uid-gone")
	p.Backend().SetClock(w.clock.Now)

	w.clock.Step(10 * time.Hour)
	for _, step := range []time.Duration{0, grace} {
		w.clock.Step(step)
		if res := w.collect(); len(res.SecondaryActions) != 0 || res.SecondariesYoung != 1 {
			t.Fatalf("%s after first sight: %+v, want kept", step, res)
		}
	}
	w.clock.Step(time.Second)
	res := w.collect()
	if len(res.SecondaryActions) != 1 || res.SecondaryActions[0].ID != id || !res.SecondaryActions[0].FirstSeen ||
		res.SecondaryActions[0].Age != grace+time.Second {
		t.Fatalf("past grace since first sight: %+v", res.SecondaryActions)
	}
}

// TestSecondaryNeverListedBeforeCacheSync (issue 8, item 2): with a cache
// that never syncs no secondary is listed, let alone deleted.
func TestSecondaryNeverListedBeforeCacheSync(t *testing.T) {
	w := newWorld(t, "sec-nosync", nil)
	p := w.provider("sec-nosync-p", nil)
	w.plantSecondary(p, "volume", "proxy-gone-0123456789", "uid-gone")
	w.clock.Step(grace + time.Second)
	w.c.WaitForCacheSync = func(context.Context) bool { return false }
	if err := w.c.Start(context.Background()); err == nil {
		t.Error("Start returned nil though the cache never synced")
	}
	if n := p.Calls(provider.OpListSecondary); n != 0 || !secondaryExists(p, "volume", "proxy-gone-0123456789") {
		t.Errorf("%d secondary listings before the cache synced; exists %t", n, secondaryExists(p, "volume", "proxy-gone-0123456789"))
	}
}

// TestSecondarySpansUnderPass (issue 8, item 2): the secondary calls are
// children of the pass's span.
func TestSecondarySpansUnderPass(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	w := newWorld(t, "sec-trace", nil)
	w.c.TracerProvider = tp
	p := w.provider("sec-traced", nil)
	w.providers.mu.Lock()
	for _, e := range w.providers.list {
		if e.Provider == p {
			telemetry.Decorate(tp)(e)
		}
	}
	w.providers.mu.Unlock()
	w.plantSecondary(p, "volume", "proxy-gone-0123456789", "uid-gone")
	w.clock.Step(grace + 1)
	if acts := w.collect().SecondaryActions; len(acts) != 1 {
		t.Fatalf("secondary actions = %+v", acts)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		byName[s.Name()] = s
	}
	pass, ok := byName["gc.collect"]
	if !ok {
		t.Fatalf("no gc.collect span among %v", names(sr.Ended()))
	}
	for _, child := range []string{"provider.list_secondary", "provider.delete_secondary"} {
		s, ok := byName[child]
		if !ok {
			t.Fatalf("no %s span among %v", child, names(sr.Ended()))
		}
		if s.Parent().SpanID() != pass.SpanContext().SpanID() {
			t.Errorf("%s is not a child of gc.collect", child)
		}
	}
}

// TestClassifySecondary covers the secondary rule set beyond the envtest
// cases: provider bugs (no ID, no marks), and every owner and record
// combination.
func TestClassifySecondary(t *testing.T) {
	px := func(uid types.UID, gen, observed int64, providerID, name string) *egressv1.Proxy {
		return &egressv1.Proxy{
			ObjectMeta: metav1.ObjectMeta{UID: uid, Generation: gen},
			Status:     egressv1.ProxyStatus{ProviderID: providerID, InstanceName: name, ObservedGeneration: observed},
		}
	}
	ours := provider.Marks{Managed: true, UID: "u1", Installation: "i"}
	noUID := provider.Marks{Managed: true, Installation: "i"}
	group := provider.Marks{Managed: true, UID: "g1", Installation: "i"}
	gone := func(m provider.Marks, instance, instanceID string) provider.Secondary {
		return provider.Secondary{ID: "s", Kind: "volume", Marks: m, Instance: instance, InstanceID: instanceID, InstanceGone: true}
	}
	for _, tc := range []struct {
		name    string
		s       provider.Secondary
		proxies []*egressv1.Proxy
		want    Reason
		collect bool
	}{
		{"no ID", provider.Secondary{Marks: ours, Instance: "a", InstanceGone: true}, nil, "", false},
		{"unmarked", gone(provider.Marks{UID: "u1", Installation: "i"}, "a", ""), nil, "", false},
		{"no installation", gone(provider.Marks{Managed: true, UID: "u1"}, "a", ""), nil, "", false},
		{"instance exists", provider.Secondary{ID: "s", Marks: ours, Instance: "a"}, nil, "", false},
		{"no instance named, no owner", gone(provider.Marks{Managed: true, Installation: "i"}, "", ""), nil, ReasonOrphan, true},
		{"orphan", gone(ours, "a", "x/a"), []*egressv1.Proxy{px("u2", 1, 1, "x/b", "b")}, ReasonOrphan, true},
		{"empty UID, unrecorded", gone(noUID, "a", ""), []*egressv1.Proxy{px("u2", 1, 1, "x/b", "b")}, ReasonOrphan, true},
		{"empty UID, name recorded", gone(noUID, "a", ""), []*egressv1.Proxy{px("u2", 1, 1, "x/b", "a")}, "", false},
		{"another UID, ID recorded", gone(ours, "a", "x/a"), []*egressv1.Proxy{px("u2", 1, 1, "x/a", "")}, "", false},
		{"create in flight", gone(ours, "a", ""), []*egressv1.Proxy{px("u1", 1, 1, "", "")}, "", false},
		{"spec change pending", gone(ours, "a", ""), []*egressv1.Proxy{px("u1", 2, 1, "x/b", "b")}, "", false},
		{"leftover", gone(ours, "a", "x/a"), []*egressv1.Proxy{px("u1", 2, 2, "x/b", "b")}, ReasonLeftover, true},
		{"the Proxy's own (a reserved address), its Proxy there", gone(ours, "", ""), []*egressv1.Proxy{px("u1", 2, 2, "x/b", "b")}, "", false},
		{"the Proxy's own, its Proxy gone", gone(ours, "", ""), []*egressv1.Proxy{px("u2", 1, 1, "x/b", "b")}, ReasonOrphan, true},
		{"a group's own (its kept address), the group there", gone(group, "", ""), nil, "", false},
		{"a group's own, the group gone", gone(provider.Marks{Managed: true, UID: "g2", Installation: "i"}, "", ""), nil, ReasonOrphan, true},
		{"an instance's, marked with a group's UID, its instance gone", gone(group, "a", "x/a"), nil, ReasonOrphan, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newProxyView(tc.proxies, egressv1.ProxyGroup{ObjectMeta: metav1.ObjectMeta{UID: "g1"}})
			got, collect := classifySecondary(tc.s, v)
			if got != tc.want || collect != tc.collect {
				t.Errorf("classifySecondary = %q, %t; want %q, %t", got, collect, tc.want, tc.collect)
			}
		})
	}
}
