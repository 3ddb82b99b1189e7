package controller

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// Autohealing: a Proxy whose proxy answered and then stopped
// (ProxyNotAnswering) for longer than its entry's replaceUnhealthyAfter
// gets a new instance, as a spec change would give it one: the pass bumps
// status.autoheals, which is in the instance's shape, so the next pass
// derives a new name and replaces the instance. A cloud-init failure is
// never autohealed (CloudInitFailed is not ProxyNotAnswering), so a
// user-data that fails is not replaced in a loop.

// ReasonAutohealing is the Warning event of an autoheal.
const ReasonAutohealing = "Autohealing"

// dueAutoheal says whether the instance inst of px is due for an autoheal
// now, given the Ready condition this pass left, and how long its proxy
// has been down; it is pure.
func dueAutoheal(px *egressv1.Proxy, inst provider.Instance, a config.Autoheal, now time.Time) (due bool, down time.Duration) {
	after := a.After()
	if after == 0 || px.Status.RetiringProviderID != "" || inst.ID != px.Status.ProviderID ||
		inst.State != provider.StateRunning || inst.Serving != provider.ServingNotAnswering || inst.SetupError != "" {
		return false, 0
	}
	c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != egressv1.ReasonProxyNotAnswering {
		return false, 0
	}
	// Down since Ready turned False, or since the guest last saw it
	// answer when that is later (a guest clock never makes it earlier).
	since := c.LastTransitionTime.Time
	if inst.LastAnswered.After(since) {
		since = inst.LastAnswered
	}
	down = now.Sub(since)
	return down >= after, down
}

// autoheal bumps status.autoheals when px is due and its entry has a free
// slot, and says so with a Warning event; the caller then requeues at
// once (the next pass replaces the instance).
func (r *ProxyReconciler) autoheal(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, inst provider.Instance) bool {
	a := entry.Autoheal()
	due, down := dueAutoheal(px, inst, a, r.progress.clock())
	if !due {
		return false
	}
	if !r.heals.acquire(entry.Name, key(px), a.Max()) {
		logr.FromContextOrDiscard(ctx).Info("autoheal held back: the entry's maxConcurrent Proxies are being autohealed",
			"instance", inst.ID, "maxConcurrent", a.Max())
		return false
	}
	px.Status.Autoheals++
	r.event(px, corev1.EventTypeWarning, ReasonAutohealing, "Replace",
		"the proxy on instance %s has not answered for %s (replaceUnhealthyAfter %s): replacing the instance (autoheal %d)",
		inst.ID, down.Round(time.Second), a.After(), px.Status.Autoheals)
	return true
}

// healLimiter bounds, per entry, the Proxies being autohealed: from the
// autoheal until the Proxy serves again or is deleted. It lives in the
// operator's memory: after a restart (or a leader change) an entry may
// start maxConcurrent more.
type healLimiter struct {
	mu      sync.Mutex
	healing map[string]map[types.NamespacedName]struct{}
}

// acquire takes a slot of entry for px (px already holding one keeps it).
func (l *healLimiter) acquire(entry string, px types.NamespacedName, max int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.healing == nil {
		l.healing = map[string]map[types.NamespacedName]struct{}{}
	}
	held := l.healing[entry]
	if _, ok := held[px]; ok {
		return true
	}
	if len(held) >= max {
		return false
	}
	if held == nil {
		held = map[types.NamespacedName]struct{}{}
		l.healing[entry] = held
	}
	held[px] = struct{}{}
	return true
}

// release frees px's slot, whatever its entry.
func (l *healLimiter) release(px types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for entry, held := range l.healing {
		delete(held, px)
		if len(held) == 0 {
			delete(l.healing, entry)
		}
	}
}
