package health

import (
	"context"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/local"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// The object appears on the first pass with everything the check reported,
// labelled as ours, and the gauge says healthy.
func TestProviderHealthAppears(t *testing.T) {
	const name = "h-appears"
	cleanup(t, name)
	e, fp := fakeEntry(name)
	fp.SetCheckResult(provider.CheckResult{
		Healthy: true, Reason: provider.ReasonHealthy, Message: "listed 3 zones",
		Target: "project p", Address: "https://compute.example", Details: map[string]string{"zones": "3"},
	})
	l, _ := newLoop(t, nil, &providers{entries: []*registry.Entry{e}})

	pass(t, l)

	ph, c := wantCondition(t, name, metav1.ConditionTrue, provider.ReasonHealthy)
	if ph.Labels[ManagedByLabel] != ManagedBy {
		t.Errorf("labels = %v, want %s=%s", ph.Labels, ManagedByLabel, ManagedBy)
	}
	st := ph.Status
	if st.Type != "fake" || st.Target != "project p" || st.Address != "https://compute.example" ||
		!maps.Equal(st.Details, map[string]string{"zones": "3"}) {
		t.Errorf("status = %+v", st)
	}
	if c.Message != "listed 3 zones" {
		t.Errorf("message = %q", c.Message)
	}
	wantTime(t, "lastCheckTime", st.LastCheckTime, epoch)
	wantTime(t, "lastTransitionTime", &c.LastTransitionTime, epoch)
	wantGauge(t, name, "fake", 1)
}

// The status follows the backend: healthy, unhealthy for several passes
// with changing reasons and messages, healthy again. lastTransitionTime
// moves on the two flips only; the gauge follows.
func TestHealthFollowsBackend(t *testing.T) {
	const name = "h-follows"
	cleanup(t, name)
	e, fp := fakeEntry(name)
	l, fc := newLoop(t, nil, &providers{entries: []*registry.Entry{e}})

	pass(t, l)
	_, c := wantCondition(t, name, metav1.ConditionTrue, provider.ReasonHealthy)
	wantTime(t, "lastTransitionTime", &c.LastTransitionTime, epoch)
	wantGauge(t, name, "fake", 1)

	down := epoch.Add(DefaultInterval)
	fc.SetTime(down)
	fp.SetCheckResult(provider.CheckResult{Reason: provider.ReasonUnreachable, Message: "connection refused", Target: "fake"})
	pass(t, l)
	ph, c := wantCondition(t, name, metav1.ConditionFalse, provider.ReasonUnreachable)
	if c.Message != "connection refused" {
		t.Errorf("message = %q", c.Message)
	}
	wantTime(t, "lastTransitionTime after the flip to False", &c.LastTransitionTime, down)
	wantTime(t, "lastCheckTime", ph.Status.LastCheckTime, down)
	wantGauge(t, name, "fake", 0)

	// Still unhealthy, for another reason: written, no transition.
	fc.Step(DefaultInterval)
	fp.SetCheckResult(provider.CheckResult{Reason: provider.ReasonAPIError, Message: "503 from the API", Target: "fake"})
	pass(t, l)
	ph, c = wantCondition(t, name, metav1.ConditionFalse, provider.ReasonAPIError)
	if c.Message != "503 from the API" {
		t.Errorf("message = %q", c.Message)
	}
	wantTime(t, "lastTransitionTime while still False", &c.LastTransitionTime, down)
	wantTime(t, "lastCheckTime", ph.Status.LastCheckTime, fc.Now())
	wantGauge(t, name, "fake", 0)

	fc.Step(DefaultInterval)
	up := fc.Now()
	fp.SetCheckResult(fake.DefaultCheckResult())
	pass(t, l)
	_, c = wantCondition(t, name, metav1.ConditionTrue, provider.ReasonHealthy)
	wantTime(t, "lastTransitionTime after the flip back", &c.LastTransitionTime, up)
	wantGauge(t, name, "fake", 1)
}

// The real local provider: its Checker reports its listeners; closing it
// (its backend gone) makes it Unreachable; the provider rebuilt for the
// same entry (a config reload) is healthy again.
func TestLocalProvider(t *testing.T) {
	const name = "h-local"
	cleanup(t, name)
	newLocal := func() *registry.Entry {
		p, err := local.New(name, local.Config{BindCIDR: "127.0.110.0/24"}, provider.Options{InstallationID: "install-health"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return &registry.Entry{Name: name, Type: local.Type, Provider: p, Checker: p}
	}
	e := newLocal()
	ps := &providers{entries: []*registry.Entry{e}}
	l, fc := newLoop(t, nil, ps)
	if _, err := e.Provider.Create(context.Background(), provider.CreateRequest{
		Name: provider.InstanceName("ns", "web", "uid-web", "s"), Namespace: "ns", ProxyName: "web",
		UID: "uid-web", Port: testenv.FreePort(t),
	}); err != nil {
		t.Fatal(err)
	}

	pass(t, l)
	ph, c := wantCondition(t, name, metav1.ConditionTrue, provider.ReasonHealthy)
	if ph.Status.Type != local.Type || ph.Status.Target != "listeners" || ph.Status.Address != "127.0.110.0/24" {
		t.Errorf("status = %+v", ph.Status)
	}
	if ph.Status.Details["instances"] != "1" || ph.Status.Details["bindCIDR"] != "127.0.110.0/24" {
		t.Errorf("details = %v, want 1 instance on 127.0.110.0/24", ph.Status.Details)
	}
	if !strings.Contains(c.Message, "listeners accept") {
		t.Errorf("message = %q", c.Message)
	}
	wantGauge(t, name, local.Type, 1)

	fc.Step(DefaultInterval)
	down := fc.Now()
	if err := e.Provider.(*local.Provider).Close(); err != nil {
		t.Fatalf("closing the local provider: %v", err)
	}
	pass(t, l)
	_, c = wantCondition(t, name, metav1.ConditionFalse, provider.ReasonUnreachable)
	wantTime(t, "lastTransitionTime", &c.LastTransitionTime, down)
	wantGauge(t, name, local.Type, 0)

	fc.Step(DefaultInterval)
	up := fc.Now()
	ps.set(newLocal())
	pass(t, l)
	ph, c = wantCondition(t, name, metav1.ConditionTrue, provider.ReasonHealthy)
	wantTime(t, "lastTransitionTime", &c.LastTransitionTime, up)
	if ph.Status.Details["instances"] != "0" {
		t.Errorf("details = %v, want no instances on the rebuilt provider", ph.Status.Details)
	}
	wantGauge(t, name, local.Type, 1)
}

// A provider that leaves the config loses its object and its gauge series;
// the others keep theirs, and an object without our label is left alone.
func TestRemovedProviderDeleted(t *testing.T) {
	const stays, leaves, foreign = "h-rm-stays", "h-rm-leaves", "h-rm-foreign"
	cleanup(t, stays, leaves, foreign)
	if err := env.Client.Create(context.Background(), &egressv1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: foreign}}); err != nil {
		t.Fatal(err)
	}
	a, _ := fakeEntry(stays)
	b, _ := fakeEntry(leaves)
	ps := &providers{entries: []*registry.Entry{a, b}}
	l, fc := newLoop(t, nil, ps)
	pass(t, l)
	mustGet(t, leaves)
	wantGauge(t, leaves, "fake", 1)

	ps.set(a)
	fc.Step(DefaultInterval)
	pass(t, l)
	if ph := get(t, leaves); ph != nil {
		t.Errorf("ProviderHealth %s still exists after its provider left: %+v", leaves, ph.Status)
	}
	wantNoGauge(t, leaves)
	mustGet(t, stays)
	wantGauge(t, stays, "fake", 1)
	if get(t, foreign) == nil {
		t.Errorf("unlabelled ProviderHealth %s was deleted", foreign)
	}
}

// An unlabelled object named after a configured provider is adopted: it
// gets the label (so it goes with its provider) and the status.
func TestAdoptsUnlabelledObject(t *testing.T) {
	const name = "h-adopt"
	cleanup(t, name)
	if err := env.Client.Create(context.Background(), &egressv1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{"team": "net"},
	}}); err != nil {
		t.Fatal(err)
	}
	e, _ := fakeEntry(name)
	ps := &providers{entries: []*registry.Entry{e}}
	l, _ := newLoop(t, nil, ps)
	pass(t, l)
	ph, _ := wantCondition(t, name, metav1.ConditionTrue, provider.ReasonHealthy)
	if ph.Labels[ManagedByLabel] != ManagedBy || ph.Labels["team"] != "net" {
		t.Errorf("labels = %v, want ours added to the others", ph.Labels)
	}
	ps.set()
	pass(t, l)
	if get(t, name) != nil {
		t.Errorf("adopted %s not deleted with its provider", name)
	}
}

// A Check blocked past the timeout is Timeout, whether it honours its ctx
// (the fake) or ignores it.
func TestCheckTimeout(t *testing.T) {
	const honours, ignores = "h-timeout-ctx", "h-timeout-stuck"
	cleanup(t, honours, ignores)
	fe, fp := fakeEntry(honours)
	release := fp.Block(provider.OpCheck)
	t.Cleanup(release)

	stuck := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-stuck:
		default:
			close(stuck)
		}
	})
	var blocking atomic.Bool
	se, sc := funcEntry(ignores, func(context.Context) provider.CheckResult {
		if blocking.Load() {
			<-stuck // ignores ctx
		}
		return provider.CheckResult{Healthy: true, Reason: provider.ReasonHealthy, Target: "hosts", Address: "10.0.0.1"}
	})
	ps := &providers{entries: []*registry.Entry{se}}
	l, fc := newLoop(t, nil, ps)
	l.Timeout = 100 * time.Millisecond

	// One healthy pass first, so the timeout can be seen to keep the target.
	pass(t, l)
	wantCondition(t, ignores, metav1.ConditionTrue, provider.ReasonHealthy)
	blocking.Store(true)
	ps.set(fe, se)
	fc.Step(DefaultInterval)
	pass(t, l)

	_, c := wantCondition(t, honours, metav1.ConditionFalse, provider.ReasonTimeout)
	t.Logf("honouring ctx: %s", c.Message)
	wantGauge(t, honours, "fake", 0)
	ph, c := wantCondition(t, ignores, metav1.ConditionFalse, provider.ReasonTimeout)
	if !strings.Contains(c.Message, "did not return within 100ms") {
		t.Errorf("message = %q", c.Message)
	}
	if ph.Status.Target != "hosts" || ph.Status.Address != "10.0.0.1" {
		t.Errorf("target/address = %q/%q, want those of the last check kept", ph.Status.Target, ph.Status.Address)
	}
	wantGauge(t, ignores, "func", 0)

	// The stuck Check still runs: the next pass does not pile another on.
	fc.Step(DefaultInterval)
	pass(t, l)
	_, c = wantCondition(t, ignores, metav1.ConditionFalse, provider.ReasonTimeout)
	if n := sc.calls.Load(); n != 2 {
		t.Errorf("Check called %d times, want 2 (no new call while one is stuck)", n)
	}
	if !strings.Contains(c.Message, "previous check has not returned") {
		t.Errorf("message = %q", c.Message)
	}

	// Once it returns, the provider is checked again.
	release()
	close(stuck)
	testenv.Eventually(t, "the stuck Check returned", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.running[se]
	})
	fc.Step(DefaultInterval)
	pass(t, l)
	wantCondition(t, honours, metav1.ConditionTrue, provider.ReasonHealthy)
	wantCondition(t, ignores, metav1.ConditionTrue, provider.ReasonHealthy)
	wantGauge(t, ignores, "func", 1)
}

// A panicking Check is reported, without the panic's text, and the loop
// carries on with the other providers.
func TestCheckPanics(t *testing.T) {
	const bad, good = "h-panic", "h-panic-neighbour"
	cleanup(t, bad, good)
	be, _ := funcEntry(bad, func(context.Context) provider.CheckResult { panic("token=hunter2") })
	ge, _ := fakeEntry(good)
	l, _ := newLoop(t, nil, &providers{entries: []*registry.Entry{be, ge}})
	pass(t, l)
	_, c := wantCondition(t, bad, metav1.ConditionFalse, ReasonCheckPanicked)
	if strings.Contains(c.Message, "hunter2") {
		t.Errorf("message %q carries the panic value", c.Message)
	}
	wantGauge(t, bad, "func", 0)
	wantCondition(t, good, metav1.ConditionTrue, provider.ReasonHealthy)
}

// A provider without a Checker is Unknown/CheckNotSupported, with no gauge
// series; one that loses its Checker on reload loses its series.
func TestNoChecker(t *testing.T) {
	const name = "h-nochecker"
	cleanup(t, name)
	e, _ := fakeEntry(name)
	ps := &providers{entries: []*registry.Entry{e}}
	l, fc := newLoop(t, nil, ps)
	pass(t, l)
	wantGauge(t, name, "fake", 1)

	ps.set(&registry.Entry{Name: name, Type: "kvm"})
	fc.Step(DefaultInterval)
	pass(t, l)
	ph, c := wantCondition(t, name, metav1.ConditionUnknown, ReasonCheckNotSupported)
	if ph.Status.Type != "kvm" || ph.Status.Target != "" || ph.Status.Details != nil {
		t.Errorf("status = %+v, want type kvm and nothing checked", ph.Status)
	}
	if !strings.Contains(c.Message, "kvm") {
		t.Errorf("message = %q", c.Message)
	}
	wantNoGauge(t, name)
}

// An idle fleet writes nothing until the heartbeat is due, then exactly one
// status write per provider. Ten minutes at the defaults with two
// providers: 4 writes after the first pass's.
func TestIdlePassesWriteOnlyHeartbeats(t *testing.T) {
	const a, b = "h-idle-a", "h-idle-b"
	cleanup(t, a, b)
	cfg, counter := testenv.CountingConfig(env.Config)
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ea, _ := fakeEntry(a)
	eb, _ := fakeEntry(b)
	l, fc := newLoop(t, c, &providers{entries: []*registry.Entry{ea, eb}})

	pass(t, l)
	if got, want := counter.WritesBy(), map[string]int{"POST providerhealths": 2, "PATCH providerhealths/status": 2}; !maps.Equal(got, want) {
		t.Fatalf("first pass wrote %v, want %v", got, want)
	}
	counter.Reset()

	passesPerHeartbeat := int(DefaultHeartbeat / DefaultInterval)
	total := 0
	for i := 1; i <= 2*passesPerHeartbeat; i++ { // 10 minutes
		fc.Step(DefaultInterval)
		pass(t, l)
		writes := writesOf(counter.Requests())
		counter.Reset()
		total += len(writes)
		if i%passesPerHeartbeat != 0 {
			if len(writes) != 0 {
				t.Fatalf("idle pass %d (at +%s) wrote %v", i, fc.Since(epoch), writes)
			}
			continue
		}
		if len(writes) != 2 || writes[0].Key() != "PATCH providerhealths/status" || writes[1].Key() != "PATCH providerhealths/status" ||
			writes[0].Name == writes[1].Name {
			t.Fatalf("heartbeat pass %d wrote %v, want one status write for each of %s and %s", i, writes, a, b)
		}
		for _, n := range []string{a, b} {
			ph, _ := mustGet(t, n)
			wantTime(t, n+" lastCheckTime", ph.Status.LastCheckTime, fc.Now())
		}
	}
	t.Logf("idle fleet of 2 providers, 10 minutes at the defaults: %d API writes", total)
	if total != 4 {
		t.Errorf("%d writes in 10 idle minutes, want 4", total)
	}

	// A change is written at once, for its provider only, and the next pass
	// is quiet again.
	ea.Checker.(interface{ SetCheckResult(provider.CheckResult) }).SetCheckResult(provider.CheckResult{
		Healthy: true, Reason: provider.ReasonHealthy, Message: "now with details", Details: map[string]string{"v": "2"},
	})
	fc.Step(DefaultInterval)
	pass(t, l)
	if w := writesOf(counter.Requests()); len(w) != 1 || w[0].Name != a {
		t.Errorf("a change wrote %v, want one write of %s", w, a)
	}
	counter.Reset()
	fc.Step(DefaultInterval)
	pass(t, l)
	if w := writesOf(counter.Requests()); len(w) != 0 {
		t.Errorf("the pass after a change wrote %v", w)
	}
}

// Results the API server would store differently from how they came
// (invalid UTF-8, an empty details map, a malformed reason, a huge message)
// must not make every pass look like a change.
func TestOddResultsStayQuiet(t *testing.T) {
	const name = "h-odd"
	cleanup(t, name)
	cfg, counter := testenv.CountingConfig(env.Config)
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := funcEntry(name, func(context.Context) provider.CheckResult {
		return provider.CheckResult{
			Reason: "not a reason!", Message: "bad \xff\xfe bytes " + strings.Repeat("é", 20000),
			Target: "t\xff", Details: map[string]string{},
		}
	})
	l, fc := newLoop(t, c, &providers{entries: []*registry.Entry{e}})
	pass(t, l)
	_, cond := wantCondition(t, name, metav1.ConditionFalse, ReasonUnhealthy)
	if len(cond.Message) > maxMessage {
		t.Errorf("message of %d bytes stored", len(cond.Message))
	}
	counter.Reset()
	fc.Step(DefaultInterval)
	pass(t, l)
	if w := writesOf(counter.Requests()); len(w) != 0 {
		t.Errorf("an unchanged odd result was written again: %v", w)
	}
}

// Start makes a pass at once, then one per Interval on the clock, and one
// on Trigger; it stops with its ctx.
func TestStartRunsPasses(t *testing.T) {
	const name = "h-start"
	cleanup(t, name)
	e, fp := fakeEntry(name)
	l, fc := newLoop(t, nil, &providers{entries: []*registry.Entry{e}})
	passes := make(chan struct{}, 10)
	l.passDone = func() { passes <- struct{}{} }
	if !l.NeedLeaderElection() {
		t.Error("NeedLeaderElection() = false")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Start(ctx) }()
	waitPass := func(what string) {
		t.Helper()
		select {
		case <-passes:
		case <-time.After(30 * time.Second): // liveness guard only
			t.Fatalf("%s: no pass", what)
		}
	}

	waitPass("first pass at start")
	if n := fp.Calls(provider.OpCheck); n != 1 {
		t.Fatalf("checks after start = %d, want 1", n)
	}
	mustGet(t, name)

	fc.Step(DefaultInterval)
	waitPass("pass after one interval")
	if n := fp.Calls(provider.OpCheck); n != 2 {
		t.Fatalf("checks after one interval = %d, want 2", n)
	}

	l.Trigger()
	waitPass("pass on Trigger")
	if n := fp.Calls(provider.OpCheck); n != 3 {
		t.Fatalf("checks after Trigger = %d, want 3", n)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return after its ctx ended")
	}
}

func TestDefaultsAndValidation(t *testing.T) {
	l := &Loop{Client: env.Client, Providers: &providers{}}
	if l.interval() != DefaultInterval || l.timeout() != DefaultTimeout || l.heartbeat() != DefaultHeartbeat {
		t.Errorf("zero values give %s/%s/%s", l.interval(), l.timeout(), l.heartbeat())
	}
	if DefaultTimeout >= DefaultInterval || DefaultHeartbeat < DefaultInterval {
		t.Error("defaults must keep Timeout < Interval <= Heartbeat")
	}
	for _, bad := range []*Loop{
		{Providers: &providers{}},
		{Client: env.Client},
		{Client: env.Client, Providers: &providers{}, Heartbeat: -time.Second},
	} {
		if err := bad.Start(context.Background()); err == nil {
			t.Errorf("Start of %+v succeeded", bad)
		}
	}
}

func TestFromResult(t *testing.T) {
	tests := []struct {
		in         provider.CheckResult
		status     metav1.ConditionStatus
		reason     string
		maxMessage int
	}{
		{provider.CheckResult{Healthy: true}, metav1.ConditionTrue, provider.ReasonHealthy, 0},
		{provider.CheckResult{}, metav1.ConditionFalse, ReasonUnhealthy, 0},
		{provider.CheckResult{Reason: "Quota:Low_1"}, metav1.ConditionFalse, "Quota:Low_1", 0},
		{provider.CheckResult{Reason: "Bad Reason"}, metav1.ConditionFalse, ReasonUnhealthy, 0},
		{provider.CheckResult{Reason: provider.ReasonDegraded, Message: strings.Repeat("€", maxMessage)}, metav1.ConditionFalse, provider.ReasonDegraded, maxMessage},
	}
	for _, tt := range tests {
		o := fromResult(tt.in)
		if o.status != tt.status || o.reason != tt.reason {
			t.Errorf("fromResult(%q) = %s/%s, want %s/%s", tt.in.Reason, o.status, o.reason, tt.status, tt.reason)
		}
		if len(o.message) > tt.maxMessage || !strings.HasSuffix(o.message, "…") && tt.maxMessage > 0 {
			t.Errorf("message of %d bytes, want at most %d ending in …", len(o.message), tt.maxMessage)
		}
	}
	if got := validUTF8("a\xff\xfeb"); got != "a\uFFFD\uFFFDb" {
		t.Errorf("validUTF8 = %q", got)
	}
}

// writesOf keeps the write requests.
func writesOf(reqs []testenv.Request) []testenv.Request {
	var out []testenv.Request
	for _, r := range reqs {
		if r.IsWrite() {
			out = append(out, r)
		}
	}
	return out
}
