package health

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// Defaults; the package doc says why.
const (
	DefaultInterval  = 30 * time.Second
	DefaultTimeout   = 10 * time.Second
	DefaultHeartbeat = 5 * time.Minute
)

// ManagedByLabel marks the ProviderHealth objects the loop owns; only those
// are deleted when their provider leaves the config.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "egress-proxies-operator"
)

// Providers is where the loop reads the configured providers each pass;
// *registry.Registry is one. Entries must return the same *Entry for an
// unchanged provider: a Check still running is tracked by it.
type Providers interface {
	Entries() []*registry.Entry
}

// RBAC markers stand apart from the type: controller-gen reads them as
// package markers only outside a declaration's doc comment.

// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=providerhealths,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=providerhealths/status,verbs=get;update;patch

// Loop checks every configured provider each Interval and publishes the
// results as ProviderHealth objects. The zero values of Interval, Timeout,
// Heartbeat and Clock mean the defaults.
type Loop struct {
	// Client reads and writes ProviderHealth objects. The manager's cached
	// client makes the unchanged passes free of API requests.
	Client    client.Client
	Providers Providers
	// Interval is the time between passes.
	Interval time.Duration
	// Timeout bounds each Check.
	Timeout time.Duration
	// Heartbeat is the longest lastCheckTime goes unwritten when nothing
	// else changed.
	Heartbeat time.Duration
	// Clock paces the passes and stamps the times written; tests use a
	// fake one.
	Clock clock.WithTicker
	// TracerProvider makes each check a span; nil means tracing is off.
	TracerProvider trace.TracerProvider
	// Installation labels the objects this loop writes; it prunes only
	// those (installation.go). Empty: the objects are not labelled with it.
	Installation string

	// pass serialises passes: the ticker's, Trigger's and a test's
	// CheckOnce. It also guards gauged.
	pass sync.Mutex
	// gauged is the type each provider's gauge series carries, so series
	// of providers that left can be dropped.
	gauged map[string]string

	mu      sync.Mutex
	running map[*registry.Entry]bool // Checks that have not returned

	triggerOnce sync.Once
	trigger     chan struct{}

	// passDone, when set, runs after each pass Start makes; tests wait on
	// it instead of on time.
	passDone func()
}

var (
	_ manager.Runnable               = (*Loop)(nil)
	_ manager.LeaderElectionRunnable = (*Loop)(nil)
)

// NeedLeaderElection is true: two replicas writing the same objects would
// undo each other's change detection.
func (l *Loop) NeedLeaderElection() bool { return true }

// Trigger asks for a pass now, for example after the providers config
// changed, instead of at the next tick. It never blocks; triggers that
// arrive while one is pending are merged.
func (l *Loop) Trigger() {
	select {
	case l.triggerCh() <- struct{}{}:
	default:
	}
}

func (l *Loop) triggerCh() chan struct{} {
	l.triggerOnce.Do(func() { l.trigger = make(chan struct{}, 1) })
	return l.trigger
}

// Start runs a first pass at once, then one per Interval, until ctx ends.
// A pass that fails is logged and the next one tries again.
func (l *Loop) Start(ctx context.Context) error {
	if err := l.Validate(); err != nil {
		return err
	}
	logger := log.FromContext(ctx).WithName("provider-health")
	ctx = log.IntoContext(ctx, logger)
	logger.Info("starting", "interval", l.interval(), "timeout", l.timeout(), "heartbeat", l.heartbeat())
	// The ticker starts before the first pass so a slow first pass does
	// not delay the second.
	t := l.clock().NewTicker(l.interval())
	defer t.Stop()
	for {
		if err := l.CheckOnce(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "health pass")
		}
		if l.passDone != nil {
			l.passDone()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-l.triggerCh():
		}
	}
}

// Validate reports a loop that cannot run: no Client or Providers, or a
// negative duration. main can call it to refuse bad flags before the
// manager starts; Start and CheckOnce call it too.
func (l *Loop) Validate() error {
	if l.Client == nil || l.Providers == nil {
		return errors.New("health loop: Client and Providers are required")
	}
	if l.Interval < 0 || l.Timeout < 0 || l.Heartbeat < 0 {
		return fmt.Errorf("health loop: negative interval %s, timeout %s or heartbeat %s", l.Interval, l.Timeout, l.Heartbeat)
	}
	return nil
}

func (l *Loop) interval() time.Duration  { return orDefault(l.Interval, DefaultInterval) }
func (l *Loop) timeout() time.Duration   { return orDefault(l.Timeout, DefaultTimeout) }
func (l *Loop) heartbeat() time.Duration { return orDefault(l.Heartbeat, DefaultHeartbeat) }

func (l *Loop) clock() clock.WithTicker {
	if l.Clock == nil {
		return clock.RealClock{}
	}
	return l.Clock
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// CheckOnce makes one pass: every provider checked concurrently, each
// result written when it changed or the heartbeat is due, gauges set, and
// the ProviderHealth objects of providers that left the config deleted.
// The error joins the API failures; a failed check is a result, not an
// error.
func (l *Loop) CheckOnce(ctx context.Context) error {
	if err := l.Validate(); err != nil {
		return err
	}
	l.pass.Lock()
	defer l.pass.Unlock()
	// Bounds a pass stuck on the API server; checks have their own Timeout.
	ctx, cancel := context.WithTimeout(ctx, l.interval()+l.timeout())
	defer cancel()

	entries := l.Providers.Entries()
	outs := make([]outcome, len(entries))
	errs := make([]error, len(entries)+1)
	var wg sync.WaitGroup
	for i, e := range entries {
		wg.Go(func() {
			now := l.clock().Now()
			outs[i] = l.check(ctx, e)
			if ctx.Err() != nil {
				// Shutting down, or the pass ran out of time: the outcome
				// says so, not the backend. Write nothing.
				errs[i] = ctx.Err()
				return
			}
			errs[i] = l.write(ctx, e, outs[i], now)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	l.setGauges(entries, outs)
	errs[len(entries)] = l.prune(ctx, entries)
	return errors.Join(errs...)
}

// write brings the provider's ProviderHealth up to date with o, writing
// only when something besides lastCheckTime changed or the heartbeat is
// due.
func (l *Loop) write(ctx context.Context, e *registry.Entry, o outcome, now time.Time) error {
	ph := &egressv1.ProviderHealth{}
	created := false
	err := l.Client.Get(ctx, client.ObjectKey{Name: e.Name}, ph)
	switch {
	case apierrors.IsNotFound(err):
		ph = &egressv1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{
			Name: e.Name, Labels: l.labels(),
		}}
		// The API server drops a status sent on create: it takes a second
		// write through /status.
		if err := l.Client.Create(ctx, ph); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil // our cache lags our own create; the next pass writes
			}
			return fmt.Errorf("creating ProviderHealth %s: %w", e.Name, err)
		}
		created = true
	case err != nil:
		return fmt.Errorf("reading ProviderHealth %s: %w", e.Name, err)
	case l.foreign(ph):
		return fmt.Errorf("ProviderHealth %s is written by installation %s: providers of two installations in one cluster need distinct names", e.Name, ph.Labels[InstallationLabel])
	case !l.owned(ph):
		// Named after our provider but unlabelled (made by hand, or by an
		// older operator): adopt it, or it would outlive its provider.
		before := ph.DeepCopy()
		if ph.Labels == nil {
			ph.Labels = map[string]string{}
		}
		maps.Copy(ph.Labels, l.labels())
		if err := l.Client.Patch(ctx, ph, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("labelling ProviderHealth %s: %w", e.Name, err)
		}
	}

	base := ph.DeepCopy()
	old := &base.Status
	apply(&ph.Status, e.Type, o, now)
	changed := !sameStatus(old, &ph.Status)
	due := old.LastCheckTime == nil || now.Sub(old.LastCheckTime.Time) >= l.heartbeat()
	if !created && !changed && !due {
		return nil
	}
	ph.Status.LastCheckTime = &metav1.Time{Time: now}
	// A merge patch, not an update: the cached copy may lag our own last
	// write, and the patch carries only what this pass decided.
	if err := l.Client.Status().Patch(ctx, ph, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("writing ProviderHealth %s status: %w", e.Name, err)
	}
	if was := meta.FindStatusCondition(old.Conditions, egressv1.ConditionHealthy); was == nil ||
		was.Status != o.status || was.Reason != o.reason {
		log.FromContext(ctx).Info("provider health changed", "provider", e.Name, "type", e.Type,
			"healthy", o.status, "reason", o.reason, "message", o.message)
	}
	return nil
}

// apply writes o into st. Only what the CheckResult held reaches the
// status, plus the entry's type and the loop's own timeout, panic and
// not-supported verdicts.
func apply(st *egressv1.ProviderHealthStatus, typ string, o outcome, now time.Time) {
	st.Type = typ
	if !o.keepTarget {
		st.Target, st.Address = o.target, o.address
	}
	st.Details = o.details
	// SetStatusCondition keeps lastTransitionTime unless the status flips,
	// and needs ours so the fake clock governs it.
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: egressv1.ConditionHealthy, Status: o.status, Reason: o.reason, Message: o.message,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// sameStatus compares everything but lastCheckTime.
func sameStatus(a, b *egressv1.ProviderHealthStatus) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	a.LastCheckTime, b.LastCheckTime = nil, nil
	// An empty map and no map serialise alike.
	if len(a.Details) == 0 {
		a.Details = nil
	}
	if len(b.Details) == 0 {
		b.Details = nil
	}
	return equality.Semantic.DeepEqual(a, b)
}

// setGauges runs after the checks, in one goroutine, so gauged needs no
// lock of its own.
func (l *Loop) setGauges(entries []*registry.Entry, outs []outcome) {
	seen := make(map[string]bool, len(entries))
	next := make(map[string]string, len(entries))
	for i, e := range entries {
		seen[e.Name] = true
		if !outs[i].checked {
			dropGauge(e.Name)
			continue
		}
		setGauge(e.Name, e.Type, l.gauged[e.Name], outs[i].healthy())
		next[e.Name] = e.Type
	}
	for name := range l.gauged {
		if !seen[name] {
			dropGauge(name)
		}
	}
	l.gauged = next
}

// prune deletes the loop's ProviderHealth objects whose provider left the
// config. Objects without the label are not ours to delete.
func (l *Loop) prune(ctx context.Context, entries []*registry.Entry) error {
	configured := make(map[string]bool, len(entries))
	for _, e := range entries {
		configured[e.Name] = true
	}
	list := &egressv1.ProviderHealthList{}
	if err := l.Client.List(ctx, list, client.MatchingLabels(l.labels())); err != nil {
		return fmt.Errorf("listing ProviderHealth: %w", err)
	}
	var errs []error
	for i := range list.Items {
		ph := &list.Items[i]
		if configured[ph.Name] {
			continue
		}
		// The UID precondition spares an object recreated since the list.
		err := l.Client.Delete(ctx, ph, client.Preconditions{UID: &ph.UID})
		if client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting ProviderHealth %s: %w", ph.Name, err))
			continue
		}
		log.FromContext(ctx).Info("provider left the config; ProviderHealth deleted", "provider", ph.Name)
	}
	return errors.Join(errs...)
}
