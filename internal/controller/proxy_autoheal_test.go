package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

func autoheal(after time.Duration, max int32) config.Autoheal {
	return config.Autoheal{ReplaceUnhealthyAfter: &metav1.Duration{Duration: after}, MaxConcurrent: &max}
}

// healClock is the reconciler's clock, moved by the test; it starts at
// the real time, since the Ready condition's transition times are real.
type healClock struct{ now time.Time }

func (c *healClock) advance(d time.Duration) { c.now = c.now.Add(d) }

func newHealing(t *testing.T, a config.Autoheal) (*direct, *fake.Provider, *healClock) {
	entry, fp := fakeEntry("pool")
	entry.SetAutoheal(a)
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	clock := &healClock{now: time.Now()}
	d.r.progress.now = func() time.Time { return clock.now }
	return d, fp, clock
}

// stopAnswering makes the serving signal of px's instance say its proxy
// answered, then stopped.
func stopAnswering(t *testing.T, fp *fake.Provider, px *egressv1.Proxy) {
	t.Helper()
	if !fp.Backend().SetServing(px.Status.InstanceName, fake.Serving{Serving: provider.ServingNotAnswering,
		Detail: "stopped answering", LastAnswered: time.Now().Add(-time.Second)}) {
		t.Fatalf("no instance %s", px.Status.InstanceName)
	}
}

// TestAutoheal_ReplacesAProxyThatStoppedAnswering: not before
// replaceUnhealthyAfter, then a new instance (a Warning event, status.
// autoheals 1), Ready again on it, the old one deleted.
func TestAutoheal_ReplacesAProxyThatStoppedAnswering(t *testing.T) {
	d, fp, clock := newHealing(t, autoheal(5*time.Minute, 1))
	d.create(newProxy("web", "pool"))
	first := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))

	stopAnswering(t, fp, first)
	d.reconcile("web")
	if px := d.get("web"); readyReason(px) != "False/"+egressv1.ReasonProxyNotAnswering || px.Status.Autoheals != 0 {
		t.Fatalf("after the stop: Ready %s, autoheals %d", readyReason(px), px.Status.Autoheals)
	}
	clock.advance(4 * time.Minute)
	d.reconcile("web")
	if px := d.get("web"); px.Status.Autoheals != 0 || px.Status.InstanceName != first.Status.InstanceName {
		t.Fatalf("autohealed before replaceUnhealthyAfter: %+v", px.Status)
	}
	d.events()
	clock.advance(2 * time.Minute)
	d.reconcile("web")
	if px := d.get("web"); px.Status.Autoheals != 1 {
		t.Fatalf("not autohealed after replaceUnhealthyAfter: %+v", px.Status)
	}
	if evs := d.events(); !containsAny(evs, "Warning "+ReasonAutohealing) {
		t.Errorf("no %s event: %q", ReasonAutohealing, evs)
	}
	healed := d.reconcileUntil("web", 5, "Ready on a new instance", func(px *egressv1.Proxy) bool {
		return readyReason(px) == "True/Running" && px.Status.InstanceName != first.Status.InstanceName
	})
	d.reconcileUntil("web", 5, "the old instance deleted", func(*egressv1.Proxy) bool {
		_, ok := fp.Backend().Lookup(first.Status.InstanceName)
		return !ok
	})
	if healed.Status.Autoheals != 1 {
		t.Errorf("autoheals %d after one autoheal", healed.Status.Autoheals)
	}
}

// TestAutoheal_OnceForAReplacementThatHasNotAnsweredYet: the new
// instance comes up running before its proxy answers (a guest whose
// reporter has not reported yet, a Pod not ready yet); it is starting,
// not down since its predecessor went down, so it is not autohealed again
// (the flake of the libvirt end-to-end test: autoheals 2).
func TestAutoheal_OnceForAReplacementThatHasNotAnsweredYet(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lastAnswered: the signal says when the proxy last answered
		// (a guest's reporter) or not (a Pod's readiness).
		lastAnswered bool
	}{{"guest report", true}, {"pod readiness", false}} {
		t.Run(tc.name, func(t *testing.T) {
			d, fp, clock := newHealing(t, autoheal(time.Minute, 1))
			fp.SetProvisioningGets(0) // the replacement runs as soon as it is made
			d.create(newProxy("web", "pool"))
			first := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
			down := fake.Serving{Serving: provider.ServingNotAnswering, Detail: "stopped answering"}
			if tc.lastAnswered {
				down.LastAnswered = time.Now().Add(-time.Second)
			}
			fp.Backend().SetServing(first.Status.InstanceName, down)
			d.reconcile("web")
			if px := d.get("web"); readyReason(px) != "False/"+egressv1.ReasonProxyNotAnswering {
				t.Fatalf("after the stop: Ready %s", readyReason(px))
			}
			fp.Backend().SetCreatedServing(fake.Serving{Serving: provider.ServingNotAnswering, Detail: "no report yet"})
			clock.advance(2 * time.Minute)
			d.reconcile("web")
			if px := d.get("web"); px.Status.Autoheals != 1 {
				t.Fatalf("not autohealed: %+v", px.Status)
			}
			// The pass that makes the replacement, and those after it.
			for i := 0; i < 3; i++ {
				d.reconcile("web")
				px := d.get("web")
				if px.Status.Autoheals != 1 || readyReason(px) != "False/"+egressv1.ReasonProxyStarting {
					t.Fatalf("pass %d after the autoheal: autoheals %d, Ready %s (%s), instance %s (was %s)", i+1,
						px.Status.Autoheals, readyReason(px), conditionMessage(px), px.Status.InstanceName, first.Status.InstanceName)
				}
			}
			healed := d.get("web")
			fp.Backend().SetServing(healed.Status.InstanceName, fake.Serving{Serving: provider.ServingAnswering, LastAnswered: time.Now()})
			healed = d.reconcileUntil("web", 3, "Ready on the replacement", hasReason("True/Running"))
			if healed.Status.Autoheals != 1 || healed.Status.InstanceName == first.Status.InstanceName {
				t.Fatalf("Ready with autoheals %d on instance %s (was %s)", healed.Status.Autoheals, healed.Status.InstanceName, first.Status.InstanceName)
			}
		})
	}
}

// TestAutoheal_NotForAReplacementThatAnsweredOnlyWhileStarting: the
// replacement's guest answered while cloud-init ran, then cloud-init's last
// step restarted Squid and a report caught it down with cloud-init done
// (the reporter asked the proxy before it asked cloud-init). The Proxy
// never showed that instance serving: it is starting, not stopped
// answering since its last answer, so it is not autohealed again (the
// libvirt end-to-end test's autoheals 2 of 2026-12-03, 1066 s).
func TestAutoheal_NotForAReplacementThatAnsweredOnlyWhileStarting(t *testing.T) {
	d, fp, clock := newHealing(t, autoheal(time.Minute, 1))
	fp.SetProvisioningGets(0)
	d.create(newProxy("web", "pool"))
	first := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	stopAnswering(t, fp, first)
	d.reconcile("web")
	fp.Backend().SetCreatedServing(fake.Serving{Serving: provider.ServingNotAnswering, Detail: "not answering yet (cloud-init: running)"})
	clock.advance(2 * time.Minute)
	d.reconcile("web")
	if px := d.get("web"); px.Status.Autoheals != 1 {
		t.Fatalf("not autohealed: %+v", px.Status)
	}
	healed := d.reconcileUntil("web", 3, "the replacement starting", func(px *egressv1.Proxy) bool {
		return px.Status.InstanceName != first.Status.InstanceName && readyReason(px) == "False/"+egressv1.ReasonProxyStarting
	})
	// The report after cloud-init's restart of Squid: done, not answering,
	// last answered while cloud-init ran, longer ago than
	// replaceUnhealthyAfter by the operator's clock.
	fp.Backend().SetServing(healed.Status.InstanceName, fake.Serving{Serving: provider.ServingNotAnswering,
		Detail: "it last answered at an earlier report (cloud-init: done)", LastAnswered: clock.now.Add(-90 * time.Second)})
	for i := 0; i < 3; i++ {
		clock.advance(30 * time.Second)
		d.reconcile("web")
		px := d.get("web")
		if px.Status.Autoheals != 1 || px.Status.InstanceName != healed.Status.InstanceName || readyReason(px) != "False/"+egressv1.ReasonProxyStarting {
			t.Fatalf("pass %d on the replacement that answered only while starting: autoheals %d, instance %s (was %s), Ready %s (%s)", i+1,
				px.Status.Autoheals, px.Status.InstanceName, healed.Status.InstanceName, readyReason(px), conditionMessage(px))
		}
	}
	fp.Backend().SetServing(healed.Status.InstanceName, fake.Serving{Serving: provider.ServingAnswering, LastAnswered: clock.now})
	if px := d.reconcileUntil("web", 3, "Ready on the replacement", hasReason("True/Running")); px.Status.Autoheals != 1 {
		t.Fatalf("Ready with autoheals %d", px.Status.Autoheals)
	}
}

// TestAutoheal_BoundedPerEntry: with maxConcurrent 1, a second Proxy that
// stopped answering waits until the first serves again.
func TestAutoheal_BoundedPerEntry(t *testing.T) {
	d, fp, clock := newHealing(t, autoheal(time.Minute, 1))
	for _, n := range []string{"a", "b"} {
		d.create(newProxy(n, "pool"))
		px := d.reconcileUntil(n, 3, "Ready", hasReason("True/Running"))
		fp.SetProvisioningGets(0)
		stopAnswering(t, fp, px)
		d.reconcile(n)
	}
	clock.advance(2 * time.Minute)
	fp.SetProvisioningGets(3) // a's new instance takes a few polls
	d.reconcile("a")
	d.reconcile("b")
	if a, b := d.get("a"), d.get("b"); a.Status.Autoheals != 1 || b.Status.Autoheals != 0 {
		t.Fatalf("autoheals a %d, b %d: want 1 and 0 (one at a time)", a.Status.Autoheals, b.Status.Autoheals)
	}
	d.reconcileUntil("a", 8, "a Ready again", hasReason("True/Running"))
	d.reconcile("b")
	if b := d.get("b"); b.Status.Autoheals != 1 {
		t.Fatalf("b not autohealed once a served again: %+v", b.Status)
	}
}

// TestAutoheal_NotForACloudInitFailureNorWhenOff: a guest whose setup
// failed is a latch, and replaceUnhealthyAfter 0 turns autoheal off.
func TestAutoheal_NotForACloudInitFailureNorWhenOff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a       config.Autoheal
		serving fake.Serving
		reason  string
	}{
		{name: "cloud-init failed", a: autoheal(time.Minute, 1),
			serving: fake.Serving{Serving: provider.ServingNotAnswering, SetupError: "('scripts-user', RuntimeError('x'))"},
			reason:  egressv1.ReasonCloudInitFailed},
		{name: "off", a: autoheal(0, 1),
			serving: fake.Serving{Serving: provider.ServingNotAnswering, LastAnswered: time.Now()},
			reason:  egressv1.ReasonProxyNotAnswering},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, fp, clock := newHealing(t, tc.a)
			d.create(newProxy("web", "pool"))
			first := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
			fp.Backend().SetServing(first.Status.InstanceName, tc.serving)
			for i := 0; i < 3; i++ {
				clock.advance(time.Hour)
				d.reconcile("web")
			}
			px := d.get("web")
			if readyReason(px) != "False/"+tc.reason || px.Status.Autoheals != 0 || px.Status.InstanceName != first.Status.InstanceName {
				t.Errorf("Ready %s, autoheals %d, instance %s (was %s)", readyReason(px), px.Status.Autoheals, px.Status.InstanceName, first.Status.InstanceName)
			}
		})
	}
}
