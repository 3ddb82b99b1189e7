package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// TestKubernetesProviderApplyToDeleted takes a Proxy on the kubernetes
// provider from apply to Ready and back to deleted against the real API
// server, the test playing the kubelet: the Pod, its Service and its
// config are made, the endpoint is the Service's stable name, and nothing
// is left after the deletion.
func TestKubernetesProviderApplyToDeleted(t *testing.T) {
	// The provider reads its cluster config the way the operator does.
	t.Setenv("KUBECONFIG", env.KubeconfigFile(t))
	kp, err := kubernetes.New("pods", kubernetes.Config{}, providerOptions())
	if err != nil {
		t.Fatal(err)
	}
	// Its cache's watches hold requests open that the API server would
	// wait for when it stops.
	t.Cleanup(func() { _ = kp.Close() })
	entry := &registry.Entry{Name: "pods", Type: "kubernetes", Provider: kp, Checker: kp, PollInterval: kubernetes.PollInterval}
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pods": entry}})
	d.create(newProxy("web", "pods"))

	px := d.reconcileUntil("web", 3, "Provisioning", hasReason("False/Provisioning"))
	name := px.Status.InstanceName
	ctx := context.Background()
	pod := &corev1.Pod{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: d.ns, Name: name}, pod); err != nil {
		t.Fatalf("no Pod for the Proxy: %v", err)
	}
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != px.UID {
		t.Errorf("Pod owner references = %+v", pod.OwnerReferences)
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: d.ns, Name: name}, &corev1.Service{}); err != nil {
		t.Fatalf("no Service for the Proxy: %v", err)
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: d.ns, Name: name}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("no Squid ConfigMap for the Proxy: %v", err)
	}

	// The kubelet: running, an address, ready. No traffic is sent to it.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "192.0.2.10"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	px = d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	if want := name + "." + d.ns + ".svc:3128"; px.Status.Endpoint != want || px.Status.IP != "192.0.2.10" {
		t.Errorf("endpoint %q ip %q, want %q and the Pod IP", px.Status.Endpoint, px.Status.IP, want)
	}

	if err := env.Client.Delete(ctx, px); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10 && d.get("web") != nil; i++ {
		d.reconcile("web")
	}
	if d.get("web") != nil {
		t.Fatal("Proxy not released")
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Service{}, &corev1.ConfigMap{}} {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: d.ns, Name: name}, obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T %s still there after the deletion (err %v)", obj, name, err)
		}
	}
}
