package operator

import (
	"context"
	"flag"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// runOperator starts the operator with o (over env's API server) until the
// test ends.
func runOperator(t *testing.T, cfg *rest.Config, o Options) *Operator {
	t.Helper()
	op, err := New(context.Background(), cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
	return op
}

// TestManagedFieldsStrippedFromCachedObjects: item 10, "managed fields
// stripped from cached objects". The API server keeps managedFields on
// every object; the manager's cache, which holds every Proxy and
// ProviderHealth for the operator's life, keeps none.
func TestManagedFieldsStrippedFromCachedObjects(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "mf")
	op := runOperator(t, env.Config, Options{
		ProvidersConfig: writeConfig(t, "providers:\n- {name: mf-local, type: local, local: {bindCIDR: 127.0.125.0/24}}\n"),
		MetricsAddr:     "0", ProbeAddr: "0",
		InstallationID: "managed-fields", Namespaces: []string{ns}, SkipControllerNameValidation: true,
	})
	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: egressv1.ProxySpec{Provider: "mf-local"}}
	if err := env.Client.Create(ctx, px); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		key  types.NamespacedName
		obj  func() client.Object
	}{
		{"Proxy", types.NamespacedName{Namespace: ns, Name: "web"}, func() client.Object { return &egressv1.Proxy{} }},
		{"ProviderHealth", types.NamespacedName{Name: "mf-local"}, func() client.Object { return &egressv1.ProviderHealth{} }},
	} {
		server := c.obj()
		testenv.EventuallyNil(t, c.what+" on the API server", func() error { return env.Client.Get(ctx, c.key, server) })
		if len(server.GetManagedFields()) == 0 {
			t.Fatalf("%s: the API server holds no managedFields; the test proves nothing", c.what)
		}
		cached := c.obj()
		testenv.EventuallyNil(t, c.what+" in the manager's cache", func() error { return op.Manager.GetClient().Get(ctx, c.key, cached) })
		if mf := cached.GetManagedFields(); len(mf) != 0 {
			t.Errorf("%s read from the manager's cache holds %d managedFields entries, want none", c.what, len(mf))
		}
	}
}

// TestExplicitClientRatePolicy: item 10, "an explicit, documented client
// rate policy for the manager". The manager's clients get the operator's
// own policy, whatever the kubeconfig set: by default no client-side limit
// (QPS -1, issue 13: a limit only queued a fleet's writes in the operator),
// or the limit --kube-api-qps and --kube-api-burst ask for.
func TestExplicitClientRatePolicy(t *testing.T) {
	for _, tc := range []struct {
		what      string
		args      []string
		wantQPS   float32
		wantBurst int
		// kubeconfigQPS is the QPS the caller's config carries; 0 is what
		// ctrl.GetConfig returns for a kubeconfig that sets none (-1).
		kubeconfigQPS float32
	}{
		{"defaults: no limit", nil, -1, DefaultKubeAPIBurst, 0},
		{"defaults over a kubeconfig's limit", nil, -1, DefaultKubeAPIBurst, 5},
		{"flags", []string{"--kube-api-qps=7.5", "--kube-api-burst=9"}, 7.5, 9, 0},
		{"limit turned off", []string{"--kube-api-qps=-1"}, -1, DefaultKubeAPIBurst, 20},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var o Options
			fs := flag.NewFlagSet("operator", flag.ContinueOnError)
			o.BindFlags(fs)
			if err := fs.Parse(append([]string{
				"--providers-config=" + writeConfig(t, "providers:\n- {name: rate, type: local, local: {bindCIDR: 127.0.126.0/24}}\n"),
				"--installation-id=rate", "--health-probe-bind-address=0",
			}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			o.SkipControllerNameValidation = true
			cfg := rest.CopyConfig(env.Config)
			cfg.QPS, cfg.Burst = -1, 0
			if tc.kubeconfigQPS != 0 {
				cfg.QPS, cfg.Burst = tc.kubeconfigQPS, 2*int(tc.kubeconfigQPS)
			}
			callers := cfg.QPS
			op, err := New(context.Background(), cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(op.close)
			got := op.Manager.GetConfig()
			if got.QPS != tc.wantQPS || got.Burst != tc.wantBurst {
				t.Errorf("the manager's clients run with QPS %v burst %d, want %v and %d", got.QPS, got.Burst, tc.wantQPS, tc.wantBurst)
			}
			// The clients are built from that config: a REST client made
			// from it the way controller-runtime makes its own limits the
			// same way.
			rc, err := rest.RESTClientForConfigAndClient(restConfigFor(got), op.Manager.GetHTTPClient())
			if err != nil {
				t.Fatal(err)
			}
			if rl := rc.GetRateLimiter(); (rl == nil) != (tc.wantQPS < 0) || (rl != nil && rl.QPS() != tc.wantQPS) {
				t.Errorf("rate limiter %v, want QPS %v", rl, tc.wantQPS)
			}
			if cfg.QPS != callers {
				t.Error("New changed the caller's config")
			}
		})
	}
	if err := (Options{ProvidersConfig: "x", KubeAPIBurst: -1}).checkFlags(); err == nil || !strings.Contains(err.Error(), "--kube-api-burst -1") {
		t.Errorf("a negative burst: %v", err)
	}
}

// restConfigFor is cfg ready for a plain REST client of the core group.
func restConfigFor(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return c
}

func TestPprofAddress(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "", ""},
		{"0", "", ""},
		{":6060", "127.0.0.1:6060", ""}, // no host: loopback, never every interface
		{"127.0.0.1:6060", "127.0.0.1:6060", ""},
		{"[::1]:6060", "[::1]:6060", ""},
		{"0.0.0.0:6060", "0.0.0.0:6060", ""}, // every interface only when named
		{"6060", "", `--pprof-bind-address "6060"`},
	} {
		got, err := pprofAddress(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("pprofAddress(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
	if err := (Options{ProvidersConfig: "x", PprofAddr: "6060"}).checkFlags(); err == nil {
		t.Error("checkFlags took a pprof address without a port")
	}
	if got := managerOptions(Options{PprofAddr: ":6060"}).PprofBindAddress; got != "127.0.0.1:6060" {
		t.Errorf("the manager's pprof address = %q, want 127.0.0.1:6060", got)
	}
	if got := managerOptions(Options{}).PprofBindAddress; got != "" {
		t.Errorf("the manager serves pprof at %q by default, want off", got)
	}
}
