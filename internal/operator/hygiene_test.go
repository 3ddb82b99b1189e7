package operator

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
// rate policy for the manager". ctrl.GetConfig hands main a config with
// QPS -1 (no client-side limit at all); the manager's clients get the
// operator's own limits instead.
func TestExplicitClientRatePolicy(t *testing.T) {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // what ctrl.GetConfig returns for a kubeconfig that sets none
	op, err := New(context.Background(), cfg, Options{
		ProvidersConfig: writeConfig(t, "providers:\n- {name: rate, type: local, local: {bindCIDR: 127.0.126.0/24}}\n"),
		MetricsAddr:     "0", ProbeAddr: "0", InstallationID: "rate", SkipControllerNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.close)
	if got := op.Manager.GetConfig(); got.QPS <= 0 || got.Burst <= 0 {
		t.Errorf("the manager's clients run with QPS %v burst %d, want an explicit client-side limit", got.QPS, got.Burst)
	}
}
