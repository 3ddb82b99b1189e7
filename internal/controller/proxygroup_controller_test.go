package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/ippool"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// groupEvents records the group reconciler's event reasons and notes, in
// order.
type groupEvents struct {
	mu    sync.Mutex
	notes []string
	// told are the instances the group said changed (InstanceChanged).
	told []string
}

func (r *groupEvents) instanceChanged(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.told = append(r.told, id)
}

func (r *groupEvents) toldChanged() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.told)
}

func (r *groupEvents) Eventf(_, _ runtime.Object, _, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, reason+": "+fmt.Sprintf(note, args...))
}

func (r *groupEvents) with(reason string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.notes {
		if strings.HasPrefix(n, reason+": ") {
			out = append(out, strings.TrimPrefix(n, reason+": "))
		}
	}
	return out
}

// await waits until the events of reason are exactly one per want, in
// order, each containing its want. The holder's Event follows the status
// write that names the new holder, so a test may read that status before
// the reconciler records it.
func (r *groupEvents) await(t *testing.T, reason string, want ...string) {
	t.Helper()
	testenv.EventuallyNil(t, fmt.Sprintf("%d %s events", len(want), reason), func() error {
		got := r.with(reason)
		if len(got) != len(want) {
			return fmt.Errorf("%s events %v, want %d", reason, got, len(want))
		}
		for i, w := range want {
			if !strings.Contains(got[i], w) {
				return fmt.Errorf("%s events %v, want event %d to name %q", reason, got, i, w)
			}
		}
		return nil
	})
}

// startGroupManager runs the Proxy and the ProxyGroup reconcilers on the
// fake provider entry "pool", reading running Proxies again every 100 ms
// so a member that stops serving is seen at once.
func startGroupManager(t *testing.T) (string, *fake.Provider, *groupEvents) {
	t.Helper()
	entry, fp := fakeEntry("pool")
	ns, evs := startGroupManagerOn(t, entry)
	return ns, fp, evs
}

// startGroupManagerOn runs them on entry, with the built-in IPAM provider
// when the entry has an addressPool.
func startGroupManagerOn(t *testing.T, entry *registry.Entry) (string, *groupEvents) {
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
	providers := &staticProviders{entries: map[string]*registry.Entry{entry.Name: entry}}
	r := &ProxyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Providers: providers,
		Recorder: mgr.GetEventRecorder("egress-proxies-operator"), RunningResync: 100 * time.Millisecond,
		// A failure a test scripts is retried within a second, not after
		// the production backoff's minutes.
		transientBackoff: workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](50*time.Millisecond, time.Second)}
	if err := r.SetupWithManager(mgr, 4, Changes{}); err != nil {
		t.Fatal(err)
	}
	evs := &groupEvents{}
	if err := (&ProxyGroupReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Providers: providers, Recorder: evs,
		InstanceChanged: evs.instanceChanged}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if entry.AddressPool() != nil {
		a := &AddressPoolReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Providers: providers}
		if err := a.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
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
	return ns, evs
}

// reportAsGuests plays the members' guests' serving reporters: every
// tick until the test ends, report is called with each Proxy of the
// namespace (an instance not made yet included: report skips those).
func reportAsGuests(t *testing.T, ns string, tick time.Duration, report func(px *egressv1.Proxy)) {
	t.Helper()
	stop := make(chan struct{})
	var reporting sync.WaitGroup
	reporting.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(tick):
			}
			list := &egressv1.ProxyList{}
			if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
				continue
			}
			for i := range list.Items {
				report(&list.Items[i])
			}
		}
	})
	t.Cleanup(func() { close(stop); reporting.Wait() })
}

func groupCondition(g *egressv1.ProxyGroup, typ string) string {
	if c := meta.FindStatusCondition(g.Status.Conditions, typ); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return "-"
}

// waitGroup polls the group until cond holds.
func waitGroup(t *testing.T, ns, name, what string, cond func(*egressv1.ProxyGroup) error) *egressv1.ProxyGroup {
	t.Helper()
	g := &egressv1.ProxyGroup{}
	testenv.EventuallyNil(t, "group "+name+": "+what, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, g); err != nil {
			return err
		}
		if err := cond(g); err != nil {
			return fmt.Errorf("%w; status %+v", err, g.Status)
		}
		return nil
	})
	return g
}

func allReady(n int32) func(*egressv1.ProxyGroup) error {
	return func(g *egressv1.ProxyGroup) error {
		if g.Status.ReadyMembers != n || g.Status.ObservedGeneration != g.Generation ||
			groupCondition(g, egressv1.ConditionDegraded) != "False/MembersReady" ||
			groupCondition(g, egressv1.ConditionReconciling) != "-" {
			return fmt.Errorf("not %d members ready and settled", n)
		}
		return nil
	}
}

// TestProxyGroup (issue 24): on the real API server with the fake
// provider, a group of two spread members: both made from the template,
// one per zone, owned by the group; the endpoint on the first ready; when
// that one stops serving the endpoint moves to the other (Available stays
// True, Degraded True) and stays there when the first serves again; a
// template change rolls the members one at a time, the holder last, and
// never has both out at once; scaled to one, member 1 goes.
func TestProxyGroup(t *testing.T) {
	ns, fp, evs := startGroupManager(t)
	ctx := context.Background()
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, Spread: &egressv1.GroupSpread{Zones: []string{"zone-a", "zone-b"}},
			Template: egressv1.ProxyTemplate{
				Metadata: egressv1.ProxyTemplateMeta{Labels: map[string]string{"team": "web"}},
				Spec:     egressv1.ProxySpec{Provider: "pool", Port: 3128, AllowedSourceRanges: []string{"127.0.0.0/8"}},
			}},
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	g = waitGroup(t, ns, "web", "both members ready", allReady(2))
	// The first member ready holds the endpoint (either may be first).
	first, other := g.Status.Holder, "web-1"
	if first == "web-1" {
		other = "web-0"
	}
	if (first != "web-0" && first != "web-1") || g.Status.Endpoint == "" || groupCondition(g, egressv1.ConditionAvailable) != "True/HolderReady" {
		t.Fatalf("holder %q, endpoint %q, Available %s", g.Status.Holder, g.Status.Endpoint, groupCondition(g, egressv1.ConditionAvailable))
	}
	members := map[string]*egressv1.Proxy{}
	for i, zone := range []string{"zone-a", "zone-b"} {
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: memberName("web", i)}, px); err != nil {
			t.Fatal(err)
		}
		if px.Spec.Placement.Zone != zone || px.Labels["team"] != "web" || !ownedBy(px, g) || g.Status.Members[i].Zone != zone {
			t.Errorf("member %s: zone %q, labels %v, owners %+v", px.Name, px.Spec.Placement.Zone, px.Labels, px.OwnerReferences)
		}
		members[px.Name] = px
	}
	if g.Status.Endpoint != members[first].Status.Endpoint {
		t.Errorf("group endpoint %s, holder's %s", g.Status.Endpoint, members[first].Status.Endpoint)
	}

	// The holder stops serving: the endpoint moves.
	if !fp.Backend().SetServing(members[first].Status.InstanceName, fake.Serving{Serving: provider.ServingNotAnswering, Detail: "squid stopped"}) {
		t.Fatal("no instance for " + first)
	}
	g = waitGroup(t, ns, "web", "the endpoint on "+other, func(g *egressv1.ProxyGroup) error {
		if g.Status.Holder != other || g.Status.Endpoint != members[other].Status.Endpoint ||
			groupCondition(g, egressv1.ConditionAvailable) != "True/HolderReady" || groupCondition(g, egressv1.ConditionDegraded) != "True/MembersNotReady" {
			return fmt.Errorf("not moved")
		}
		return nil
	})
	evs.await(t, "HolderMoved", "from member "+first+" to "+other)
	fp.Backend().SetServing(members[first].Status.InstanceName, fake.Serving{Serving: provider.ServingAnswering})
	g = waitGroup(t, ns, "web", "both ready again", allReady(2))
	if g.Status.Holder != other {
		t.Errorf("holder %s after %s came back, want %s kept", g.Status.Holder, first, other)
	}

	// A template change rolls one member at a time, the holder last.
	// Watched meanwhile: how many members at once are not settled (on a
	// spec they have not finished replacing their instance for).
	stop := make(chan struct{})
	var mostUnsettled int
	var watched sync.WaitGroup
	watched.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			list := &egressv1.ProxyList{}
			if err := env.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{egressv1.LabelGroup: "web"}); err != nil {
				continue
			}
			unsettled := 0
			for i := range list.Items {
				if !memberSettled(&list.Items[i]) {
					unsettled++
				}
			}
			mostUnsettled = max(mostUnsettled, unsettled)
		}
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
		t.Fatal(err)
	}
	g.Spec.Template.Spec.Port = 3129
	if err := env.Client.Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	g = waitGroup(t, ns, "web", "rolled to port 3129", func(g *egressv1.ProxyGroup) error {
		if err := allReady(2)(g); err != nil {
			return err
		}
		for _, m := range g.Status.Members {
			if !m.Current || !strings.HasSuffix(m.Endpoint, ":3129") {
				return fmt.Errorf("member %s not rolled", m.Name)
			}
		}
		return nil
	})
	close(stop)
	watched.Wait()
	if rolled := evs.with("MemberRolled"); len(rolled) != 2 || !strings.Contains(rolled[0], first) || !strings.Contains(rolled[1], other) {
		t.Errorf("rolls %v: want %s first, the holder %s last", rolled, first, other)
	}
	if mostUnsettled > 1 {
		t.Errorf("%d members were rolling at once", mostUnsettled)
	}
	t.Logf("rolled %v; at most %d member unsettled at once", evs.with("MemberRolled"), mostUnsettled)

	// Scaled down: the highest member goes.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
		t.Fatal(err)
	}
	g.Spec.Members = 1
	if err := env.Client.Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "member web-1 removed", func() error {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-1"}, &egressv1.Proxy{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	g = waitGroup(t, ns, "web", "one member", allReady(1))
	if g.Status.Holder != "web-0" || len(g.Status.Members) != 1 {
		t.Errorf("after scaling to 1: holder %s, members %+v", g.Status.Holder, g.Status.Members)
	}
}

// TestProxyGroupProgressDeadline: a template whose members never serve
// (their new instances' proxies never answer) stops the roll at the first
// member it reaches, and past spec.progressDeadlineSeconds the group's
// Stalled names that member; the holder keeps the endpoint on the old
// template. Once that member serves, Stalled clears and the roll goes on.
func TestProxyGroupProgressDeadline(t *testing.T) {
	ns, fp, evs := startGroupManager(t)
	ctx := context.Background()
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, ProgressDeadlineSeconds: ptr.To[int32](3),
			Template: egressv1.ProxyTemplate{
				Spec: egressv1.ProxySpec{Provider: "pool", Port: 3128, AllowedSourceRanges: []string{"127.0.0.0/8"}},
			}},
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	g = waitGroup(t, ns, "late", "both members ready", allReady(2))
	holder := g.Status.Holder
	other := "late-0"
	if holder == other {
		other = "late-1"
	}

	fp.Backend().SetCreatedServing(fake.Serving{Serving: provider.ServingNotAnswering, Detail: "no report yet"})
	g.Spec.Template.Spec.Port = 3129
	if err := env.Client.Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	g = waitGroup(t, ns, "late", "Stalled naming "+other, func(g *egressv1.ProxyGroup) error {
		c := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != egressv1.GroupReasonProgressDeadlineExceeded {
			return fmt.Errorf("not stalled")
		}
		if !strings.HasPrefix(c.Message, "member "+other+" has not been ready and settled for ") {
			return fmt.Errorf("Stalled names another member: %s", c.Message)
		}
		return nil
	})
	stalled := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionStalled)
	t.Logf("Stalled %s: %s", stalled.Reason, stalled.Message)
	if !strings.Contains(stalled.Message, "(spec.progressDeadlineSeconds 3)") || !strings.Contains(stalled.Message, "no report yet") {
		t.Errorf("Stalled says neither the deadline nor the member's own reason: %s", stalled.Message)
	}
	for _, m := range g.Status.Members {
		if m.Name == holder && m.Current {
			t.Errorf("the holder %s was rolled while %s did not serve", holder, other)
		}
	}
	if g.Status.Holder != holder || groupCondition(g, egressv1.ConditionAvailable) != "True/HolderReady" {
		t.Errorf("holder %s, Available %s: want %s kept", g.Status.Holder, groupCondition(g, egressv1.ConditionAvailable), holder)
	}
	if rolled := evs.with("MemberRolled"); len(rolled) != 1 || !strings.Contains(rolled[0], other) {
		t.Errorf("rolls %v: want %s only", rolled, other)
	}

	// The member's new instance serves: the roll goes on, Stalled clears.
	fp.Backend().SetCreatedServing(fake.Serving{})
	stuck := &egressv1.Proxy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: other}, stuck); err != nil {
		t.Fatal(err)
	}
	if !fp.Backend().SetServing(stuck.Status.InstanceName, fake.Serving{Serving: provider.ServingAnswering}) {
		t.Fatalf("no instance %s", stuck.Status.InstanceName)
	}
	waitGroup(t, ns, "late", "rolled to port 3129, not stalled", func(g *egressv1.ProxyGroup) error {
		if err := allReady(2)(g); err != nil {
			return err
		}
		if c := groupCondition(g, egressv1.ConditionStalled); c != "-" {
			return fmt.Errorf("Stalled %s", c)
		}
		for _, m := range g.Status.Members {
			if !m.Current {
				return fmt.Errorf("member %s not rolled", m.Name)
			}
		}
		return nil
	})
}

// TestProxyGroupValidation: the API server refuses, naming the field, a
// spread with fewer zones than members, a template that places its own
// zone under a spread, and a template egressAddress or groupAddress.
func TestProxyGroupValidation(t *testing.T) {
	ns := newNamespace(t)
	base := func() *egressv1.ProxyGroup {
		return &egressv1.ProxyGroup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "g-"},
			Spec: egressv1.ProxyGroupSpec{Members: 3, Spread: &egressv1.GroupSpread{Zones: []string{"a", "b"}},
				Template: egressv1.ProxyTemplate{Spec: egressv1.ProxySpec{Provider: "pool", Port: 3128}}},
		}
	}
	// sample replaces the group with config/samples/<file>.
	sample := func(file string) func(*egressv1.ProxyGroup) {
		return func(g *egressv1.ProxyGroup) {
			root, err := testenv.RepoRoot()
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(root, "config", "samples", file))
			if err != nil {
				t.Fatal(err)
			}
			*g = egressv1.ProxyGroup{}
			if err := yaml.UnmarshalStrict(b, g); err != nil {
				t.Fatalf("the sample: %v", err)
			}
			g.Namespace = ns
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*egressv1.ProxyGroup)
		want   string // "" accepted
	}{
		{"fewer zones than members", func(*egressv1.ProxyGroup) {}, "spec.spread.zones: Invalid value"},
		{"fewer zones, sharing allowed", func(g *egressv1.ProxyGroup) { g.Spec.Spread.AllowSharing = true }, ""},
		{"enough zones", func(g *egressv1.ProxyGroup) { g.Spec.Members = 2 }, ""},
		{"a zone in the template under a spread", func(g *egressv1.ProxyGroup) {
			g.Spec.Members = 2
			g.Spec.Template.Spec.Placement.Zone = "c"
		}, "spec.template.spec.placement.zone"},
		{"an egressAddress in the template", func(g *egressv1.ProxyGroup) {
			g.Spec.Members, g.Spec.Spread = 2, nil
			g.Spec.Template.Spec.EgressAddress = &egressv1.EgressAddressSpec{}
		}, "spec.template.spec.egressAddress"},
		{"a groupAddress in the template", func(g *egressv1.ProxyGroup) {
			g.Spec.Members, g.Spec.Spread = 2, nil
			g.Spec.Template.Spec.GroupAddress = &egressv1.MemberGroupAddress{}
		}, "spec.template.spec.groupAddress: Invalid value"},
		{"a groupAddress that is no address", func(g *egressv1.ProxyGroup) {
			g.Spec.Members, g.Spec.Spread = 2, nil
			g.Spec.Template.Spec.GroupAddress = &egressv1.MemberGroupAddress{Address: "192.0.2.300/24"}
		}, "spec.template.spec.groupAddress.address"},
		{"too many members", func(g *egressv1.ProxyGroup) { g.Spec.Members, g.Spec.Spread = 9, nil }, "spec.members"},
		{"config/samples/proxygroup_local.yaml", sample("proxygroup_local.yaml"), ""},
		{"config/samples/proxygroup_kvm.yaml", sample("proxygroup_kvm.yaml"), ""},
		{"config/samples/proxygroup_gcp.yaml", sample("proxygroup_gcp.yaml"), ""},
		{"config/samples/proxygroup_kubernetes.yaml", sample("proxygroup_kubernetes.yaml"), ""},
		{"a group's egressAddress with a pool address", func(g *egressv1.ProxyGroup) {
			g.Spec.EgressAddress = &egressv1.EgressAddressSpec{Address: "192.0.2.7"}
		}, "spec.egressAddress.address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := base()
			tc.change(g)
			err := env.Client.Create(context.Background(), g)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want a refusal naming %s", err, tc.want)
			}
		})
	}
}

// TestProxyGroupOnAPool (issue 24): on an entry with an addressPool, with
// the built-in IPAM provider, a group of two takes an address of its own
// from the pool (a claim owned by both members), its endpoint is that
// address and the template's port, no member is said to hold it until the
// members' guests report who does (they elect the holder among
// themselves; the group then names it), and each member's spec.groupAddress
// names it with the other member's own address as the one peer. Each
// member makes one instance, with that address in its CreateRequest: a
// member waits for its peers rather than being made and replaced.
func TestProxyGroupOnAPool(t *testing.T) {
	entry, fp := poolEntry(t, "pooled", ippool.Spec{Addresses: []string{"192.0.2.10-192.0.2.20"}, Prefix: 24, Gateway: "192.0.2.1"})
	ns, evs := startGroupManagerOn(t, entry)
	ctx := context.Background()
	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vip"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, Template: egressv1.ProxyTemplate{
			Spec: egressv1.ProxySpec{Provider: "pooled", Port: 3128, AllowedSourceRanges: []string{"192.0.2.0/24"}},
		}},
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	stale := g.DeepCopy() // as created: no status, an old resourceVersion
	g = waitGroup(t, ns, "vip", "both members ready on the group's address", func(g *egressv1.ProxyGroup) error {
		if err := allReady(2)(g); err != nil {
			return err
		}
		if g.Status.Address == "" || groupCondition(g, egressv1.ConditionAvailable) != "True/AddressHeld" {
			return fmt.Errorf("no address held")
		}
		return nil
	})
	vip := g.Status.Address
	if g.Status.Endpoint != vip+":3128" || g.Status.Holder != "" {
		t.Errorf("endpoint %q, holder %q: want %s:3128 and no holder", g.Status.Endpoint, g.Status.Holder, vip)
	}
	own := map[string]string{}
	for _, m := range g.Status.Members {
		own[m.Name] = m.Address
		if m.Address == "" || m.Address == vip {
			t.Errorf("member %s: own address %q beside the group's %s", m.Name, m.Address, vip)
		}
	}
	if own["vip-0"] == own["vip-1"] {
		t.Errorf("both members on %s", own["vip-0"])
	}
	for i, name := range []string{"vip-0", "vip-1"} {
		peer := own[memberName("vip", 1-i)]
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, px); err != nil {
			t.Fatal(err)
		}
		want := &egressv1.MemberGroupAddress{Address: vip + "/24", Peers: []string{peer}}
		if !equality.Semantic.DeepEqual(px.Spec.GroupAddress, want) {
			t.Errorf("member %s: spec.groupAddress %+v, want %+v", name, px.Spec.GroupAddress, want)
		}
	}
	creates := map[string][]provider.CreateRequest{}
	for _, req := range fp.CreateRequests() {
		creates[req.ProxyName] = append(creates[req.ProxyName], req)
	}
	for i, name := range []string{"vip-0", "vip-1"} {
		reqs := creates[name]
		if len(reqs) != 1 {
			var made []string
			for _, req := range reqs {
				made = append(made, fmt.Sprintf("%s (group address %+v)", req.Name, req.GroupAddress))
			}
			t.Errorf("member %s: %d creates, want 1 (made once its peers were known): %s", name, len(reqs), strings.Join(made, ", "))
			continue
		}
		ga, st := reqs[0].GroupAddress, reqs[0].StaticAddress
		if ga == nil || st == nil || ga.Virtual.String() != vip+"/24" || len(ga.Peers) != 1 || ga.Peers[0].String() != own[memberName("vip", 1-i)] ||
			ga.Group != string(g.UID) || ga.Index != i || st.Address.Addr().String() != own[name] {
			t.Errorf("member %s: GroupAddress %+v, StaticAddress %+v", name, ga, st)
		}
	}
	claim := &ipamv1.IPAddressClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: groupClaimName("vip")}, claim); err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, o := range claim.OwnerReferences {
		owners[o.Name] = o.Kind == "Proxy"
	}
	if len(owners) != 2 || !owners["vip-0"] || !owners["vip-1"] || claim.Labels[LabelClaimGroup] != string(g.UID) {
		t.Errorf("the group's claim: owners %+v, labels %v", claim.OwnerReferences, claim.Labels)
	}
	if got := evs.with("AddressClaimed"); len(got) != 1 {
		t.Errorf("AddressClaimed events %v", got)
	}
	t.Logf("group address %s, members %v", vip, own)

	// The members' guests say who holds the group's address (their
	// reporters): the group names that member, and follows a move.
	yes, no := true, false
	hold := func(name string, held *bool) {
		t.Helper()
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, px); err != nil {
			t.Fatal(err)
		}
		fp.Backend().SetServing(px.Status.InstanceName, fake.Serving{Serving: provider.ServingAnswering, HoldsGroupAddress: held})
	}
	heldBy := func(want string) {
		t.Helper()
		waitGroup(t, ns, "vip", "the address held by "+want, func(g *egressv1.ProxyGroup) error {
			c := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionAvailable)
			if g.Status.Holder != want || c == nil || !strings.Contains(c.Message, "held by member "+want) {
				return fmt.Errorf("holder %q, Available %+v", g.Status.Holder, c)
			}
			return nil
		})
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: want}, px); err != nil {
			t.Fatal(err)
		}
		if px.Status.HoldsGroupAddress == nil || !*px.Status.HoldsGroupAddress {
			t.Errorf("member %s: status.holdsGroupAddress %v, want true", want, px.Status.HoldsGroupAddress)
		}
	}
	hold("vip-0", &no)
	hold("vip-1", &yes)
	heldBy("vip-1")
	// A pass on a stale copy of the group (the cache behind a write: no
	// holder yet) tells no move: its status write conflicts, told as a
	// requeue.
	staleEvs := &groupEvents{}
	sr := &ProxyGroupReconciler{Client: &laggingCache{Client: env.Client, group: stale}, APIReader: env.Client,
		Providers: &staticProviders{entries: map[string]*registry.Entry{entry.Name: entry}}, Recorder: staleEvs}
	if res, err := sr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(g)}); err != nil || !res.Requeue {
		t.Errorf("a pass on a stale copy of the group: %+v, %v; want its status write's conflict told as a requeue", res, err)
	}
	if got := staleEvs.with("HolderMoved"); len(got) > 0 {
		t.Errorf("a pass on a stale copy of the group told %v", got)
	}
	hold("vip-1", &no)
	hold("vip-0", &yes)
	heldBy("vip-0")
	evs.await(t, "HolderMoved", "held by member vip-1", "held by member vip-0")
	// Both say they hold it: two guests elected themselves; the group
	// names neither and says so.
	hold("vip-1", &yes)
	waitGroup(t, ns, "vip", "both members reporting the address", func(g *egressv1.ProxyGroup) error {
		c := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionAvailable)
		if g.Status.Holder != "" || c == nil || !strings.Contains(c.Message, "members vip-0 and vip-1 at once") {
			return fmt.Errorf("holder %q, Available %+v", g.Status.Holder, c)
		}
		return nil
	})
}
