// Package operator wires the operator together: the providers config and
// its watcher, the registry with its decorators, the manager, the Proxy
// reconciler, the garbage collector and the health loop. cmd/main.go parses
// flags into Options and runs it; tests run the very same wiring.
package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	authorizationv1 "k8s.io/api/authorization/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/controller/gc"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/controller/health"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientlimit"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// Name is the operator's name in events, leases and traces.
const Name = "egress-proxies-operator"

// Scheme knows the built-in types and ours.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(egressv1.AddToScheme(Scheme))
	utilruntime.Must(ipamv1.AddToScheme(Scheme))
}

// Options are the operator's settings; BindFlags maps them to flags.
type Options struct {
	ProvidersConfig string

	MetricsAddr   string
	MetricsSecure bool
	// PprofAddr serves net/http/pprof; empty is off, and an address
	// without a host binds loopback only (pprofAddress).
	PprofAddr               string
	ProbeAddr               string
	LeaderElect             bool
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election:
	// the renewals every RetryPeriod are most of an idle operator's writes.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	GracefulShutdown                          time.Duration

	InstallationID string
	// ProxyClass is the spec.className this installation serves; "" serves
	// the Proxies with no className.
	ProxyClass string

	// KubeAPIQPS and KubeAPIBurst are the client-side rate limit of the
	// manager's clients (docs/operations.md, "Client rate limits"). Zero
	// means the default; a negative QPS turns the limit off.
	KubeAPIQPS   float64
	KubeAPIBurst int

	MaxConcurrentReconciles int
	ProviderCallTimeout     time.Duration
	RunningResync           time.Duration

	GCInterval time.Duration
	GCGrace    time.Duration
	GCDryRun   bool

	HealthInterval  time.Duration
	HealthTimeout   time.Duration
	HealthHeartbeat time.Duration

	// PodName and PodNamespace (downward API) let config refusals be
	// reported as events on the operator's own Pod.
	PodName, PodNamespace string

	// Types is the constructor map; nil means registry.DefaultTypes().
	Types map[string]registry.Type
	// Namespaces are the namespaces whose Proxies this installation serves
	// (--watch-namespaces); the cache holds only these. Empty means all.
	Namespaces []string
	// SkipControllerNameValidation lets tests run several operators in one
	// process.
	SkipControllerNameValidation bool
}

// BindFlags registers every option as a flag with its default.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.ProvidersConfig, "providers-config", "", "Path of the providers config file (YAML list of {name, type, <type>: {...}}); reloaded when it changes. Required.")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", "0", "Address of the metrics endpoint (:8443 for HTTPS, :8080 for HTTP); 0 disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS with authentication and authorization through the API server.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "", "Address of the Go profiler's /debug/pprof endpoints, unauthenticated (off by default; \":6060\" binds 127.0.0.1:6060, name a host to bind another).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Elect a leader on a Lease so that only one replica reconciles, collects and checks.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the operator's own).")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a standby waits before taking over an unrenewed Lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader retries renewing before it gives up leadership.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 2*time.Second, "Time between renewals (one API write each) and between a standby's attempts.")
	fs.DurationVar(&o.GracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "How long in-flight reconciles and provider calls may take to finish at shutdown.")
	fs.StringVar(&o.InstallationID, "installation-id", "", "Identity marked on every instance, so installations sharing a backend never touch each other's instances: up to 63 lowercase letters, digits, '-' and '_' (default: derived from the kube-system namespace's UID, the operator's namespace and --proxy-class; see docs/operations.md).")
	fs.StringVar(&o.ProxyClass, "proxy-class", "", "The spec.className of the Proxies this installation serves; empty serves the Proxies that name no class. Every other Proxy is left alone.")
	fs.Func("watch-namespaces", "Comma-separated namespaces whose Proxies this installation serves (default: all).", func(v string) error {
		o.Namespaces = splitList(v)
		return nil
	})
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", DefaultKubeAPIQPS, "Requests per second the manager's clients may send to the API server on average; a negative value (the default) sets no client-side limit and leaves throttling to the API server's priority and fairness.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", DefaultKubeAPIBurst, "Requests the manager's clients may send at once above --kube-api-qps.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", controller.DefaultMaxConcurrentReconciles, "How many Proxies are reconciled at once.")
	fs.DurationVar(&o.ProviderCallTimeout, "provider-call-timeout", controller.DefaultCallTimeout, "Longest a single provider call may take.")
	fs.DurationVar(&o.RunningResync, "running-resync", controller.DefaultRunningResync, "How often a running instance is read again to notice it vanished or stopped.")
	fs.DurationVar(&o.GCInterval, "gc-interval", gc.DefaultInterval, "Time between garbage-collection passes.")
	fs.DurationVar(&o.GCGrace, "gc-grace", gc.DefaultGrace, "Age an unaccounted instance must reach before it is collected; must exceed --provider-call-timeout.")
	fs.BoolVar(&o.GCDryRun, "gc-dry-run", false, "Log and count what garbage collection would delete, and delete nothing.")
	fs.DurationVar(&o.HealthInterval, "health-interval", health.DefaultInterval, "Time between provider health checks.")
	fs.DurationVar(&o.HealthTimeout, "health-timeout", health.DefaultTimeout, "Longest one provider health check may take.")
	fs.DurationVar(&o.HealthHeartbeat, "health-heartbeat", health.DefaultHeartbeat, "Longest a ProviderHealth's lastCheckTime goes unwritten when nothing changed.")
}

// The manager's default client-side rate limit: none (QPS -1), as
// controller-runtime's ctrl.GetConfig sets. The manager's requests are
// bounded by its concurrency, not by a limiter: the workers (8 by default)
// write at most twice a pass, the health loop, the collector and leader
// election one request at a time, and reads come from the cache; the API
// server's priority and fairness queues and shares what reaches it. A
// limit only queued a fleet's writes in the operator (50/s: 2.8x the API
// server's own time for 1,000 Proxies; docs/operations.md gives the
// figures). DefaultKubeAPIBurst is the burst of a limit set with
// --kube-api-qps.
const (
	DefaultKubeAPIQPS   = -1
	DefaultKubeAPIBurst = 100
)

// Operator is the wired operator, ready to Run.
type Operator struct {
	Manager  manager.Manager
	Registry *registry.Registry
	log      logr.Logger
	cleanup  []func()
}

// Validate checks the options and the providers config without reaching
// the cluster: main runs it first, so a bad config stops the operator with
// every error's path before anything else happens.
func (o Options) Validate() error {
	if err := o.checkFlags(); err != nil {
		return err
	}
	_, err := registry.New(o.types(), provider.Options{}).ReadFile(o.ProvidersConfig)
	return err
}

// checkFlags is Validate without reading the providers config, which New
// leaves to the watcher's first load.
func (o Options) checkFlags() error {
	if o.ProvidersConfig == "" {
		return errors.New("--providers-config is required")
	}
	if o.KubeAPIBurst < 0 {
		return fmt.Errorf("--kube-api-burst %d: must not be negative", o.KubeAPIBurst)
	}
	if err := checkScope(o); err != nil {
		return err
	}
	if _, err := pprofAddress(o.PprofAddr); err != nil {
		return err
	}
	return gc.CheckGrace(orDur(o.GCGrace, gc.DefaultGrace), orDur(o.ProviderCallTimeout, controller.DefaultCallTimeout))
}

func (o Options) types() map[string]registry.Type {
	if o.Types == nil {
		return registry.DefaultTypes()
	}
	return o.Types
}

// New checks the options and wires everything; the providers config is
// read once, by the watcher's first load (main runs Validate before it has
// a cluster config, so a bad file is reported first).
func New(ctx context.Context, cfg *rest.Config, o Options) (op *Operator, err error) {
	log := ctrl.Log.WithName("setup")
	if err := o.checkFlags(); err != nil {
		return nil, err
	}
	types := o.types()
	cfg = rateLimited(cfg, o)
	ns := operatorNamespace(o.PodNamespace, serviceAccountNamespaceFile)
	if o.InstallationID == "" {
		if ns == "" {
			log.Info("the operator's namespace is unknown (no POD_NAMESPACE, not in a Pod): the default installation ID is derived without it")
		}
		if o.InstallationID, err = defaultInstallationID(ctx, cfg, ns, o.ProxyClass); err != nil {
			return nil, err
		}
	}
	log.Info("installation identity", "installationID", o.InstallationID, "proxyClass", o.ProxyClass, "watchNamespaces", o.Namespaces)

	op = &Operator{log: log}
	defer func() {
		if err != nil {
			op.close()
		}
	}()
	tp, shutdownTracing, err := telemetry.Setup(logr.NewContext(ctx, log), Name)
	if err != nil {
		return nil, err
	}
	op.cleanup = append(op.cleanup, func() {
		// The manager's ctx is over by now; the flush gets its own time.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Error(err, "flushing traces")
		}
	})

	op.Registry = registry.New(types, provider.Options{InstallationID: o.InstallationID, OperatorNamespace: ns}, telemetry.Decorate(tp))
	// No caller's provider call outlives the longest of these timeouts, so
	// a replaced provider is closed once they have passed at the latest.
	op.Registry.DrainTimeout = max(orDur(o.ProviderCallTimeout, controller.DefaultCallTimeout), orDur(o.HealthTimeout, health.DefaultTimeout))
	op.Registry.Log = ctrl.Log.WithName("registry")
	op.cleanup = append([]func(){op.Registry.Close}, op.cleanup...)

	mgr, err := ctrl.NewManager(cfg, managerOptions(o))
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	op.Manager = mgr

	// One event per changed entry, each delivered: the reconciler
	// re-evaluates the Proxies of that entry only.
	providersChanged := make(chan event.GenericEvent)
	changes := newChangeQueue(providersChanged)
	healthLoop := &health.Loop{Client: mgr.GetClient(), Providers: op.Registry, TracerProvider: tp, Installation: o.InstallationID,
		Interval: o.HealthInterval, Timeout: o.HealthTimeout, Heartbeat: o.HealthHeartbeat}
	op.Registry.OnChange(func(changed []string) {
		changes.add(changed)
		healthLoop.Trigger()
	})
	// One event per instance a provider saw change by itself: its Proxy
	// is read at once, not at its next poll.
	instancesChanged := make(chan event.GenericEvent)
	instanceChanges := newChangeQueue(instancesChanged)
	op.Registry.OnInstanceChange(func(id string) { instanceChanges.add([]string{id}) })

	recorder := mgr.GetEventRecorder(Name)
	watcher := &registry.Watcher{Registry: op.Registry, Path: o.ProvidersConfig,
		OnResult: configResultReporter(recorder, o.PodName, o.PodNamespace)}
	if err := watcher.Load(); err != nil {
		return nil, err
	}
	for _, e := range op.Registry.Entries() {
		log.Info("provider configured", "provider", e.Name, "type", e.Type)
	}

	rec := &controller.ProxyReconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Providers:      op.Registry,
		Recorder:       recorder,
		Scope:          controller.Scope{Class: o.ProxyClass, Namespaces: o.Namespaces},
		TracerProvider: tp,
		CallTimeout:    o.ProviderCallTimeout,
		RunningResync:  o.RunningResync,
	}
	if err := rec.SetupWithManager(mgr, o.MaxConcurrentReconciles, controller.Changes{Providers: providersChanged, Instances: instancesChanged}); err != nil {
		return nil, fmt.Errorf("proxy controller: %w", err)
	}
	groups := &controller.ProxyGroupReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Providers: rec.Providers,
		Recorder: recorder, Scope: rec.Scope, InstanceChanged: func(id string) { instanceChanges.add([]string{id}) }}
	if err := groups.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("proxy group controller: %w", err)
	}
	if why, err := ipamUsable(ctx, mgr, o.Namespaces); err != nil {
		return nil, err
	} else if why == "" {
		pools := &controller.AddressPoolReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			Providers: op.Registry, Namespaces: o.Namespaces}
		if err := pools.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("address pool controller: %w", err)
		}
	} else {
		log.Info("the providers config's address pools are not served: "+why, "group", ipamv1.GroupVersion.String())
	}
	collector := &gc.Collector{
		Reader:           mgr.GetClient(),
		Providers:        op.Registry,
		WaitForCacheSync: mgr.GetCache().WaitForCacheSync,
		Interval:         o.GCInterval,
		Grace:            o.GCGrace,
		CallTimeout:      o.ProviderCallTimeout,
		DryRun:           o.GCDryRun,
		TracerProvider:   tp,
	}
	if err := healthLoop.Validate(); err != nil {
		return nil, fmt.Errorf("health loop: %w", err)
	}
	for _, r := range []manager.Runnable{changes, instanceChanges, watcher, collector, healthLoop} {
		if err := mgr.Add(r); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	return op, nil
}

// Run runs the operator until ctx ends, then closes the providers (after
// the controllers stopped) and flushes the traces.
func (op *Operator) Run(ctx context.Context) error {
	defer op.close()
	op.log.Info("starting manager")
	return op.Manager.Start(ctx)
}

func (op *Operator) close() {
	for _, f := range op.cleanup {
		f()
	}
	op.cleanup = nil
}

func managerOptions(o Options) ctrl.Options {
	metricsOpts := metricsserver.Options{BindAddress: o.MetricsAddr, SecureServing: o.MetricsSecure}
	if o.MetricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
		// HTTP/2 stays off: it is exposed to the Rapid Reset and Stream
		// Cancellation CVEs (GHSA-qppj-fm5r-hxr3, GHSA-4374-p667-p6c8).
		metricsOpts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	grace := o.GracefulShutdown
	pprofAddr, _ := pprofAddress(o.PprofAddr) // checked by checkFlags
	opts := ctrl.Options{
		PprofBindAddress:              pprofAddr,
		Scheme:                        Scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              leaderElectionID(o.ProxyClass),
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &grace,
	}
	// The cache holds every Proxy and ProviderHealth for the operator's
	// life; nothing reads their managedFields, often the larger part.
	opts.Cache.DefaultTransform = cache.TransformStripManagedFields()
	if o.LeaseDuration > 0 {
		opts.LeaseDuration = &o.LeaseDuration
	}
	if o.RenewDeadline > 0 {
		opts.RenewDeadline = &o.RenewDeadline
	}
	if o.RetryPeriod > 0 {
		opts.RetryPeriod = &o.RetryPeriod
	}
	if len(o.Namespaces) > 0 {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	if o.SkipControllerNameValidation {
		skip := true
		opts.Controller = config.Controller{SkipNameValidation: &skip}
	}
	return opts
}

// configResultReporter turns a refused config change into a Warning event
// on the operator's Pod (when the downward API names it), next to the log
// line and the reload gauge the watcher keeps.
func configResultReporter(rec interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any)
}, pod, ns string) func(error) {
	return func(err error) {
		if pod == "" || ns == "" {
			return
		}
		ref := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}}
		if err != nil {
			rec.Eventf(ref, nil, corev1.EventTypeWarning, "ProvidersConfigRefused", "Reload",
				"the changed providers config was refused and the previous one keeps running: %v", err)
			return
		}
		rec.Eventf(ref, nil, corev1.EventTypeNormal, "ProvidersConfigReloaded", "Reload", "the providers config was reloaded")
	}
}

// rateLimited is cfg with the manager's client-side rate limit
// (Options.KubeAPIQPS and KubeAPIBurst, or their defaults: none), replacing
// what the kubeconfig or ctrl.GetConfig set.
func rateLimited(cfg *rest.Config, o Options) *rest.Config {
	qps, burst := o.KubeAPIQPS, o.KubeAPIBurst
	if qps == 0 {
		qps = DefaultKubeAPIQPS
	}
	if burst == 0 {
		burst = DefaultKubeAPIBurst
	}
	return clientlimit.Apply(cfg, float32(qps), burst)
}

// pprofAddress is where the profiler listens: "" (off) for "" or "0", and
// loopback for an address that names no host, since the endpoints have no
// authentication and a heap profile holds whatever the heap holds.
func pprofAddress(addr string) (string, error) {
	if addr == "" || addr == "0" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--pprof-bind-address %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

func orDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// ipamUsable says why the built-in allocator cannot run, or "" when it
// can: the cluster must serve Cluster API's IPAM types and the operator
// must be allowed to watch their claims (the address-pools component). A
// cluster that runs Cluster API serves them whether or not this
// installation uses pools, and its informer would fail for want of the
// rights; without the allocator no entry's own pool is served, and its
// Proxies say so.
func ipamUsable(ctx context.Context, mgr ctrl.Manager, namespaces []string) (string, error) {
	_, err := mgr.GetRESTMapper().RESTMapping(ipamv1.GroupVersion.WithKind("IPAddressClaim").GroupKind(), ipamv1.GroupVersion.Version)
	switch {
	case meta.IsNoMatchError(err):
		return "this cluster does not serve " + ipamv1.GroupVersion.String() + " (config/components/ipam-crds, or Cluster API)", nil
	case err != nil:
		return "", fmt.Errorf("asking the API server for %s: %w", ipamv1.GroupVersion, err)
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return "", err
	}
	ns := "" // the allocator watches claims where the cache does
	if len(namespaces) > 0 {
		ns = namespaces[0]
	}
	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "watch", Group: ipamv1.GroupVersion.Group, Resource: "ipaddressclaims"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking whether the operator may watch IPAddressClaims: %w", err)
	}
	if !review.Status.Allowed {
		return "the operator may not watch IPAddressClaims (config/components/address-pools grants it)", nil
	}
	return "", nil
}
