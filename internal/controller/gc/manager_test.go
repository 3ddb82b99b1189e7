package gc

import (
	"context"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestUnderManager wires the collector as main does: the manager's cached
// client as the reader, its cache's WaitForCacheSync, mgr.Add. The cache
// is restricted to the test's namespace, as the shared API server holds
// other tests' Proxies.
func TestUnderManager(t *testing.T) {
	w := newWorld(t, "inst-mgr", nil)
	p := w.provider("mgr-p", nil)
	px := w.proxy("web", "mgr-p")
	live := w.instance(p, px, "s1")
	w.record(px, live, "")
	orphan := w.plant(p, "proxy-gone-0123456789", "uid-gone")
	w.clock.Step(grace + time.Second)

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{w.ns: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.c.Reader = mgr.GetClient()
	w.c.WaitForCacheSync = mgr.GetCache().WaitForCacheSync
	passes := make(chan map[string]Result, 10)
	w.c.afterCollect = func(r map[string]Result) { passes <- r }
	if !w.c.NeedLeaderElection() {
		t.Error("the collector must run on the leader only")
	}
	if err := mgr.Add(w.c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := recv(t, done, "the manager to stop"); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	r := recv(t, passes, "the first pass")["mgr-p"]
	if r.Err != nil || r.Listed != 2 || len(r.Actions) != 1 || r.Actions[0].ID != orphan {
		t.Fatalf("first pass: %+v; want the orphan collected and the live instance kept", r)
	}
	if exists(p, orphan) || !exists(p, live) {
		t.Errorf("orphan exists %t (want false), live exists %t (want true)", exists(p, orphan), exists(p, live))
	}
}
