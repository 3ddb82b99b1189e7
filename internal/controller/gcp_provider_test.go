package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/controller/gc"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// gcpEntry is a registry entry of the real gcp provider over env (the fake
// Compute API, a key file, the token endpoint), behind the method
// boundary as the registry builds it, polled every poll.
func gcpEntry(t *testing.T, env *gcptest.Env, poll time.Duration) *registry.Entry {
	return gcpEntryAt(t, env, env.Endpoint(), poll)
}

func gcpEntryAt(t *testing.T, env *gcptest.Env, endpoint string, poll time.Duration) *registry.Entry {
	t.Helper()
	p, err := gcp.New("gce", gcp.Config{Project: env.Project, Endpoint: endpoint, CredentialsFile: env.KeyFile,
		DefaultZone: "us-central1-a"}, providerOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	b := provider.WithBoundary("gce", gcp.Type, p)
	return &registry.Entry{Name: "gce", Type: gcp.Type, Provider: b.Provider, Checker: b.Checker,
		Secondary: b.Secondary, Mover: b.Mover, PollInterval: poll}
}

// countingLimiter records what the reconciler asks a backoff for.
type countingLimiter struct {
	workqueue.TypedRateLimiter[types.NamespacedName]
	mu     sync.Mutex
	delays []time.Duration
}

func (c *countingLimiter) When(k types.NamespacedName) time.Duration {
	d := c.TypedRateLimiter.When(k)
	c.mu.Lock()
	c.delays = append(c.delays, d)
	c.mu.Unlock()
	return d
}

func (c *countingLimiter) asked() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.delays...)
}

// startManagerWithBackoffs is startManager with the reconciler's two
// backoffs given (counted).
func startManagerWithBackoffs(t *testing.T, providers Providers, transient, quota *countingLimiter) string {
	t.Helper()
	ns := newNamespace(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: testenv.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &ProxyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Providers: providers,
		Recorder: mgr.GetEventRecorder("egress-proxies-operator"), transientBackoff: transient, quotaBackoff: quota}
	if err := r.SetupWithManager(mgr, 2, Changes{}); err != nil {
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
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return ns
}

func inserts(env *gcptest.Env) int {
	return env.Fake.Count("POST", "projects/"+env.Project+"/zones/*/instances")
}

// TestGCPInsertExhaustedIsQuotaExceeded: on the real API server, with the
// real gcp provider over the fake Compute API, every insert of a Proxy's
// instance is accepted and then fails asynchronously with
// ZONE_RESOURCE_POOL_EXHAUSTED (the earlier providers saw only NotFound and created
// again at once). The Proxy shows QuotaExceeded with that reason, and the
// insert is retried on the quota backoff, not in a tight loop:
//
//   - with the reconciler's own quota backoff (1 minute, doubling), one
//     insert is all that happens over a window of several seconds, and the
//     transient backoff is never asked;
//   - with a 1-second base, the retries come, each after exactly one quota
//     backoff, whose delays double.
func TestGCPInsertExhaustedIsQuotaExceeded(t *testing.T) {
	exhausted := func(env *gcptest.Env) {
		env.Fake.FailNext(fakecompute.Fault{Method: "POST", Path: "projects/" + env.Project + "/zones/*/instances",
			Times: fakecompute.Always, Async: fakecompute.ZoneResourcePoolExhausted()})
	}
	isQuota := func(px *egressv1.Proxy) bool {
		return px != nil && readyReason(px) == "False/"+egressv1.ReasonQuotaExceeded &&
			strings.Contains(conditionMessage(px), "ZONE_RESOURCE_POOL_EXHAUSTED")
	}
	get := func(ns, name string) *egressv1.Proxy {
		px := &egressv1.Proxy{}
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, px); err != nil {
			return nil
		}
		return px
	}
	waitQuota := func(t *testing.T, ns, name string) *egressv1.Proxy {
		var px *egressv1.Proxy
		testenv.EventuallyNil(t, "Proxy "+name+" QuotaExceeded", func() error {
			if px = get(ns, name); !isQuota(px) {
				return fmt.Errorf("Ready %s %q", readyReason(px), conditionMessage(px))
			}
			return nil
		})
		return px
	}

	t.Run("the reconciler's backoff", func(t *testing.T) {
		gce := gcptest.New(t)
		exhausted(gce)
		transient := &countingLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](2*time.Second, 5*time.Minute)}
		quota := &countingLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](time.Minute, 30*time.Minute)}
		ns := startManagerWithBackoffs(t, &staticProviders{entries: map[string]*registry.Entry{"gce": gcpEntry(t, gce, 20*time.Millisecond)}}, transient, quota)
		px := newProxy("exhausted", "gce")
		px.Namespace = ns
		if err := env.Client.Create(context.Background(), px); err != nil {
			t.Fatal(err)
		}
		got := waitQuota(t, ns, "exhausted")
		t.Logf("Ready %s: %s", readyReason(got), conditionMessage(got))
		// The window: a tight loop (a NotFound read as "gone, create
		// again", a Transient retried after 2 s) inserts again within it.
		const window = 5 * time.Second
		time.Sleep(window)
		if n := inserts(gce); n != 1 {
			t.Errorf("%d inserts over %v after the failure, want 1: the insert is retried in a tight loop", n, window)
		}
		if d := quota.asked(); len(d) != 1 || d[0] != time.Minute {
			t.Errorf("quota backoff asked %v, want once, for 1m", d)
		}
		if d := transient.asked(); len(d) != 0 {
			t.Errorf("transient backoff asked %v: the failure was not classified QuotaExceeded", d)
		}
		if px := get(ns, "exhausted"); !isQuota(px) {
			t.Errorf("after the window: Ready %s %q", readyReason(px), conditionMessage(px))
		}
	})

	t.Run("retried on the quota backoff", func(t *testing.T) {
		gce := gcptest.New(t)
		exhausted(gce)
		transient := &countingLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](2*time.Second, 5*time.Minute)}
		quota := &countingLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](time.Second, 30*time.Minute)}
		ns := startManagerWithBackoffs(t, &staticProviders{entries: map[string]*registry.Entry{"gce": gcpEntry(t, gce, 20*time.Millisecond)}}, transient, quota)
		px := newProxy("retried", "gce")
		px.Namespace = ns
		if err := env.Client.Create(context.Background(), px); err != nil {
			t.Fatal(err)
		}
		waitQuota(t, ns, "retried")
		testenv.EventuallyNil(t, "the third insert", func() error {
			if n := inserts(gce); n < 3 {
				return fmt.Errorf("%d inserts", n)
			}
			return nil
		})
		waitQuota(t, ns, "retried")
		n, asked := inserts(gce), quota.asked()
		// Each failed insert was followed by one quota backoff, and each
		// retry came after one: inserts and backoffs alternate.
		if len(asked) < n-1 || len(asked) > n {
			t.Errorf("%d inserts, quota backoff asked %d times (%v): want one backoff per failed insert", n, len(asked), asked)
		}
		for i := 1; i < len(asked); i++ {
			if asked[i] != 2*asked[i-1] {
				t.Errorf("quota backoff delays %v: want each twice the one before", asked)
				break
			}
		}
		if d := transient.asked(); len(d) != 0 {
			t.Errorf("transient backoff asked %v", d)
		}
		var ids []string
		for _, r := range gce.Fake.Requests() {
			if r.Method == "POST" && strings.HasSuffix(r.Path, "/instances") {
				ids = append(ids, r.Query.Get("requestId"))
			}
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] == ids[i-1] {
				t.Errorf("retried inserts reuse the request ID %s: the API would only replay the failed operation", ids[i])
			}
		}
	})
}

// TestGCPProxyLifecycleRequestLog takes one Proxy from apply to Ready to
// deleted, one reconcile pass at a time, against the real API server and
// the real gcp provider over the fake Compute API, and prints the fake's
// request log by step with the number of API calls each step made.
//
// The provider's background steps (the create step, the delete step) are
// held at the fake's door until the pass that started them has returned,
// so that each request is counted under the step that made it.
func TestGCPProxyLifecycleRequestLog(t *testing.T) {
	gce := gcptest.New(t)
	door := &gate{next: gce.Fake}
	srv := httptest.NewServer(door)
	t.Cleanup(srv.Close)
	entry := gcpEntryAt(t, gce, srv.URL, time.Second)
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"gce": entry}})
	seen := 0
	var table []string
	step := func(what string) int {
		reqs := gce.Fake.Requests()
		var lines []string
		for _, r := range reqs[seen:] {
			lines = append(lines, "    "+r.String())
		}
		n := len(reqs) - seen
		seen = len(reqs)
		table = append(table, fmt.Sprintf("%-58s %2d API calls", what, n))
		t.Logf("%s: %d API calls\n%s", what, n, strings.Join(lines, "\n"))
		return n
	}
	waitFake := func(what string, cond func() bool) {
		testenv.Eventually(t, what, cond)
	}
	insertWaited := func() bool {
		for _, op := range gce.Fake.Operations(gce.Project) {
			if op.GetOperationType() == "insert" && strings.Contains(op.GetTargetLink(), "/instances/") {
				return gce.Fake.Count("POST", "projects/"+gce.Project+"/zones/*/operations/"+op.GetName()+"/wait") > 0
			}
		}
		return false
	}

	d.create(newProxy("web", "gce"))
	step("pass 1: finalizer")
	// The create step's requests: all but Create's own read.
	door.hold(func(r *http.Request) bool {
		return !(r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/instances/"))
	})
	d.reconcile("web")
	px := d.get("web")
	if readyReason(px) != "False/Provisioning" || px.Status.ProviderID == "" {
		t.Fatalf("after Create: Ready %s, providerID %q", readyReason(px), px.Status.ProviderID)
	}
	step("pass 2: Create (foreground)")
	door.release()
	waitFake("the create step's insert followed to its end", insertWaited)
	step("create step (background): rule, insert, operations")
	// The guest's reporter publishes that Squid answers once the VM runs
	// (on GCE: the startup script's timer).
	if err := reportServing(gce, px.Status.ProviderID); err != nil {
		t.Fatalf("the guest's report: %v", err)
	}
	px = d.reconcileUntil("web", 5, "Ready", hasReason("True/Running"))
	if !strings.HasPrefix(px.Status.IP, "203.0.113.") || px.Status.Endpoint != px.Status.IP+":3128" {
		t.Errorf("endpoint %q ip %q", px.Status.Endpoint, px.Status.IP)
	}
	step("pass 3: Get -> Running (Ready)")
	d.reconcile("web")
	step("pass 4: Get (running resync)")

	if err := env.Client.Delete(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	// The delete step begins with waiting for the delete's operation.
	door.hold(func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/wait")
	})
	d.reconcile("web")
	step("pass 5: deletion: ListByTag, ListSecondary, Delete, Get")
	door.release()
	name := px.Status.InstanceName
	waitFake("the delete step deleting the rule", func() bool { return gce.Fake.Firewall(gce.Project, name) == nil })
	step("delete step (background): operation, then the rule")
	for i := 0; i < 5 && d.get("web") != nil; i++ {
		d.reconcile("web")
	}
	if d.get("web") != nil {
		t.Fatal("Proxy not released")
	}
	step("pass 6: deletion: Get -> NotFound, finalizer dropped")
	if gce.Fake.Instance(gce.Project, "us-central1-a", name) != nil || gce.Fake.Firewall(gce.Project, name) != nil {
		t.Error("the instance or its rule is left after the deletion")
	}
	t.Logf("API calls per step of one Proxy's lifecycle:\n%s\n(plus one token request to the token endpoint, outside the Compute API)", strings.Join(table, "\n"))
}

// gate holds the requests a predicate picks until released.
type gate struct {
	next http.Handler
	mu   sync.Mutex
	pick func(*http.Request) bool
	open chan struct{}
}

func (g *gate) hold(pick func(*http.Request) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pick, g.open = pick, make(chan struct{})
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
	}
	g.pick, g.open = nil, nil
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	pick, open := g.pick, g.open
	g.mu.Unlock()
	if pick != nil && pick(r) {
		select {
		case <-open:
		case <-r.Context().Done():
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// reportServing publishes, as the guest's reporter does once its VM runs,
// that the proxy of the instance id answers; an error says the instance
// does not run (yet), so no guest could.
func reportServing(gce *gcptest.Env, id string) error {
	zone, name, _ := strings.Cut(strings.TrimPrefix(id, "zones/"), "/instances/")
	now := time.Now()
	return gce.Fake.SetGuestAttribute(gce.Project, zone, name, servingreport.GuestAttributeNamespace, servingreport.GuestAttributeKey,
		servingreport.Format(servingreport.Report{Serving: true, Checked: now, Answered: now, CloudInit: servingreport.CloudInitDone}))
}

// TestGCPEgressAddressKeptThroughAReplacement: on the real API server,
// with the real gcp provider over the fake Compute API: a Proxy with
// spec.egressAddress gets an address reserved for it and its instance
// made with it (status.ip, status.endpoint and status.egressIP are that
// address); a spec change brings a new instance up on an address of its
// own while the old one serves, then the address moves to it (the request
// log of the move is logged, with its calls) and the old instance goes:
// the endpoint and the egress address are the same after. Deleting the
// Proxy (reclaimPolicy Delete) deletes the address after the instance; a
// Retain Proxy's address stays, labelled.
func TestGCPEgressAddressKeptThroughAReplacement(t *testing.T) {
	gce := gcptest.New(t)
	entry := gcpEntry(t, gce, 50*time.Millisecond)
	if entry.Mover == nil {
		t.Fatal("the gcp provider is no EgressAddressMover")
	}
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"gce": entry}})

	for _, reclaim := range []string{egressv1.ReclaimDelete, egressv1.ReclaimRetain} {
		t.Run(reclaim, func(t *testing.T) {
			name := "partner-" + strings.ToLower(reclaim)
			px := newProxy(name, "gce")
			px.Spec.EgressAddress = &egressv1.EgressAddressSpec{ReclaimPolicy: reclaim}
			d.create(px)
			readyOn := func(what string, cond func(*egressv1.Proxy) bool) *egressv1.Proxy {
				var got *egressv1.Proxy
				testenv.Eventually(t, what, func() bool {
					d.reconcile(name)
					got = d.get(name)
					if got.Status.ProviderID != "" {
						_ = reportServing(gce, got.Status.ProviderID) // until its VM runs
					}
					return cond(got)
				})
				return got
			}
			first := readyOn("Ready", func(px *egressv1.Proxy) bool {
				return readyReason(px) == "True/Running" && px.Status.EgressIP != ""
			})
			region := "us-central1"
			addrName := provider.EgressAddressName(first.Namespace, first.Name, string(first.UID))
			addr := gce.Fake.Address(gce.Project, region, addrName)
			if addr == nil || addr.GetStatus() != "IN_USE" || first.Status.IP != addr.GetAddress() || first.Status.EgressIP != addr.GetAddress() {
				t.Fatalf("address %v; status.ip %s, egressIP %s", addr, first.Status.IP, first.Status.EgressIP)
			}
			before := len(gce.Fake.Requests())

			d.updateSpec(name, func(s *egressv1.ProxySpec) { s.Port = 3129 })
			second := readyOn("Ready on a new instance, the old one gone", func(px *egressv1.Proxy) bool {
				return readyReason(px) == "True/Running" && px.Status.ProviderID != first.Status.ProviderID &&
					px.Status.RetiringProviderID == "" && len(px.Status.SupersededProviderIDs) == 0
			})
			var moveLog []string
			for _, r := range gce.Fake.Requests()[before:] {
				if r.Method != http.MethodGet && !strings.HasSuffix(r.Path, "/wait") {
					moveLog = append(moveLog, r.String())
				}
			}
			t.Logf("the replacement's writes (%d):\n  %s", len(moveLog), strings.Join(moveLog, "\n  "))
			if second.Status.IP != addr.GetAddress() || second.Status.Endpoint != addr.GetAddress()+":3129" || second.Status.EgressIP != addr.GetAddress() {
				t.Fatalf("after the replacement: ip %s, endpoint %s, egressIP %s; want the kept address %s",
					second.Status.IP, second.Status.Endpoint, second.Status.EgressIP, addr.GetAddress())
			}
			if evs := d.events(); !containsAny(evs, "Normal "+ReasonEgressAddressMoved) {
				t.Errorf("no %s event: %q", ReasonEgressAddressMoved, evs)
			}

			if err := env.Client.Delete(context.Background(), second); err != nil {
				t.Fatal(err)
			}
			testenv.EventuallyNil(t, "the Proxy gone", func() error {
				d.reconcile(name)
				if px := d.get(name); px != nil {
					return fmt.Errorf("Ready %s: %s", readyReason(px), meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady).Message)
				}
				return nil
			})
			left := gce.Fake.Address(gce.Project, region, addrName)
			switch reclaim {
			case egressv1.ReclaimDelete:
				if left != nil {
					t.Errorf("reclaimPolicy Delete: the address is left: %v", left)
				}
			case egressv1.ReclaimRetain:
				if left == nil || left.GetStatus() != "RESERVED" || left.GetLabels()[provider.MarkUID] != string(second.UID) {
					t.Errorf("reclaimPolicy Retain: the address after the Proxy: %v", left)
				}
				if evs := d.events(); !containsAny(evs, "Normal "+ReasonEgressAddressRetained) {
					t.Errorf("no %s event: %q", ReasonEgressAddressRetained, evs)
				}
			}
		})
	}
}

// TestGCPOrphanedEgressAddressCollected: a Proxy that vanished without its
// finalizer (removed by hand) leaves its instance and the address reserved
// for it; the collector deletes the instance, then, once no instance holds
// it, the address, as orphans past the grace. A user's address beside it
// is never touched.
func TestGCPOrphanedEgressAddressCollected(t *testing.T) {
	gce := gcptest.New(t)
	entry := gcpEntry(t, gce, 50*time.Millisecond)
	providers := &staticProviders{entries: map[string]*registry.Entry{"gce": entry}}
	d := newDirect(t, providers)
	px := newProxy("orphan", "gce")
	px.Spec.EgressAddress = &egressv1.EgressAddressSpec{}
	d.create(px)
	testenv.Eventually(t, "the instance made with its address", func() bool {
		d.reconcile("orphan")
		got := d.get("orphan")
		if got.Status.ProviderID != "" {
			_ = reportServing(gce, got.Status.ProviderID)
		}
		return readyReason(got) == "True/Running"
	})
	px = d.get("orphan")
	addrName := provider.EgressAddressName(px.Namespace, px.Name, string(px.UID))
	if err := gce.Fake.PutAddress(gce.Project, "us-central1", &computepb.Address{Name: proto.String("users-own"), AddressType: proto.String("EXTERNAL")}); err != nil {
		t.Fatal(err)
	}

	// Gone by hand: the finalizer removed, the Proxy deleted.
	px.Finalizers = nil
	if err := env.Client.Update(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	c := &gc.Collector{Reader: env.Client, Providers: entryList{entry}, WaitForCacheSync: func(context.Context) bool { return true },
		Interval: time.Minute, Grace: time.Nanosecond, CallTimeout: 10 * time.Second}
	var collected []string
	testenv.Eventually(t, "the orphaned address collected", func() bool {
		for _, res := range c.CollectOnce(context.Background()) {
			for _, a := range res.Actions {
				collected = append(collected, "instance "+a.ID+" ("+string(a.Reason)+")")
			}
			for _, a := range res.SecondaryActions {
				collected = append(collected, a.Kind+" "+a.ID+" ("+string(a.Reason)+")")
			}
		}
		return gce.Fake.Address(gce.Project, "us-central1", addrName) == nil
	})
	t.Logf("collected: %v", collected)
	if !slices.ContainsFunc(collected, func(a string) bool {
		return strings.HasPrefix(a, "address regions/us-central1/addresses/"+addrName+"/") && strings.HasSuffix(a, "(orphan)")
	}) || !slices.Contains(collected, "instance "+px.Status.ProviderID+" (orphan)") {
		t.Errorf("the collector's actions %v do not name the instance and the address as orphans", collected)
	}
	if gce.Fake.Instance(gce.Project, "us-central1-a", px.Status.InstanceName) != nil {
		t.Error("the orphaned instance is left")
	}
	if gce.Fake.Address(gce.Project, "us-central1", "users-own") == nil {
		t.Error("the user's own address was collected")
	}
}

// entryList gives the collector its entries.
type entryList []*registry.Entry

func (l entryList) Entries() []*registry.Entry { return l }
