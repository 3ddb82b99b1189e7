package gc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// Defaults; the package documentation argues for each.
const (
	DefaultInterval = 2 * time.Minute
	DefaultGrace    = 20 * time.Minute
	// DefaultCallTimeout bounds one ListByTag, Delete, ListSecondary or
	// DeleteSecondary, like the reconciler's provider call timeout: a hung
	// backend holds only its own provider's pass.
	DefaultCallTimeout = time.Minute
)

// Providers is what the collector needs of the registry: the configured
// entries, read again at every pass so that a config reload is followed.
type Providers interface {
	Entries() []*registry.Entry
}

// Reason says why an instance is collected; it is the metrics' reason label.
type Reason string

const (
	// ReasonOrphan: the instance's UID is on no Proxy.
	ReasonOrphan Reason = "orphan"
	// ReasonDuplicate: the instance's Proxy records another instance.
	ReasonDuplicate Reason = "duplicate"
	// ReasonLeftover: a secondary resource whose instance is gone and whose
	// Proxy, settled, records neither that instance's name nor its ID.
	ReasonLeftover Reason = "leftover"
)

// Collector deletes the instances, and the secondary resources, no Proxy
// accounts for; the package documentation has the rules. It is a
// manager.Runnable that runs on the leader only. Set the fields before
// Start; zero durations take the defaults.
type Collector struct {
	// Reader reads Proxies; main passes the manager's cached client, so a
	// pass costs the API server nothing.
	Reader client.Reader
	// Providers gives the provider entries to collect on.
	Providers Providers
	// WaitForCacheSync is the manager cache's: Start runs no pass before it
	// returned true, since a cache still filling would show live instances
	// as orphans.
	WaitForCacheSync func(ctx context.Context) bool

	Interval    time.Duration
	Grace       time.Duration
	CallTimeout time.Duration
	// DryRun logs and counts what would be deleted, and deletes nothing.
	DryRun bool
	// TracerProvider makes each pass a span; nil means tracing is off.
	TracerProvider trace.TracerProvider

	// Clock is the real clock unless a test sets a fake one.
	Clock clock.WithTicker
	// Log is ctrl.Log.WithName("gc") unless set.
	Log logr.Logger

	// afterCollect, when set by a test, sees every CollectOnce result that
	// Start's loop produced.
	afterCollect func(map[string]Result)

	once   sync.Once
	mu     sync.Mutex
	states map[string]*providerState
}

var (
	_ manager.Runnable               = (*Collector)(nil)
	_ manager.LeaderElectionRunnable = (*Collector)(nil)
)

// Result is what one pass did on one provider.
type Result struct {
	Provider string
	// Skipped: the previous pass on this provider was still running, so
	// this one did not start.
	Skipped bool
	// Err ended the pass before anything was collected: the listing failed
	// (counted in list_errors_total) or the Proxies could not be read.
	Err error
	// Listed is how many instances ListByTag returned.
	Listed int
	// Young is how many instances would be collected but are not older
	// than the grace period yet.
	Young int
	// Actions are the instances deleted, or reported in dry run, this pass.
	Actions []Action

	// SecondaryErr: the provider's ListSecondary failed (counted in
	// secondary_list_errors_total); no secondary resource was collected
	// this pass, instances were.
	SecondaryErr error
	// SecondariesListed is how many secondary resources ListSecondary
	// returned; zero for a provider without them.
	SecondariesListed int
	// SecondariesYoung is how many would be collected but are not older
	// than the grace period yet.
	SecondariesYoung int
	// SecondaryActions are the secondary resources deleted, or reported in
	// dry run, this pass; their Kind and Instance are set.
	SecondaryActions []Action
}

// Action is one instance, or secondary resource, the pass collected.
type Action struct {
	ID  string
	UID string
	// Kind and Instance are a secondary resource's (provider.Secondary);
	// empty for an instance.
	Kind     string
	Instance string
	Reason   Reason
	Age      time.Duration
	// FirstSeen: the instance has no CreatedAt and Age counts from the
	// first pass that listed it.
	FirstSeen bool
	// DryRun: nothing was deleted.
	DryRun bool
	// Again: an earlier pass already deleted (or reported) it and the
	// backend still lists it; it is not logged or counted again.
	Again bool
	// Err is the Delete's error; the next pass tries again.
	Err error
}

// instKey identifies an instance, or a secondary resource, in the
// collector's memory. The UID is part of it because some backends reuse IDs
// (Proxmox VMIDs): a new instance under an old ID must not inherit the old
// one's first-seen time.
type instKey struct{ id, uid string }

// providerState is what the collector remembers about one provider: one
// book for its instances, one for its secondary resources (their IDs are
// the provider's and may look alike). Its maps are touched only by the
// pass that set running, so they need no lock.
type providerState struct {
	running     bool
	instances   ageBook
	secondaries ageBook
}

// ageBook is the memory of one kind of listed thing: when those without a
// CreatedAt were first listed, and which were already deleted (or reported
// in dry run) while they stay listed.
type ageBook struct {
	firstSeen map[instKey]time.Time
	handled   map[instKey]bool
}

func newProviderState() *providerState {
	return &providerState{
		instances:   ageBook{firstSeen: map[instKey]time.Time{}, handled: map[instKey]bool{}},
		secondaries: ageBook{firstSeen: map[instKey]time.Time{}, handled: map[instKey]bool{}},
	}
}

// NeedLeaderElection makes the collector run on the leader only: two
// replicas collecting at once would race each other's Deletes.
func (c *Collector) NeedLeaderElection() bool { return true }

// CheckGrace refuses a grace period that does not exceed the provider call
// timeout: a Proxy records its instance only when Create returns, so a
// shorter grace could collect an instance that is still being created.
func CheckGrace(grace, callTimeout time.Duration) error {
	if grace <= callTimeout {
		return fmt.Errorf("the garbage collector's grace period (%s) must be longer than the provider call timeout (%s): a Proxy records its instance only when Create returns, and a shorter grace could delete an instance still being created", grace, callTimeout)
	}
	return nil
}

func (c *Collector) defaults() {
	c.once.Do(func() {
		if c.Interval <= 0 {
			c.Interval = DefaultInterval
		}
		if c.Grace <= 0 {
			c.Grace = DefaultGrace
		}
		if c.CallTimeout <= 0 {
			c.CallTimeout = DefaultCallTimeout
		}
		if c.Clock == nil {
			c.Clock = clock.RealClock{}
		}
		if c.Log.GetSink() == nil {
			c.Log = ctrl.Log.WithName("gc")
		}
		c.states = map[string]*providerState{}
	})
}

// Start waits for the cache, runs a first pass at once, then one every
// Interval until ctx ends; it returns once every pass it started has ended.
func (c *Collector) Start(ctx context.Context) error {
	if c.Reader == nil || c.Providers == nil || c.WaitForCacheSync == nil {
		return errors.New("gc: Collector needs Reader, Providers and WaitForCacheSync")
	}
	c.defaults()
	c.Log.Info("garbage collector waiting for the cache to sync")
	if !c.WaitForCacheSync(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("gc: the Proxy cache did not sync")
	}
	c.Log.Info("garbage collector started", "interval", c.Interval, "grace", c.Grace, "dryRun", c.DryRun)

	var wg sync.WaitGroup
	defer wg.Wait()
	// Each CollectOnce runs in its own goroutine so that a provider whose
	// pass hangs only skips its own next passes: the ticks go on for the
	// others.
	collect := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := c.CollectOnce(ctx)
			if c.afterCollect != nil {
				c.afterCollect(res)
			}
		}()
	}
	collect()
	ticker := c.Clock.NewTicker(c.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			collect()
		}
	}
}

// CollectOnce runs one pass on every configured provider, concurrently, and
// returns what each did, by provider name. A provider whose previous pass
// still runs is skipped.
func (c *Collector) CollectOnce(ctx context.Context) map[string]Result {
	c.defaults()
	entries := c.Providers.Entries()

	type job struct {
		e  *registry.Entry
		st *providerState
	}
	results := make(map[string]Result, len(entries))
	var jobs []job
	c.mu.Lock()
	live := make(map[string]bool, len(entries))
	for _, e := range entries {
		live[e.Name] = true
		st := c.states[e.Name]
		if st == nil {
			st = newProviderState()
			c.states[e.Name] = st
			touchMetrics(e.Name, e.Secondary != nil)
		}
		if st.running {
			results[e.Name] = Result{Provider: e.Name, Skipped: true}
			continue
		}
		st.running = true
		jobs = append(jobs, job{e, st})
	}
	for name, st := range c.states {
		if !live[name] && !st.running {
			delete(c.states, name)
			forgetMetrics(name)
		}
	}
	c.mu.Unlock()

	var (
		wg  sync.WaitGroup
		rmu sync.Mutex
	)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := c.pass(ctx, j.e, j.st)
			c.mu.Lock()
			j.st.running = false
			c.mu.Unlock()
			rmu.Lock()
			results[j.e.Name] = res
			rmu.Unlock()
		}()
	}
	wg.Wait()
	return results
}

// pass collects on one provider.
func (c *Collector) pass(ctx context.Context, e *registry.Entry, st *providerState) (res Result) {
	res.Provider = e.Name
	log := c.Log.WithValues("provider", e.Name)
	ctx = logr.NewContext(ctx, log)
	// The pass is the parent of its provider.list and provider.delete spans.
	ctx, span := telemetry.StartSpan(ctx, c.TracerProvider, "gc.collect",
		telemetry.AttrProviderName.String(e.Name), telemetry.AttrProviderType.String(e.Type))
	defer span.End()
	runsTotal.WithLabelValues(e.Name).Inc()
	defer func() {
		// A provider bug must not take the other providers' passes, or the
		// reconciler, down with it.
		if r := recover(); r != nil {
			res.Err = fmt.Errorf("gc pass panicked: %v", r)
			log.Error(res.Err, "garbage-collection pass failed")
		}
	}()

	// The backend first, the cache second: see the package documentation.
	listCtx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	insts, err := e.Provider.ListByTag(listCtx)
	cancel()
	if err != nil {
		listErrorsTotal.WithLabelValues(e.Name).Inc()
		log.Error(err, "garbage collection: listing instances failed; nothing collected on this provider this pass")
		res.Err = err
		return res
	}
	// Secondary resources are listed after the instances and before the
	// cache as well; a failure here still lets the instances be collected.
	var secs []provider.Secondary
	if e.Secondary != nil {
		listCtx, cancel := context.WithTimeout(ctx, c.CallTimeout)
		secs, err = e.Secondary.ListSecondary(listCtx)
		cancel()
		if err != nil {
			secondaryListErrorsTotal.WithLabelValues(e.Name).Inc()
			log.Error(err, "garbage collection: listing secondary resources failed; none collected on this provider this pass")
			res.SecondaryErr, secs = err, nil
		}
	}
	proxies := &egressv1.ProxyList{}
	// Read only, so the cache's objects are not copied.
	if err := c.Reader.List(ctx, proxies, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "garbage collection: reading Proxies failed; nothing collected on this provider this pass")
		res.Err = err
		return res
	}
	items := make([]*egressv1.Proxy, len(proxies.Items))
	for i := range proxies.Items {
		items[i] = &proxies.Items[i]
	}
	// A ProxyGroup owns what its provider keeps for the group itself (a
	// gcp group's egress address), marked with the group's UID.
	groups := &egressv1.ProxyGroupList{}
	if err := c.Reader.List(ctx, groups, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "garbage collection: reading ProxyGroups failed; nothing collected on this provider this pass")
		res.Err = err
		return res
	}
	view := newProxyView(items, groups.Items...)

	now := c.Clock.Now()
	keys := make([]instKey, len(insts))
	undated := make([]bool, len(insts))
	for i, inst := range insts {
		keys[i], undated[i] = instKey{inst.ID, inst.UID}, inst.CreatedAt.IsZero()
	}
	st.instances.observe(keys, undated, now)
	res.Listed = len(insts)
	for _, inst := range insts {
		if ctx.Err() != nil {
			break
		}
		reason, collect := classify(inst, view.byUID, view.ids)
		if !collect {
			continue
		}
		k := instKey{inst.ID, inst.UID}
		age, firstSeen := st.instances.age(k, inst.CreatedAt, now)
		if age <= c.Grace {
			res.Young++
			continue
		}
		act := Action{ID: inst.ID, UID: inst.UID, Reason: reason, Age: age, FirstSeen: firstSeen, DryRun: c.DryRun, Again: st.instances.handled[k]}
		c.act(ctx, log, e, &act)
		if act.Err == nil {
			st.instances.handled[k] = true
		}
		res.Actions = append(res.Actions, act)
	}
	if e.Secondary != nil && res.SecondaryErr == nil {
		c.collectSecondaries(ctx, log, e, st, secs, view, now, &res)
	}
	return res
}

// collectSecondaries applies the secondary rules to one pass's listing.
func (c *Collector) collectSecondaries(ctx context.Context, log logr.Logger, e *registry.Entry, st *providerState,
	secs []provider.Secondary, view proxyView, now time.Time, res *Result) {
	keys := make([]instKey, len(secs))
	undated := make([]bool, len(secs))
	for i, s := range secs {
		keys[i], undated[i] = instKey{s.ID, s.Marks.UID}, s.CreatedAt.IsZero()
	}
	st.secondaries.observe(keys, undated, now)
	res.SecondariesListed = len(secs)
	for _, s := range secs {
		if ctx.Err() != nil {
			break
		}
		reason, collect := classifySecondary(s, view)
		if !collect {
			continue
		}
		k := instKey{s.ID, s.Marks.UID}
		age, firstSeen := st.secondaries.age(k, s.CreatedAt, now)
		if age <= c.Grace {
			res.SecondariesYoung++
			continue
		}
		act := Action{ID: s.ID, UID: s.Marks.UID, Kind: s.Kind, Instance: s.Instance, Reason: reason, Age: age,
			FirstSeen: firstSeen, DryRun: c.DryRun, Again: st.secondaries.handled[k]}
		c.actSecondary(ctx, log, e, &act)
		if act.Err == nil {
			st.secondaries.handled[k] = true
		}
		res.SecondaryActions = append(res.SecondaryActions, act)
	}
}

// act deletes one instance, or reports it in dry run, and logs and counts
// it the first time.
func (c *Collector) act(ctx context.Context, log logr.Logger, e *registry.Entry, a *Action) {
	kv := []any{"id", a.ID, "uid", a.UID, "reason", string(a.Reason), "age", a.Age.Round(time.Second).String(), "ageSince", a.since()}
	if a.DryRun {
		if !a.Again {
			log.Info("garbage collection (dry run): would delete instance", kv...)
			wouldDeleteTotal.WithLabelValues(e.Name, string(a.Reason)).Inc()
		}
		return
	}
	delCtx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	err := e.Provider.Delete(delCtx, a.ID)
	cancel()
	if err != nil && !errors.Is(err, provider.ErrNotFound) {
		a.Err = err
		deleteErrorsTotal.WithLabelValues(e.Name).Inc()
		log.Error(err, "garbage collection: deleting instance failed; trying again next pass", kv...)
		return
	}
	if a.Again {
		log.V(1).Info("garbage collection: instance still listed after its deletion; deleted again", kv...)
		return
	}
	log.Info("garbage collection: deleted instance", kv...)
	deletedTotal.WithLabelValues(e.Name, string(a.Reason)).Inc()
}

// actSecondary deletes one secondary resource through the provider, or
// reports it in dry run, and logs and counts it the first time.
func (c *Collector) actSecondary(ctx context.Context, log logr.Logger, e *registry.Entry, a *Action) {
	kv := []any{"kind", a.Kind, "id", a.ID, "uid", a.UID, "instance", a.Instance, "reason", string(a.Reason),
		"age", a.Age.Round(time.Second).String(), "ageSince", a.since()}
	if a.DryRun {
		if !a.Again {
			log.Info("garbage collection (dry run): would delete secondary resource", kv...)
			secondariesWouldDeleteTotal.WithLabelValues(e.Name, a.Kind, string(a.Reason)).Inc()
		}
		return
	}
	delCtx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	err := e.Secondary.DeleteSecondary(delCtx, a.ID)
	cancel()
	if err != nil && !errors.Is(err, provider.ErrNotFound) {
		a.Err = err
		secondaryDeleteErrorsTotal.WithLabelValues(e.Name, a.Kind).Inc()
		log.Error(err, "garbage collection: deleting secondary resource failed; trying again next pass", kv...)
		return
	}
	if a.Again {
		log.V(1).Info("garbage collection: secondary resource still listed after its deletion; deleted again", kv...)
		return
	}
	log.Info("garbage collection: deleted secondary resource", kv...)
	secondariesDeletedTotal.WithLabelValues(e.Name, a.Kind, string(a.Reason)).Inc()
}

// since is the ageSince log value: what the age counts from.
func (a *Action) since() string {
	if a.FirstSeen {
		return "firstSeen"
	}
	return "created"
}

// observe records when the listed things without a CreatedAt (undated)
// were first listed and forgets every one the backend no longer lists.
func (b ageBook) observe(keys []instKey, undated []bool, now time.Time) {
	listed := make(map[instKey]bool, len(keys))
	for i, k := range keys {
		listed[k] = true
		if _, ok := b.firstSeen[k]; !ok && undated[i] {
			b.firstSeen[k] = now
		}
	}
	for k := range b.firstSeen {
		if !listed[k] {
			delete(b.firstSeen, k)
		}
	}
	for k := range b.handled {
		if !listed[k] {
			delete(b.handled, k)
		}
	}
}

// age is how old k is: since createdAt, or since first sight when that is
// zero (firstSeen true then).
func (b ageBook) age(k instKey, createdAt, now time.Time) (age time.Duration, firstSeen bool) {
	if createdAt.IsZero() {
		return now.Sub(b.firstSeen[k]), true
	}
	return now.Sub(createdAt), false
}

// classify says whether an instance is to be collected (once old enough),
// and why. It is the whole rule set; the package documentation explains it.
// recorded holds every ID any Proxy's status records
// (ProxyStatus.RecordedProviderIDs).
func classify(inst provider.Instance, byUID map[types.UID]*egressv1.Proxy, recorded map[string]bool) (Reason, bool) {
	switch {
	case inst.ID == "":
		return "", false // nothing to delete by; a provider bug
	case recorded[inst.ID]:
		// Matched by ID, whatever the UID mark says: the contract adopts
		// an instance with an empty mark, and a Proxy's status is the
		// record of what it uses.
		return "", false
	}
	px, ok := byUID[types.UID(inst.UID)]
	if !ok || inst.UID == "" {
		return ReasonOrphan, true
	}
	st := px.Status
	switch {
	case st.ProviderID == "":
		return "", false // a Create in flight: its result is not recorded yet
	case px.Generation != st.ObservedGeneration:
		return "", false // a spec change not yet acted on may be creating a replacement
	}
	return ReasonDuplicate, true
}

// proxyView is what one pass knows of the Proxies: each by UID, and every
// instance ID and name any of them records.
type proxyView struct {
	byUID map[types.UID]*egressv1.Proxy
	// ids holds ProxyStatus.RecordedProviderIDs of every Proxy.
	ids map[string]bool
	// names holds every status.instanceName and status.retiringInstanceName.
	names map[string]bool
	// groups holds every ProxyGroup's UID.
	groups map[types.UID]bool
}

func newProxyView(proxies []*egressv1.Proxy, groups ...egressv1.ProxyGroup) proxyView {
	v := proxyView{byUID: make(map[types.UID]*egressv1.Proxy, len(proxies)), ids: map[string]bool{}, names: map[string]bool{},
		groups: make(map[types.UID]bool, len(groups))}
	for i := range groups {
		v.groups[groups[i].UID] = true
	}
	for _, px := range proxies {
		v.byUID[px.UID] = px
		for _, id := range px.Status.RecordedProviderIDs() {
			v.ids[id] = true
		}
		for _, n := range []string{px.Status.InstanceName, px.Status.RetiringInstanceName} {
			if n != "" {
				v.names[n] = true
			}
		}
	}
	return v
}

// classifySecondary says whether a secondary resource is to be collected
// (once old enough), and why: the secondary half of the rule set, which the
// package documentation explains. It keeps a resource unless the provider
// says its instance is gone and no Proxy accounts for it.
func classifySecondary(s provider.Secondary, v proxyView) (Reason, bool) {
	switch {
	case s.ID == "":
		return "", false // nothing to delete by; a provider bug
	case !s.Marks.Managed || s.Marks.Installation == "":
		return "", false // not ours by its own marks; a provider bug
	case !s.InstanceGone:
		return "", false // its instance exists, or the provider cannot tell
	case s.Instance != "" && v.names[s.Instance], s.InstanceID != "" && v.ids[s.InstanceID]:
		// A Proxy records its instance, as current, retiring or superseded:
		// a lost instance is created again under its name and uses what
		// is left of it; the reconciler deletes the rest itself.
		return "", false
	}
	own := s.Instance == "" && s.InstanceID == ""
	if own && s.Marks.UID != "" && v.groups[types.UID(s.Marks.UID)] {
		// A ProxyGroup's own (its kept egress address): it lives as long
		// as the group.
		return "", false
	}
	px, ok := v.byUID[types.UID(s.Marks.UID)]
	if !ok || s.Marks.UID == "" {
		return ReasonOrphan, true
	}
	switch {
	case own:
		// The Proxy's own, not an instance's (an address reserved for
		// it): it lives as long as its Proxy.
		return "", false
	case px.Status.ProviderID == "":
		return "", false // a Create in flight may be making its instance
	case px.Generation != px.Status.ObservedGeneration:
		return "", false // a spec change not yet acted on may be making it
	}
	return ReasonLeftover, true
}
