package operator

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// replaceFile swaps the file's content atomically, as an editor or a
// config-management tool does.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".providers.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestConfigReloadEndToEnd: the running operator picks up a provider added
// to its config file and takes up the Proxy that waited for it; an invalid
// change is refused and the providers keep running.
func TestConfigReloadEndToEnd(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "reload")
	path := writeConfig(t, "providers:\n- {name: reload-a, type: local, local: {bindCIDR: 127.0.123.0/24}}\n")
	op, err := New(ctx, env.Config, Options{
		ProvidersConfig: path, MetricsAddr: "0", ProbeAddr: "0",
		InstallationID: "reload-test", Namespaces: []string{ns}, SkipControllerNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	ready := func(name string) func() error {
		return func() error { return proxyReady(ctx, key(name)) }
	}
	for _, p := range []struct{ name, provider string }{{"on-a", "reload-a"}, {"on-b", "reload-b"}} {
		px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name}, Spec: egressv1.ProxySpec{Provider: p.provider}}
		if err := env.Client.Create(ctx, px); err != nil {
			t.Fatal(err)
		}
	}
	testenv.EventuallyNil(t, "on-a Ready", ready("on-a"))
	testenv.EventuallyNil(t, "on-b waiting for its provider", func() error {
		return proxyReason(ctx, key("on-b"), metav1.ConditionFalse, egressv1.ReasonProviderNotFound)
	})

	replaceFile(t, path, "providers:\n- {name: reload-a, type: local, local: {bindCIDR: 127.0.123.0/24}}\n- {name: reload-b, type: local, local: {bindCIDR: 127.0.124.0/24}}\n")
	testenv.EventuallyNil(t, "on-b Ready once reload-b is configured", ready("on-b"))
	a, err := op.Registry.Get("reload-a")
	if err != nil {
		t.Fatal(err)
	}

	replaceFile(t, path, "providers:\n- {name: reload-a, type: local, local: {bindCIDR: 10.0.0.0/24}}\n")
	testenv.EventuallyNil(t, "the refusal is recorded", reloadRefused)
	if got, err := op.Registry.Get("reload-b"); err != nil || got == nil {
		t.Fatalf("an invalid change removed reload-b: %v", err)
	}
	if got, err := op.Registry.Get("reload-a"); err != nil || got != a {
		t.Errorf("an invalid change rebuilt or removed reload-a: %v", err)
	}
	for _, name := range []string{"on-a", "on-b"} {
		if err := ready(name)(); err != nil {
			t.Errorf("a Proxy lost Ready after a refused change: %v", err)
		}
	}
}
