package drills

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// unreachable is what every call of a backend that cannot be reached
// fails with: Transient, as a refused connection is.
var unreachable = provider.Errorf(provider.ErrTransient, "dial tcp 127.0.0.1:8006: connect: connection refused")

// TestDrillBackendOutage: the backend is unreachable for DRILL_OUTAGE
// (every call fails Transient, the health check says Unreachable) under N
// serving Proxies, while a few more are created and a few deleted.
// ProviderHealth says Unreachable within one health interval; no Proxy is
// released and no instance deleted; the serving Proxies stay Ready on their
// instances; the garbage collector, run every 5 s with a grace of 15 s
// (far shorter than the outage, so it would delete if it were wrong),
// deletes nothing, during the outage or after it. Once the backend is back,
// everything converges: the new Proxies Ready, the deleted ones gone with
// their instances, the others on the very instances they had.
//
//	DRILLS=1 DRILL_PROXIES=200 DRILL_OUTAGE=5m go test ./test/drills -run Outage -v
func TestDrillBackendOutage(t *testing.T) {
	long(t)
	n := envInt(t, "DRILL_PROXIES", 50)
	outage := envDuration(t, "DRILL_OUTAGE", 30*time.Second)
	const extra, removed = 10, 5

	f := newFleet(t, "drill-outage")
	// Serving Proxies read their instance every few seconds, so the
	// outage meets the reconciler's Gets too, not only the collector.
	f.opts.RunningResync = 3 * time.Second
	f.start()
	p := f.provider()

	serving := f.createProxies("px", n)
	waitWithin(t, 10*time.Minute, "every Proxy Ready", func() error { return f.allReady(n) })
	testenv.EventuallyNil(t, "one instance per Proxy", f.accounted)
	instancesBefore := f.instances()
	idsBefore := map[string]string{}
	items, err := f.list()
	if err != nil {
		t.Fatal(err)
	}
	for _, px := range items {
		idsBefore[px.Name] = px.Status.ProviderID
	}
	gcDeleted := func() float64 {
		return counter(t, "egress_proxy_gc_instances_deleted_total", f.name) +
			counter(t, "egress_proxy_gc_secondaries_deleted_total", f.name)
	}
	gcErrorsBefore := counter(t, "egress_proxy_gc_list_errors_total", f.name)

	// The outage.
	callsBefore := callsOf(p)
	for _, op := range dataOps {
		p.SetError(op, unreachable)
	}
	p.SetCheckResult(provider.CheckResult{Healthy: false, Reason: provider.ReasonUnreachable,
		Message: unreachable.Error(), Target: "fake", Address: "127.0.0.1:8006"})
	began := time.Now()
	testenv.EventuallyNil(t, "ProviderHealth Unreachable", func() error {
		if r, err := healthReason(f.name); err != nil || r != provider.ReasonUnreachable {
			return fmt.Errorf("reason %q (%v)", r, err)
		}
		return nil
	})
	noticed := time.Since(began)
	f.createProxies("new", extra)
	for _, name := range serving[:removed] {
		if err := env.Client.Delete(context.Background(), f.proxy(name)); err != nil {
			t.Fatal(err)
		}
	}
	// The fault's duration: nothing to await but time.
	time.Sleep(time.Until(began.Add(outage)))

	// At the end of the outage nothing may be lost.
	items, err = f.list()
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != n+extra {
		t.Errorf("%d Proxies at the end of the outage, want %d: a Proxy was released while its backend was unreachable", len(items), n+extra)
	}
	for _, px := range items {
		want, had := idsBefore[px.Name]
		switch {
		case !had:
			continue // created during the outage
		case px.Status.ProviderID != want:
			t.Errorf("Proxy %s records %q at the end of the outage, %q before it", px.Name, px.Status.ProviderID, want)
		case px.DeletionTimestamp.IsZero() && !isReady(&px):
			t.Errorf("serving Proxy %s lost Ready in the outage: %+v", px.Name, meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady))
		}
	}
	if got := f.instances(); len(got) != len(instancesBefore) {
		t.Errorf("%d instances at the end of the outage, %d before it", len(got), len(instancesBefore))
	}
	if r, _ := healthReason(f.name); r != provider.ReasonUnreachable {
		t.Errorf("ProviderHealth reason %q at the end of the outage, want %s", r, provider.ReasonUnreachable)
	}
	gcErrors := counter(t, "egress_proxy_gc_list_errors_total", f.name) - gcErrorsBefore
	if gcErrors == 0 {
		t.Error("the collector never tried to list during the outage")
	}
	duringCalls := callsOf(p).minus(callsBefore)

	// The backend comes back.
	p.Reset()
	back := time.Now()
	waitWithin(t, 10*time.Minute, "every Proxy Ready and the deleted ones gone after the outage", func() error {
		if err := f.allReady(n - removed + extra); err != nil {
			return err
		}
		return f.accounted()
	})
	converged := time.Since(back)
	// Two collector passes past the recovery, with every instance older
	// than the grace: a wrong collector deletes now.
	runs := counter(t, "egress_proxy_gc_runs_total", f.name)
	testenv.EventuallyNil(t, "two collector passes after the outage", func() error {
		if got := counter(t, "egress_proxy_gc_runs_total", f.name) - runs; got < 3 {
			return fmt.Errorf("%v passes", got)
		}
		return nil
	})
	if err := f.accounted(); err != nil {
		t.Errorf("after the collector's passes: %v", err)
	}
	after := f.instances()
	for _, name := range serving[removed:] {
		inst := mustName(idsBefore[name])
		a, okA := after[inst]
		b := instancesBefore[inst]
		if !okA || !a.CreatedAt.Equal(b.CreatedAt) {
			t.Errorf("Proxy %s's instance %s was replaced or deleted (before created %v, now %v, present %v)", name, inst, b.CreatedAt, a.CreatedAt, okA)
		}
	}
	for _, name := range serving[:removed] {
		px := f.proxy(name)
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(px), px); err == nil {
			t.Errorf("Proxy %s, deleted during the outage, is still there", name)
		}
	}
	if d := gcDeleted(); d != 0 {
		t.Errorf("the collector deleted %v instances or resources", d)
	}

	figure(t, "outage.proxies", n)
	figure(t, "outage.duration", outage)
	figure(t, "outage.health_interval", f.opts.HealthInterval)
	figure(t, "outage.time_to_unreachable", noticed)
	figure(t, "outage.gc_interval", f.opts.GCInterval)
	figure(t, "outage.gc_grace", f.opts.GCGrace)
	figure(t, "outage.gc_failed_listings", gcErrors)
	figure(t, "outage.gc_deleted", gcDeleted())
	figure(t, "outage.calls_during_outage", duringCalls)
	figure(t, "outage.proxies_created_during", extra)
	figure(t, "outage.proxies_deleted_during", removed)
	figure(t, "outage.time_to_converge_after", converged)
	figure(t, "outage.instances_replaced", 0)
	if noticed > f.opts.HealthInterval+f.opts.HealthTimeout {
		t.Errorf("ProviderHealth said Unreachable %s after the outage began; the health interval is %s (and a check may take %s)", noticed, f.opts.HealthInterval, f.opts.HealthTimeout)
	}
}
