// Command manager runs the egress-proxies-operator.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(egressv1.AddToScheme(scheme))
}

type options struct {
	providersConfig  string
	metricsAddr      string
	metricsSecure    bool
	probeAddr        string
	leaderElect      bool
	leaderElectionNS string
	maxConcurrent    int
	installationID   string
	callTimeout      time.Duration
	runningResync    time.Duration
	gracefulShutdown time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.providersConfig, "providers-config", "", "Path of the providers config file (YAML list of {name, type, <type>: {...}}). Required.")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "Address of the metrics endpoint (:8443 for HTTPS, :8080 for HTTP); 0 disables it.")
	flag.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS with authentication and authorization.")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader on a Lease so only one replica reconciles.")
	flag.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the operator's own).")
	flag.IntVar(&o.maxConcurrent, "max-concurrent-reconciles", controller.DefaultMaxConcurrentReconciles, "How many Proxies are reconciled at once.")
	flag.StringVar(&o.installationID, "installation-id", "", "Identity marked on every instance, so installations sharing a backend never touch each other's instances (default: the kube-system namespace's UID).")
	flag.DurationVar(&o.callTimeout, "provider-call-timeout", controller.DefaultCallTimeout, "Longest a single provider call may take.")
	flag.DurationVar(&o.runningResync, "running-resync", controller.DefaultRunningResync, "How often a running instance is read again to notice it vanished or stopped.")
	flag.DurationVar(&o.gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "How long in-flight reconciles may take to finish at shutdown.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		// Plain text, no stack trace: these are configuration errors a
		// human reads at start.
		fmt.Fprintln(os.Stderr, "egress-proxies-operator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	log := ctrl.Log.WithName("setup")
	if o.providersConfig == "" {
		return errors.New("--providers-config is required")
	}
	// A bad providers config stops the operator first, with every error's
	// path, before anything reaches the cluster.
	entries, err := registry.New(registry.DefaultTypes(), provider.Options{}).ReadFile(o.providersConfig)
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if o.installationID == "" {
		if o.installationID, err = defaultInstallationID(ctx, cfg); err != nil {
			return err
		}
	}
	log.Info("installation identity", "installationID", o.installationID)

	reg := registry.New(registry.DefaultTypes(), provider.Options{InstallationID: o.installationID})
	if err := reg.Apply(entries); err != nil {
		return fmt.Errorf("providers config %s: %w", o.providersConfig, err)
	}
	defer reg.Close()
	for _, e := range reg.Entries() {
		log.Info("provider configured", "provider", e.Name, "type", e.Type)
	}

	metricsOpts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure}
	if o.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
		// HTTP/2 stays off: it is exposed to the Rapid Reset and Stream
		// Cancellation CVEs (GHSA-qppj-fm5r-hxr3, GHSA-4374-p667-p6c8).
		metricsOpts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "egress-proxies-operator.proxy-operator.dev",
		LeaderElectionNamespace:       o.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &o.gracefulShutdown,
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}

	providersChanged := make(chan event.GenericEvent, 1)
	reg.OnChange(func() {
		select {
		case providersChanged <- controller.ProvidersChangedEvent():
		default: // one pending event already re-evaluates every Proxy
		}
	})
	rec := &controller.ProxyReconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Providers:     reg,
		Recorder:      mgr.GetEventRecorder("egress-proxies-operator"),
		CallTimeout:   o.callTimeout,
		RunningResync: o.runningResync,
	}
	if err := rec.SetupWithManager(mgr, o.maxConcurrent, providersChanged); err != nil {
		return fmt.Errorf("proxy controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	log.Info("starting manager")
	return mgr.Start(ctx)
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// defaultInstallationID is the kube-system namespace's UID: stable for the
// life of a cluster and different in every cluster, with no configuration.
func defaultInstallationID(ctx context.Context, cfg *rest.Config) (string, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", err
	}
	ns := &corev1.Namespace{}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Get(ctx, client.ObjectKey{Name: "kube-system"}, ns); err != nil {
		return "", fmt.Errorf("deriving --installation-id from the kube-system namespace: %w (set --installation-id explicitly)", err)
	}
	return string(ns.UID), nil
}
