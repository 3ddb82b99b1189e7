package kubernetes

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// TestAdoptionFillsEmptyUIDMarkOnEveryObject (issue 7, item 3): when Create
// adopts a Pod, Service and ConfigMap whose UID label is empty (a crash
// left them before the label was written), it writes the request's UID into
// each of them on the API server, not only into the Instance it returns; the
// conformance case AdoptionFillsEmptyUIDMark sees the Pod only.
func TestAdoptionFillsEmptyUIDMarkOnEveryObject(t *testing.T) {
	ns := newNamespace(t, "adopt-fill", nil)
	cs := adminClient(t)
	ctx := context.Background()
	const installation = "inst-fill"
	uid := "uid-fill-" + randHex(t)
	req := provider.CreateRequest{
		Name: provider.InstanceName(ns, "web", uid, ""), Namespace: ns, ProxyName: "web", UID: uid,
		Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8"},
	}
	empty := provider.Marks{Managed: true, Installation: installation}.Labels()
	meta := metav1.ObjectMeta{Name: req.Name, Namespace: ns, Labels: empty}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: meta,
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 3128}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: meta,
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "planted", Image: "planted:1"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	p := newAPIProvider(t, installation, Config{}, nil)
	inst, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create over our own objects with an empty UID label: %v", err)
	}
	if inst.UID != uid {
		t.Errorf("Create returned UID %q, want %q", inst.UID, uid)
	}
	objects := map[string]func() (metav1.Object, error){
		"pod":     func() (metav1.Object, error) { return cs.CoreV1().Pods(ns).Get(ctx, req.Name, metav1.GetOptions{}) },
		"service": func() (metav1.Object, error) { return cs.CoreV1().Services(ns).Get(ctx, req.Name, metav1.GetOptions{}) },
		"configmap": func() (metav1.Object, error) {
			return cs.CoreV1().ConfigMaps(ns).Get(ctx, req.Name, metav1.GetOptions{})
		},
	}
	for kind, get := range objects {
		obj, err := get()
		if err != nil {
			t.Errorf("reading the %s: %v", kind, err)
			continue
		}
		got := provider.MarksFromLabels(obj.GetLabels())
		if want := (provider.Marks{Managed: true, UID: uid, Installation: installation}); got != want {
			t.Errorf("the adopted %s has marks %+v on the API server, want %+v", kind, got, want)
		}
	}
}
