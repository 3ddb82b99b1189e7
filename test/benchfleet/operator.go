package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/kubelet"
)

const (
	// managerGrace is how long a manager gets to stop after SIGTERM.
	managerGrace = 30 * time.Second
	// managerReadyTimeout bounds the wait for the manager's /readyz.
	managerReadyTimeout = time.Minute
	// progressEvery is how often a phase says where it is.
	progressEvery = 10 * time.Second
	// settleQuiet is how long the write counters must stay still after a
	// phase before its writes are counted (the events of the last
	// reconciles are sent asynchronously); settleMax bounds the wait.
	settleQuiet = time.Second
	settleMax   = 30 * time.Second
	// localBase is the loopback network the local provider binds in; the
	// range grows with N from a /16.
	localBase = "127.64.0.0"
)

// kubeletPodStatus are the stand-in kubelet's own writes, left out of the
// operator's.
var kubeletPodStatus = writeKey{"PUT", "pods/status"}

// localBindCIDR is a loopback range inside 127.64.0.0/10 with room for n
// instances and their replacements: at least a /16.
func localBindCIDR(n int) string {
	hostBits := max(bits.Len(uint(2*n+3)), 16)
	return fmt.Sprintf("%s/%d", localBase, 32-hostBits)
}

// providersConfig is the manager's config: one entry, named after its
// type. kubeQPS > 0 sets the kubernetes entry's client rate limit.
func providersConfig(provider string, n int, kubeQPS float64) string {
	switch provider {
	case providerLocal:
		return fmt.Sprintf("providers:\n  - name: %s\n    type: local\n    local:\n      bindCIDR: %s\n", provider, localBindCIDR(n))
	default:
		cfg := fmt.Sprintf("providers:\n  - name: %s\n    type: kubernetes\n    kubernetes:\n      namespace: %s\n", provider, backendNamespace)
		if kubeQPS > 0 {
			cfg += fmt.Sprintf("      clientQPS: %g\n      clientBurst: %d\n", kubeQPS, int(2*kubeQPS))
		}
		return cfg
	}
}

// fleet follows the Proxies through a watch: when each was applied, when
// it was first seen Ready, when it was seen gone.
type fleet struct {
	mu      sync.Mutex
	applied map[string]time.Time
	ready   map[string]time.Time
	deleted map[string]time.Time
	gone    map[string]time.Time
	changed chan struct{} // a non-blocking nudge for the waiter
	// unhealthy are the ProviderHealth statuses seen not Healthy, in order,
	// each once.
	unhealthy []string
	// provider names the ProviderHealth to follow.
	provider string
}

// maxHealthNotes bounds the unhealthy statuses kept; healthNoteChars each.
const (
	maxHealthNotes  = 5
	healthNoteChars = 300
)

func (f *fleet) health(obj any) {
	ph, ok := obj.(*egressv1.ProviderHealth)
	if !ok || ph.Name != f.provider {
		return
	}
	cond := apimeta.FindStatusCondition(ph.Status.Conditions, egressv1.ConditionHealthy)
	if cond == nil || cond.Status == metav1.ConditionTrue {
		return
	}
	note := cond.Reason + ": " + cond.Message
	if len(note) > healthNoteChars {
		note = note[:healthNoteChars] + "..."
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.unhealthy) < maxHealthNotes && (len(f.unhealthy) == 0 || f.unhealthy[len(f.unhealthy)-1] != note) {
		f.unhealthy = append(f.unhealthy, note)
	}
}

func newFleet(provider string) *fleet {
	return &fleet{provider: provider, applied: map[string]time.Time{}, ready: map[string]time.Time{}, deleted: map[string]time.Time{}, gone: map[string]time.Time{}, changed: make(chan struct{}, 1)}
}

func (f *fleet) nudge() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *fleet) seen(obj any) {
	px, ok := obj.(*egressv1.Proxy)
	if !ok || !apimeta.IsStatusConditionTrue(px.Status.Conditions, egressv1.ConditionReady) {
		return
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, done := f.ready[px.Name]; !done {
		f.ready[px.Name] = now
		f.nudge()
	}
}

func (f *fleet) removed(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	px, ok := obj.(*egressv1.Proxy)
	if !ok {
		return
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone[px.Name] = now
	f.nudge()
}

func (f *fleet) mark(m map[string]time.Time, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m[name] = time.Now()
}

func (f *fleet) count(m map[string]time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(m)
}

// spans are to[name]-from[name] for every name in both, and the latest of
// to.
func (f *fleet) spans(from, to map[string]time.Time) (ds []time.Duration, last time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, t := range to {
		if s, ok := from[name]; ok {
			ds = append(ds, t.Sub(s))
		}
		if t.After(last) {
			last = t
		}
	}
	return ds, last
}

func proxyName(i int) string { return fmt.Sprintf("px-%05d", i) }

func (b *bench) runOperator(ctx context.Context, provider string) (phases, error) {
	n := b.opts.n
	key := func(k string) string { return provider + "." + k }
	cfgPath := filepath.Join(b.tmp, "providers-"+provider+".yaml")
	if err := os.WriteFile(cfgPath, []byte(providersConfig(provider, n, b.opts.kubeQPS)), 0o600); err != nil {
		return phases{}, err
	}
	if provider == providerLocal {
		b.out.put(key("bind_cidr"), localBindCIDR(n))
	}

	f := newFleet(provider)
	stopWatch, err := b.watchProxies(ctx, f)
	if err != nil {
		return phases{}, err
	}
	defer stopWatch()
	if provider == providerKubernetes {
		kl, err := kubelet.Start(ctx, b.env.Config, backendNamespace, b.progress)
		if err != nil {
			return phases{}, err
		}
		defer kl.Stop()
	}
	if err := b.startManager(ctx, provider, cfgPath); err != nil {
		return phases{}, err
	}
	c, err := client.New(plainConfig(b.env.Config), client.Options{Scheme: testenv.Scheme})
	if err != nil {
		return phases{}, err
	}
	sc, err := newScraper(b.env.Config)
	if err != nil {
		return phases{}, err
	}

	// Create: N Proxies at once, then wait for every one Ready.
	b.progress("%s: creating %d Proxies, %d at once", provider, n, b.opts.concurrency)
	before, err := sc.scrape(ctx)
	if err != nil {
		return phases{}, err
	}
	start := time.Now()
	err = forEach(ctx, n, b.opts.concurrency, func(ctx context.Context, i int) error {
		px := &egressv1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: proxyName(i), Namespace: proxyNamespace},
			Spec:       egressv1.ProxySpec{Provider: provider},
		}
		f.mark(f.applied, px.Name)
		if err := c.Create(ctx, px); err != nil {
			return fmt.Errorf("creating %s: %w", px.Name, err)
		}
		return nil
	})
	if err != nil {
		return phases{}, err
	}
	b.progress("%s: %d Proxies created in %s; waiting for all Ready (at most %s)", provider, n, time.Since(start).Round(time.Millisecond), b.opts.phaseTimeout)
	allReady := b.await(ctx, provider+" Ready", f, f.ready, n)
	if ctx.Err() != nil {
		return phases{}, ctx.Err()
	}
	readyDs, lastReady := f.spans(f.applied, f.ready)
	createTime := lastReady.Sub(start)
	if !allReady {
		b.out.put(key("create_timed_out"), fmt.Sprintf("%d of %d Ready after %s; not Ready: %s", len(readyDs), n, b.opts.phaseTimeout, b.notReady(ctx, c)))
		createTime = time.Since(start)
	}
	created, err := b.settle(ctx, sc, before)
	if err != nil {
		return phases{}, err
	}
	b.profile(ctx, key("ready"))
	b.out.seconds(key("create_seconds"), createTime)
	b.out.latencies(key("apply_to_ready"), readyDs)
	b.writes(key("create"), created, n)

	// Delete: every Proxy at once, then wait for every one gone.
	b.progress("%s: deleting %d Proxies", provider, n)
	before, err = sc.scrape(ctx)
	if err != nil {
		return phases{}, err
	}
	start = time.Now()
	err = forEach(ctx, n, b.opts.concurrency, func(ctx context.Context, i int) error {
		px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: proxyName(i), Namespace: proxyNamespace}}
		f.mark(f.deleted, px.Name)
		if err := c.Delete(ctx, px); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s: %w", px.Name, err)
		}
		return nil
	})
	if err != nil {
		return phases{}, err
	}
	allGone := b.await(ctx, provider+" gone", f, f.gone, n)
	if ctx.Err() != nil {
		return phases{}, ctx.Err()
	}
	goneDs, lastGone := f.spans(f.deleted, f.gone)
	deleteTime := lastGone.Sub(start)
	if !allGone {
		b.out.put(key("delete_timed_out"), fmt.Sprintf("%d of %d gone after %s", len(goneDs), n, b.opts.phaseTimeout))
		deleteTime = time.Since(start)
	}
	deleted, err := b.settle(ctx, sc, before)
	if err != nil {
		return phases{}, err
	}
	b.out.seconds(key("delete_seconds"), deleteTime)
	b.out.latencies(key("delete_to_gone"), goneDs)
	b.writes(key("delete"), deleted, n)
	if provider == providerKubernetes {
		b.out.put(key("backend_left"), b.backendLeft(ctx, c))
	}

	f.mu.Lock()
	unhealthy := f.unhealthy
	f.mu.Unlock()
	if len(unhealthy) == 0 {
		b.out.put(key("provider_health"), "Healthy throughout")
	} else {
		b.out.put(key("provider_health"), "not Healthy at times: "+strings.Join(unhealthy, " | "))
	}
	if rss, err := childproc.PeakRSS(b.mgr.PID); err != nil {
		b.out.put(key("peak_rss_mib"), "unknown: "+err.Error())
	} else {
		b.out.float(key("peak_rss_mib"), float64(rss)/(1<<20))
	}
	// The binary's pages are in the peak too, outside what the Go runtime
	// (and its memory limit) counts.
	if file, err := childproc.FileRSS(b.mgr.PID); err != nil {
		b.out.put(key("end_rss_file_mib"), "unknown: "+err.Error())
	} else {
		b.out.float(key("end_rss_file_mib"), float64(file)/(1<<20))
	}
	b.progress("%s: stopping the manager", provider)
	mgr := b.mgr
	b.mgr = nil
	if !mgr.Stop(managerGrace) {
		return phases{}, fmt.Errorf("the manager (pid %d) ignored SIGTERM for %s and was killed", mgr.PID, managerGrace)
	}
	if !allReady || !allGone {
		return phases{}, fmt.Errorf("%s: not every Proxy became Ready and went (figures above)", provider)
	}
	// Every write the API server took, the stand-in kubelet's too.
	createWrites, _, _ := created.split()
	deleteWrites, _, _ := deleted.split()
	return phases{create: createTime, delete: deleteTime, createWrites: createWrites.total(), deleteWrites: deleteWrites.total()}, nil
}

// writes prints a phase's writes: all of them per Proxy (the bench's own
// create or delete included, as the floor's are), and by kind.
func (b *bench) writes(prefix string, w writeCounts, n int) {
	op, asks, reads := w.without(kubeletPodStatus).split()
	b.out.float(prefix+"_writes_per_proxy", op.total()/float64(n))
	b.out.put(prefix+"_writes", op.perObject(n))
	if len(asks) > 0 {
		b.out.put(prefix+"_reviews", asks.perObject(n))
	}
	b.out.float(prefix+"_reads_per_proxy", reads.total()/float64(n))
	b.out.put(prefix+"_reads", reads.perObject(n))
	if k := w[kubeletPodStatus]; k > 0 {
		b.out.float(prefix+"_standin_kubelet_writes_per_proxy", k/float64(n))
	}
}

// settle waits until the write counters stood still for settleQuiet (at
// most settleMax) and returns the writes since before.
func (b *bench) settle(ctx context.Context, sc *scraper, before writeCounts) (writeCounts, error) {
	last, err := sc.scrape(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(settleMax)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(settleQuiet):
		}
		now, err := sc.scrape(ctx)
		if err != nil {
			return nil, err
		}
		if w, _, _ := now.minus(last).split(); w.total() == 0 {
			return now.minus(before), nil
		}
		last = now
	}
	b.progress("the API writes did not stop within %s; counting them up to now", settleMax)
	return last.minus(before), nil
}

// await waits until m holds n names or the phase times out, printing
// progress; it says whether all came.
func (b *bench) await(ctx context.Context, what string, f *fleet, m map[string]time.Time, n int) bool {
	deadline := time.NewTimer(b.opts.phaseTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		got := f.count(m)
		if got >= n {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
			b.progress("%s: %d of %d", what, got, n)
		case <-f.changed:
		}
		if b.mgr != nil {
			select {
			case <-b.mgr.Done():
				b.progress("the manager exited: %v", b.mgr.Err())
				return false
			default:
			}
		}
	}
}

// notReady counts the Proxies not Ready by their Ready reason.
func (b *bench) notReady(ctx context.Context, c client.Client) string {
	var list egressv1.ProxyList
	if err := c.List(ctx, &list, client.InNamespace(proxyNamespace)); err != nil {
		return err.Error()
	}
	reasons := map[string]int{}
	for _, px := range list.Items {
		cond := apimeta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady)
		switch {
		case cond == nil:
			reasons["(no condition)"]++
		case cond.Status != metav1.ConditionTrue:
			reasons[cond.Reason]++
		}
	}
	return countsString(reasons)
}

// backendLeft counts the kubernetes provider's objects left once every
// Proxy is gone: every kind it makes.
func (b *bench) backendLeft(ctx context.Context, c client.Client) string {
	left := map[string]int{}
	lists := map[string]client.ObjectList{"pods": &corev1.PodList{}, "services": &corev1.ServiceList{}, "configmaps": &corev1.ConfigMapList{},
		"networkpolicies": &networkingv1.NetworkPolicyList{}}
	for name, l := range lists {
		if err := c.List(ctx, l, client.InNamespace(backendNamespace)); err != nil {
			return err.Error()
		}
		if k := apimeta.LenList(l); k > 0 {
			left[name] = k
		}
	}
	// kube-root-ca.crt is the namespace's own.
	if left["configmaps"]--; left["configmaps"] <= 0 {
		delete(left, "configmaps")
	}
	if len(left) == 0 {
		return "none"
	}
	return countsString(left)
}

func countsString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+strconv.Itoa(m[k]))
	}
	return strings.Join(parts, ", ")
}

// watchProxies feeds f from a watch on the Proxies until the returned
// func is called.
func (b *bench) watchProxies(ctx context.Context, f *fleet) (stop func(), err error) {
	pc, err := cache.New(plainConfig(b.env.Config), cache.Options{
		Scheme:            testenv.Scheme,
		DefaultNamespaces: map[string]cache.Config{proxyNamespace: {}},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	inf, err := pc.GetInformer(ctx, &egressv1.Proxy{})
	if err != nil {
		cancel()
		return nil, err
	}
	hinf, err := pc.GetInformer(ctx, &egressv1.ProviderHealth{})
	if err != nil {
		cancel()
		return nil, err
	}
	if _, err := hinf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    f.health,
		UpdateFunc: func(_, obj any) { f.health(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    f.seen,
		UpdateFunc: func(_, obj any) { f.seen(obj) },
		DeleteFunc: f.removed,
	}); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = pc.Start(ctx) }()
	if !pc.WaitForCacheSync(ctx) {
		cancel()
		<-done
		return nil, errors.New("the watch on the Proxies never synced")
	}
	return func() { cancel(); <-done }, nil
}

// startManager runs the manager on one provider's config and waits for
// its /readyz.
func (b *bench) startManager(ctx context.Context, provider, cfgPath string) error {
	port, err := childproc.FreePort()
	if err != nil {
		return err
	}
	probe := "127.0.0.1:" + strconv.Itoa(port)
	if port, err = childproc.FreePort(); err != nil {
		return err
	}
	b.pprofAddr = "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{
		"--pprof-bind-address", b.pprofAddr,
		"--providers-config", cfgPath,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", probe,
		"--leader-elect=false",
		"--installation-id", "bench",
	}, b.opts.managerFlags...)
	log, err := os.OpenFile(filepath.Join(b.tmp, "manager-"+provider+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	env := append(os.Environ(), "KUBECONFIG="+b.kubeconfig)
	if b.opts.managerMemLimit != "" {
		env = append(env, "GOMEMLIMIT="+b.opts.managerMemLimit)
	}
	if b.opts.managerContainerLimit != "" {
		env = append(env, "MEMORY_LIMIT="+b.opts.managerContainerLimit)
	}
	m, err := childproc.Start(b.opts.manager, args, env, log)
	if err != nil {
		_ = log.Close()
		return err
	}
	go func() { <-m.Done(); _ = log.Close() }()
	b.mgr = m
	b.progress("%s: manager started, pid %d: %s %s (output in %s)", provider, m.PID, b.opts.manager, strings.Join(args, " "), log.Name())
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, managerReadyTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-m.Done():
			return false, fmt.Errorf("the manager exited: %v (output in %s)", m.Err(), log.Name())
		default:
		}
		resp, err := hc.Get("http://" + probe + "/readyz")
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("the manager's /readyz: %w", err)
	}
	return nil
}
