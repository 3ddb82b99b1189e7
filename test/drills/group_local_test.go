package drills

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/operator"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/local"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/clientloop"
)

// TestGroupFailoverLocal is the group failover drill on the local provider
// (issue 24): the operator as main assembles it, with the running resync
// at its default (2 minutes), a ProxyGroup of two members (listeners in
// the operator's process), and a client that follows the group's
// status.endpoint (read every 20 ms) asking an origin on loopback every
// 100 ms. The holder's listener is stopped behind the provider's back, as
// a failed listener stops; the endpoint must move to the other member
// (bound: 30 s, far below the running resync that would find it without
// the provider's InstanceWatcher), and the group must come back to two
// ready members. Figures: the longest gap in answers, the asks lost, the
// time to the endpoint's move and to two ready members. Seconds long: it
// runs in make test too.
func TestGroupFailoverLocal(t *testing.T) {
	ctx := context.Background()
	const entry = "grouplocal"
	ns := env.Namespace(t, entry)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "origin")
	}))
	t.Cleanup(origin.Close)

	cfg := filepath.Join(t.TempDir(), "providers.yaml")
	// The origin is on 127.0.0.1, which the default policy refuses.
	if err := os.WriteFile(cfg, []byte("providers:\n- name: "+entry+"\n  type: local\n  local:\n    bindCIDR: 127.0.102.0/24\n"+
		"    allowedDestinations: [127.0.0.1/32]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	types := registry.DefaultTypes()
	var raw atomic.Pointer[local.Provider]
	lt := types[local.Type]
	build := lt.New
	lt.New = func(name string, settings any, opts provider.Options) (provider.Provider, error) {
		p, err := build(name, settings, opts)
		if lp, ok := p.(*local.Provider); ok {
			raw.Store(lp) // the drill stops its listeners behind its back
		}
		return p, err
	}
	types[local.Type] = lt
	op, err := operator.New(ctx, env.Config, operator.Options{
		ProvidersConfig: cfg, MetricsAddr: "0", ProbeAddr: "0",
		InstallationID: "drill-" + entry, Namespaces: []string{ns}, SkipControllerNameValidation: true,
		GracefulShutdown: 10 * time.Second, ProviderCallTimeout: 10 * time.Second, Types: types,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(runCtx) }()
	t.Cleanup(func() {
		ph := &egressv1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: entry}}
		if err := client.IgnoreNotFound(env.Client.Delete(ctx, ph)); err != nil {
			t.Errorf("deleting ProviderHealth %s: %v", entry, err)
		}
	})
	t.Cleanup(func() {
		// The group and its members go before the operator stops, so no
		// listener outlives the drill.
		g := &egressv1.ProxyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drill"}}
		_ = client.IgnoreNotFound(env.Client.Delete(ctx, g))
		waitWithin(t, time.Minute, "the group's members deleted", func() error {
			l := &egressv1.ProxyList{}
			if err := env.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, px := range l.Items {
				// Kubernetes' garbage collector does not run here: the
				// drill deletes the members itself.
				_ = client.IgnoreNotFound(env.Client.Delete(ctx, &px))
			}
			if len(l.Items) > 0 {
				return fmt.Errorf("%d members left", len(l.Items))
			}
			return nil
		})
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})

	// The entry's first health check done: its turning Healthy reads
	// every Proxy of the entry, which must not meet the fault below.
	waitWithin(t, time.Minute, "provider "+entry+" Healthy", func() error {
		reason, err := healthReason(entry)
		if err != nil || reason != provider.ReasonHealthy {
			return fmt.Errorf("health %q: %v", reason, err)
		}
		return nil
	})
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drill"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, Template: egressv1.ProxyTemplate{
			Spec: egressv1.ProxySpec{Provider: entry, Port: 3128, AllowedSourceRanges: []string{"127.0.0.0/8"}},
		}},
	}
	created := time.Now()
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	group := func() (*egressv1.ProxyGroup, error) {
		got := &egressv1.ProxyGroup{}
		return got, env.Client.Get(ctx, client.ObjectKeyFromObject(g), got)
	}
	twoReady := func() error {
		got, err := group()
		if err != nil {
			return err
		}
		if got.Status.ReadyMembers != 2 || got.Status.Endpoint == "" {
			return fmt.Errorf("%d members ready, endpoint %q", got.Status.ReadyMembers, got.Status.Endpoint)
		}
		return nil
	}
	waitWithin(t, time.Minute, "two members ready", twoReady)
	figure(t, "group_local.ready_after", time.Since(created))

	// The client follows status.endpoint.
	var endpoint atomic.Pointer[url.URL]
	follow := func() {
		if got, err := group(); err == nil && got.Status.Endpoint != "" {
			endpoint.Store(&url.URL{Scheme: "http", Host: got.Status.Endpoint})
		}
	}
	follow()
	stopFollowing := make(chan struct{})
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		for {
			select {
			case <-stopFollowing:
				return
			case <-time.After(20 * time.Millisecond):
				follow()
			}
		}
	}()
	t.Cleanup(func() { close(stopFollowing); <-followed })
	transport := &http.Transport{
		Proxy:             func(*http.Request) (*url.URL, error) { return endpoint.Load(), nil },
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: time.Second}).DialContext,
	}
	loop := clientloop.Start(t, &http.Client{Timeout: time.Second, Transport: transport}, origin.URL, 100*time.Millisecond)
	loop.AwaitAnswered(t, 5, 30*time.Second, "the client answered through the group")

	before, err := group()
	if err != nil {
		t.Fatal(err)
	}
	holder := &egressv1.Proxy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: before.Status.Holder}, holder); err != nil {
		t.Fatal(err)
	}
	p := raw.Load()
	if p == nil {
		t.Fatal("no local provider built")
	}
	stopped := time.Now()
	if !p.StopListener(holder.Status.ProviderID) {
		t.Fatalf("no listener for %s's instance %s", holder.Name, holder.Status.ProviderID)
	}
	// The operator reads the member at once (the provider's
	// InstanceWatcher) and starts the listener again in the same pass:
	// the member serves again before the group would move the endpoint.
	// What the client needs is an answer again, through whichever member.
	answered := loop.Answered()
	loop.AwaitAnswered(t, answered+5, 30*time.Second, "the client answered again")
	waitWithin(t, time.Minute, "two members ready again", twoReady)
	back := time.Since(stopped)
	after, err := group()
	if err != nil {
		t.Fatal(err)
	}
	again := &egressv1.Proxy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(holder), again); err != nil {
		t.Fatal(err)
	}
	gap, lost := loop.GapSince(stopped)
	figure(t, "group_local.fault", "the holder's listener stopped")
	figure(t, "group_local.holder", fmt.Sprintf("%s at %s, then %s at %s", before.Status.Holder, before.Status.Endpoint, after.Status.Holder, after.Status.Endpoint))
	figure(t, "group_local.holder_stops", fmt.Sprintf("%d (its instance %s)", stopsOf(again), again.Status.ProviderID))
	figure(t, "group_local.longest_gap", gap)
	figure(t, "group_local.asks_lost", lost)
	figure(t, "group_local.two_ready_after", back)
}

// stopsOf counts the InstanceStopped transitions the member's Ready went
// through, as its events say.
func stopsOf(px *egressv1.Proxy) int {
	l := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), l, client.InNamespace(px.Namespace)); err != nil {
		return -1
	}
	n := 0
	for _, e := range l.Items {
		if e.Regarding.UID == px.UID && e.Reason == egressv1.ReasonInstanceStopped {
			n++
		}
	}
	return n
}
