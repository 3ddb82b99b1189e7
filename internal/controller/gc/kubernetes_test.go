package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// kubernetesEntry is a kubernetes provider entry built by the registry as
// main builds it (method boundary, in-flight count), on the test's API
// server, running its instances in namespace.
func (w *world) kubernetesEntry(name, namespace string) *registry.Entry {
	w.t.Helper()
	// The provider takes its cluster from ctrl.GetConfig, as in production.
	w.t.Setenv("KUBECONFIG", env.KubeconfigFile(w.t))
	reg := registry.New(registry.DefaultTypes(), provider.Options{InstallationID: w.installation})
	w.t.Cleanup(reg.Close)
	settings, err := json.Marshal(map[string]any{"namespace": namespace})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := reg.Apply([]config.Entry{{Name: name, Type: "kubernetes", Settings: settings,
		Path: field.NewPath("providers").Index(0)}}); err != nil {
		w.t.Fatal(err)
	}
	e, err := reg.Get(name)
	if err != nil {
		w.t.Fatal(err)
	}
	w.providers.mu.Lock()
	w.providers.list = append(w.providers.list, e)
	w.providers.mu.Unlock()
	return e
}

// plantObjects makes what a crash between the provider's ConfigMap and its
// Pod leaves: the instance's ConfigMap (and Service) with the marks and the
// instance label, and no Pod.
func (w *world) plantObjects(namespace, name, uid string, service bool) {
	w.t.Helper()
	labels := provider.Marks{Managed: true, UID: uid, Installation: w.installation}.Labels()
	labels["app.kubernetes.io/instance"] = name
	meta := metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"squid.conf": "# planted\n"}}); err != nil {
		w.t.Fatal(err)
	}
	if !service {
		return
	}
	svc := &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app.kubernetes.io/instance": name},
		Ports:    []corev1.ServicePort{{Name: "proxy", Port: 3128}},
	}}
	if err := env.Client.Create(ctx, svc); err != nil {
		w.t.Fatal(err)
	}
}

// objectExists reports whether obj's kind named name is in namespace.
func objectExists(t *testing.T, obj client.Object, namespace, name string) bool {
	t.Helper()
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("reading %s/%s: %v", namespace, name, err)
	}
	return true
}

// TestKubernetesSecondariesCollected (issue 8, item 2 on the kubernetes
// provider): a Delete cut after the Pod leaves a ConfigMap
// (and, from a Pod removed by hand, a Service) that nothing listed before;
// on the real API server the collector now removes them through the
// provider once they are older than the grace, and never touches the
// ConfigMap and Service of an instance whose Pod exists, nor those of a
// Proxy whose create is still in flight.
func TestKubernetesSecondariesCollected(t *testing.T) {
	// CreationTimestamp is the API server's clock: the collector's starts
	// at the real now.
	w := newWorld(t, "sec-k8s", clocktesting.NewFakeClock(time.Now()))
	instances := newNamespace(t)
	e := w.kubernetesEntry("pods", instances)

	live := w.proxy("live", "pods")
	req := provider.CreateRequest{
		Name:      provider.InstanceName(live.Namespace, live.Name, string(live.UID), "s1"),
		Namespace: live.Namespace, ProxyName: live.Name, UID: string(live.UID), Port: 3128,
		AllowedSourceRanges: []string{"10.0.0.0/8"},
	}
	inst, err := e.Provider.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	w.setStatus(live, func(st *egressv1.ProxyStatus) { st.ProviderID, st.InstanceName = inst.ID, req.Name })

	// The crashed create's Proxy is gone: its objects are orphans.
	crashedName := provider.InstanceName(w.ns, "crashed", "uid-of-a-deleted-proxy", "s1")
	w.plantObjects(instances, crashedName, "uid-of-a-deleted-proxy", true)
	// This Proxy's create is in flight (no providerID): the reconciler's
	// next Create uses what the crashed one left.
	creating := w.proxy("creating", "pods")
	w.setStatus(creating, func(*egressv1.ProxyStatus) {})
	creatingName := provider.InstanceName(creating.Namespace, creating.Name, string(creating.UID), "s1")
	w.plantObjects(instances, creatingName, string(creating.UID), false)

	// The provider lists from a cache of its own objects: what the test
	// planted behind its back is listed once its watch brought it (a
	// collector pass that misses an object just made only collects it a
	// pass later).
	testenv.EventuallyNil(t, "the planted objects in the provider's listing", func() error {
		list, err := e.Secondary.ListSecondary(context.Background())
		if err != nil {
			return err
		}
		if len(list) != 6 {
			return fmt.Errorf("%d secondaries listed, want 6: %+v", len(list), list)
		}
		return nil
	})
	res := w.collect()
	if res.SecondaryErr != nil || res.SecondariesListed != 6 || res.SecondariesYoung != 2 || len(res.SecondaryActions) != 0 {
		t.Fatalf("first pass: %+v; want 6 secondaries listed (the live instance's ConfigMap, NetworkPolicy and Service, 2 orphaned, 1 in flight) and the 2 orphans young", res)
	}
	w.clock.Step(grace + time.Second)
	var collected []Action
	for pass := 0; pass < 3; pass++ {
		res = w.collect()
		if res.SecondaryErr != nil {
			t.Fatalf("pass %d: %v", pass, res.SecondaryErr)
		}
		collected = append(collected, res.SecondaryActions...)
		w.clock.Step(w.c.Interval)
	}
	kinds := map[string]bool{}
	for _, a := range collected {
		if a.Instance != crashedName || a.Reason != ReasonOrphan || a.Err != nil || a.UID != "uid-of-a-deleted-proxy" {
			t.Errorf("collected %+v; want only the crashed create's objects, as orphans", a)
		}
		kinds[a.Kind] = true
	}
	if len(collected) != 2 || !kinds["configmap"] || !kinds["service"] {
		t.Errorf("collected %+v over 3 passes past the grace; want the crashed create's configmap and service once each", collected)
	}
	if objectExists(t, &corev1.ConfigMap{}, instances, crashedName) || objectExists(t, &corev1.Service{}, instances, crashedName) {
		t.Error("the crashed create's ConfigMap or Service is still on the API server")
	}
	for what, obj := range map[string]client.Object{"pod": &corev1.Pod{}, "service": &corev1.Service{}, "configmap": &corev1.ConfigMap{}} {
		if !objectExists(t, obj, instances, req.Name) {
			t.Errorf("the live instance's %s was deleted", what)
		}
	}
	if !objectExists(t, &corev1.ConfigMap{}, instances, creatingName) {
		t.Error("the ConfigMap of a Proxy whose create is in flight was deleted")
	}
	if len(res.Actions) != 0 {
		t.Errorf("instance actions %+v; want none", res.Actions)
	}
}
