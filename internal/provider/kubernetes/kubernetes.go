// Package kubernetes runs each Proxy as a Squid Pod in a Kubernetes cluster
// (the operator's own, by default), with a ConfigMap holding the generated
// squid.conf, a NetworkPolicy fencing the Pod's traffic and a Service giving
// the Pod a stable in-cluster name. The four objects share the instance
// name, carry the provider marks as labels and, when they live in the
// Proxy's own namespace, an OwnerReference to the Proxy, so that a bypassed
// finalizer cannot leak them. The ConfigMap, the NetworkPolicy and the
// Service are the provider's secondary resources (provider.SecondaryLister):
// those whose Pod is gone, which a crash between them and the Pod or a Pod
// removed by hand leaves, are listed for the garbage collector wherever
// they live.
//
// A ProxyGroup's members are such instances, labelled with the group's UID
// and spread across nodes; the group gets one Service over them, its
// endpoint, and a PodDisruptionBudget (group.go, provider.GroupFronter),
// which ListSecondary lists as objects of no instance.
//
// The provider talks to the API server with its own typed client built from
// a *rest.Config taken lazily from ctrl.GetConfig() on first use: the
// constructor never reaches the cluster.
package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/validation"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientlimit"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// Type is the provider type name used in the providers config.
const Type = "kubernetes"

// PollInterval is the pace at which the reconciler polls Get: a Pod is
// scheduled and ready within seconds.
const PollInterval = 2 * time.Second

// The provider's own client has no client-side rate limit unless the entry
// sets clientQPS, as the manager's has none unless --kube-api-qps sets one
// (the same rule, clientlimit.Apply). Its requests are bounded by the
// reconcile workers, not by a limiter: a pass makes at most three round
// trips of at most three requests, one at a time per Proxy, and its reads
// come from the cache; the API server's priority and fairness queues and
// shares what reaches it (the operator's service account is one flow of
// the workload-low level). A limit only queued a fleet's work in the
// operator: at Karpenter's 200/s, 1,000 Proxies took 4.6x the API server's
// own time to come up and 7.0x to go (make bench-fleet,
// docs/performance.md). DefaultClientBurst is the burst of a limit set with
// clientQPS alone.
const DefaultClientBurst = 300

// Provider runs instances as Pods. It implements provider.Provider,
// provider.Checker, provider.SecondaryLister, provider.InstanceWatcher (a
// watch of its Pods), provider.GroupFronter (a group's Service and
// PodDisruptionBudget) and io.Closer (the cache, the echo's observations).
type Provider struct {
	name string
	opts provider.Options
	cfg  Config
	// dest is what the Pods' Squid lets clients reach.
	dest *egress.Policy

	// restConfig returns the cluster config; ctrl.GetConfig in production.
	restConfig func() (*rest.Config, error)
	// wrap is a test seam: an extra transport wrapper applied innermost
	// (closest to the wire), so a test can fail or hold API calls. Nil in
	// production.
	wireSeam func(http.RoundTripper) http.RoundTripper
	// tracerProvider is a test seam for the child spans; nil means the
	// global provider, which telemetry.Setup installs.
	tracerProvider trace.TracerProvider

	// echoes observe the running Pods' egress address when the entry
	// names an egressIPEcho (echo.go).
	echoes echoes
	// cache holds this installation's objects and is the instance watch
	// (cache.go).
	cache objectCache

	mu     sync.Mutex
	client clientset.Interface
	// metaClient reads the secondary kinds' metadata for the cache.
	metaClient metadata.Interface
	// checkClient is the health check's, with a limiter of its own.
	checkClient clientset.Interface
	host        string
}

// checkQPS and checkBurst are the health check's own client-side limit. A
// check makes a handful of requests per interval; behind the workload's
// limiter, in a create or delete wave, it waited past its timeout and
// reported an API server that answered fine as Unreachable (make
// bench-fleet, 1,000 Proxies at the default clientQPS).
const (
	checkQPS   = 5
	checkBurst = 10
)

var (
	_ provider.Provider     = (*Provider)(nil)
	_ provider.Checker      = (*Provider)(nil)
	_ provider.GroupFronter = (*Provider)(nil)
)

// New builds a provider named name (the configured name, used in every error
// and log line). It does no I/O: the cluster config is loaded and the client
// built on the first call.
func New(name string, cfg Config, opts provider.Options) (*Provider, error) {
	return newWithConfig(name, cfg, opts, nil)
}

// newWithConfig is New with a given cluster config; nil means
// ctrl.GetConfig() on first use.
func newWithConfig(name string, cfg Config, opts provider.Options, rc *rest.Config) (*Provider, error) {
	cfg.Default()
	if errs := cfg.Validate(nil); len(errs) > 0 {
		return nil, provider.Wrap(name, "new", provider.ErrPermanent, errs.ToAggregate())
	}
	get := ctrl.GetConfig
	if rc != nil {
		get = func() (*rest.Config, error) { return rc, nil }
	}
	return &Provider{name: name, opts: opts, cfg: cfg, dest: cfg.destinations(), restConfig: get}, nil
}

// clientFor returns the API client, building it on first use. A failure is
// not cached, so a kubeconfig that appears later is picked up.
func (p *Provider) clientFor() (clientset.Interface, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		return p.client, nil
	}
	rc, err := p.restConfig()
	if err != nil {
		return nil, provider.Errorf(provider.ErrTransient, "loading the cluster config: %w", err)
	}
	// The entry's limit, or none, whatever the kubeconfig carried.
	rc = clientlimit.Apply(rc, p.cfg.ClientQPS, p.cfg.ClientBurst)
	rc.UserAgent = "egress-proxies-operator/" + Type + "-provider"
	// Wrap chains after any wrapper rc already has: the test seam is closest
	// to the wire, then the log line, then the span, so a span covers the
	// call as the API server answered it, failures included.
	if p.wireSeam != nil {
		rc.Wrap(p.wireSeam)
	}
	rc.Wrap(p.observeTransport)
	c, err := clientset.NewForConfig(rc)
	if err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "building the API client: %w", err)
	}
	crc := clientlimit.Apply(rc, checkQPS, checkBurst)
	cc, err := clientset.NewForConfig(crc)
	if err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "building the health check's API client: %w", err)
	}
	mc, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "building the metadata client: %w", err)
	}
	p.client, p.metaClient, p.checkClient, p.host = c, mc, cc, rc.Host
	return c, nil
}

// begin starts operation op: a cancelled ctx ends it at once, then the
// client is built if need be. The health check gets its own client, so it
// measures the API server, not the workload's limiter.
func (p *Provider) begin(ctx context.Context, op string) (clientset.Interface, error) {
	if err := provider.CtxErr(ctx, p.name, op); err != nil {
		return nil, err
	}
	c, err := p.clientFor()
	if err == nil {
		p.mu.Lock()
		mc := p.metaClient
		p.mu.Unlock()
		p.startCache(c, mc)
	}
	if err != nil || op != provider.OpCheck {
		return c, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checkClient, nil
}

// instanceID is the ID of the instance named name in namespace.
func instanceID(namespace, name string) string { return namespace + "/" + name }

// parseID splits an ID into namespace and name; both must be DNS labels
// (the instance name a DNS-1035 label, as InstanceName makes it), so a
// malformed ID is Permanent and never reaches the API server.
func parseID(id string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(id, "/")
	if !ok || namespace == "" || name == "" ||
		len(validation.IsDNS1123Label(namespace)) > 0 || len(validation.IsDNS1035Label(name)) > 0 {
		return "", "", provider.Errorf(provider.ErrPermanent,
			"malformed instance ID %q: want <namespace>/<instance name>", id)
	}
	return namespace, name, nil
}

// namespaceFor is where the instance of a Proxy in proxyNamespace lives.
func (p *Provider) namespaceFor(proxyNamespace string) string {
	if p.cfg.Namespace != "" {
		return p.cfg.Namespace
	}
	return proxyNamespace
}

// ours says whether labels carry this installation's managed mark.
func (p *Provider) ours(labels map[string]string) bool {
	m := provider.MarksFromLabels(labels)
	return m.Managed && m.Installation == p.opts.InstallationID
}

func (p *Provider) String() string { return fmt.Sprintf("%s provider %q", Type, p.name) }
