package operator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// envDuration reads a duration from the environment, for the manual run of
// a measurement with the real defaults.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// TestIdleFleetWrites runs the whole operator over 100 Proxies on two
// providers and counts the API writes it makes once everything is Ready
// and nothing changes. CI runs it with the periods scaled down (a window of
// seconds); the figure for the note is taken with the defaults and a
// 10-minute window:
//
//	IDLE_FLEET_WINDOW=10m IDLE_FLEET_DEFAULTS=1 make test-idle-fleet
func TestIdleFleetWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the operator for a while")
	}
	const proxies = 100
	window := envDuration(t, "IDLE_FLEET_WINDOW", 12*time.Second)
	defaults := os.Getenv("IDLE_FLEET_DEFAULTS") != ""

	ns := env.Namespace(t, "idle")
	cfg, counter := testenv.CountingConfig(env.Config)
	o := Options{
		ProvidersConfig: writeConfig(t, "providers:\n"+
			"- {name: idle-a, type: local, local: {bindCIDR: 127.0.120.0/24}}\n"+
			"- {name: idle-b, type: local, local: {bindCIDR: 127.0.121.0/24}}\n"),
		MetricsAddr: "0", ProbeAddr: "0",
		InstallationID:               "idle-fleet",
		LeaderElect:                  os.Getenv("IDLE_FLEET_LEADER_ELECTION") != "",
		LeaderElectionNamespace:      ns,
		Namespaces:                   []string{ns},
		SkipControllerNameValidation: true,
	}
	heartbeat := 4 * time.Second
	if !defaults {
		// Scaled: every periodic loop runs many times within the window.
		o.RunningResync, o.HealthInterval, o.HealthHeartbeat, o.GCInterval = time.Second, 500*time.Millisecond, heartbeat, time.Second
	} else {
		heartbeat = 5 * time.Minute
	}
	runOperator(t, cfg, o)

	for i := 0; i < proxies; i++ {
		px := &egressv1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%03d", i)},
			Spec:       egressv1.ProxySpec{Provider: []string{"idle-a", "idle-b"}[i%2]},
		}
		if err := env.Client.Create(context.Background(), px); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	testenv.EventuallyNil(t, "every Proxy Ready", func() error {
		list := &egressv1.ProxyList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			if meta.IsStatusConditionTrue(list.Items[i].Status.Conditions, egressv1.ConditionReady) {
				ready++
			}
		}
		if ready != proxies {
			return fmt.Errorf("%d of %d Proxies Ready", ready, proxies)
		}
		return nil
	})
	t.Logf("%d Proxies Ready in %s; setup writes %v", proxies, time.Since(start).Round(time.Millisecond), summarize(counter.WritesBy()))

	// The measurement starts once the setup's writes have landed: the
	// first health pass, and no write in flight.
	testenv.EventuallyNil(t, "the setup's writes landed", func() error {
		return setupLanded(counter, "idle-a", "idle-b")
	})
	counter.Reset()
	time.Sleep(window)
	by := counter.WritesBy()
	t.Logf("idle for %s: %d API writes %v", window, counter.Writes(), summarize(by))

	for k, n := range by {
		if strings.Contains(k, "proxies") || strings.Contains(k, "events") {
			t.Errorf("an idle fleet wrote %d× %s", n, k)
		}
	}
	// Health heartbeats: one status write per provider per heartbeat.
	maxHeartbeats := 2 * (int(window/heartbeat) + 1)
	if n := by["PUT providerhealths/status"] + by["PATCH providerhealths/status"]; n > maxHeartbeats {
		t.Errorf("%d ProviderHealth writes in %s; want at most %d (2 providers, heartbeat %s)", n, window, maxHeartbeats, heartbeat)
	}
}

// setupLanded says what is still missing before an idle fleet is idle: a
// Healthy ProviderHealth per provider and no write in flight. (A fleet
// that came up without a failure records no event.)
func setupLanded(counter *testenv.RequestCounter, providers ...string) error {
	ctx := context.Background()
	for _, name := range providers {
		ph := &egressv1.ProviderHealth{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, ph); err != nil {
			return fmt.Errorf("ProviderHealth %s: %w", name, err)
		}
		if !meta.IsStatusConditionTrue(ph.Status.Conditions, egressv1.ConditionHealthy) {
			return fmt.Errorf("ProviderHealth %s not Healthy yet: %+v", name, ph.Status.Conditions)
		}
	}
	if n := counter.InFlightWrites(); n > 0 {
		return fmt.Errorf("%d writes in flight", n)
	}
	return nil
}

func summarize(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// reloadRefused is nil once the reload gauge, read from controller-runtime's
// registry, says the last reload was refused.
func reloadRefused() error {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if mf.GetName() != "egress_proxy_config_last_reload_successful" {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			return fmt.Errorf("%s has %d series, want 1", mf.GetName(), len(mf.GetMetric()))
		}
		if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 0 {
			return fmt.Errorf("%s = %v, want 0", mf.GetName(), v)
		}
		return nil
	}
	return errors.New("no egress_proxy_config_last_reload_successful gauge")
}
