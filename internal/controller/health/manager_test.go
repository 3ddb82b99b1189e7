package health

import (
	"context"
	"errors"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// The loop as main wires it: added to a manager, on the manager's cached
// client. An idle pass then sends no request at all about ProviderHealth,
// reads included: the cache answers them.
func TestInManagerOnCachedClient(t *testing.T) {
	const name = "h-manager"
	cleanup(t, name)
	cfg, counter := testenv.CountingConfig(env.Config)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	e, fp := fakeEntry(name)
	l, fc := newLoop(t, mgr.GetClient(), &providers{entries: []*registry.Entry{e}})
	passes := make(chan struct{}, 10)
	l.passDone = func() { passes <- struct{}{} }
	if err := mgr.Add(l); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	waitPass := func(what string) {
		t.Helper()
		select {
		case <-passes:
		case <-time.After(30 * time.Second): // liveness guard only
			t.Fatalf("%s: no pass", what)
		}
	}

	waitPass("first pass")
	wantCondition(t, name, "True", provider.ReasonHealthy)
	// The passes are seconds apart in production; here the next comes at
	// once, so wait for the cache to hold the status the first pass wrote.
	testenv.EventuallyNil(t, "the cache sees the status", func() error {
		ph := &egressv1.ProviderHealth{}
		if err := mgr.GetClient().Get(ctx, client.ObjectKey{Name: name}, ph); err != nil {
			return err
		}
		if ph.Status.LastCheckTime == nil {
			return errors.New("no lastCheckTime in the cached status yet")
		}
		return nil
	})

	counter.Reset()
	fc.Step(DefaultInterval)
	waitPass("idle pass")
	if n := fp.Calls(provider.OpCheck); n != 2 {
		t.Fatalf("checks = %d, want 2", n)
	}
	for _, r := range counter.Requests() {
		if r.Resource == "providerhealths" {
			t.Errorf("idle pass sent %s %s", r.Method, r.Path)
		}
	}
}
