package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// conformanceNamespace holds the suite's instances; installations keep the
// cases apart.
const conformanceNamespace = "conformance"

// TestConformance runs the shared contract suite against a real
// kube-apiserver, the test playing the kubelet by writing Pod status.
func TestConformance(t *testing.T) {
	cs := adminClient(t)
	ensureNamespace(t, conformanceNamespace, nil)
	providertest.Run(t, providertest.Harness{
		Name: testProviderName,
		Type: Type,
		New: func(t *testing.T, installation string) (provider.Provider, providertest.Backend) {
			b := &apiBackend{cs: cs, ns: conformanceNamespace}
			seamed := func() *Provider {
				p := newAPIProvider(t, installation, Config{}, nil)
				p.wireSeam = b.transport
				// A read the cache would answer meets the fault queued
				// for it: while one is, the provider reads live.
				p.cache.bypass = func() bool { return b.faults.Armed(provider.OpGet, provider.OpList) }
				b.provider = p
				return p
			}
			p := seamed()
			b.restart = func() provider.Provider { return seamed() } // a restarted operator: a fresh provider, same API server
			return p, b
		},
		Request: func(_ *testing.T, proxyName, uid string) provider.CreateRequest {
			return provider.CreateRequest{
				Namespace: conformanceNamespace, ProxyName: proxyName, UID: uid, Port: 3128,
				AllowedSourceRanges: []string{"10.0.0.0/8"},
			}
		},
		WaitRunning: func(ctx context.Context, t *testing.T, p provider.Provider, id string) provider.Instance {
			return waitRunning(ctx, t, cs, p, id)
		},
	})
}

// apiBackend acts on the API server behind the provider's back, and sits
// in the provider's transport to fail or hold its calls.
type apiBackend struct {
	cs      clientset.Interface
	ns      string
	faults  providertest.Faults
	restart func() provider.Provider
	// provider is the one the suite calls now (the last made), whose
	// cache a planted object is awaited in.
	provider *Provider
}

var (
	_ providertest.Backend   = (*apiBackend)(nil)
	_ providertest.Inspector = (*apiBackend)(nil)
	_ providertest.Restarter = (*apiBackend)(nil)
)

// Restart: the provider keeps nothing in memory, so there is nothing to
// stop.
func (b *apiBackend) Restart(*testing.T) provider.Provider { return b.restart() }

// transport is the provider's wire seam: a queued failure answers the next
// request of its operation the way the API server would, a hold keeps it
// until release or the request's ctx ends.
func (b *apiBackend) transport(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		op := opOfRequest(req)
		if op != "" {
			injected, err := b.faults.Next(req.Context(), op)
			if err != nil {
				return nil, err
			}
			if injected != nil {
				return classResponse(req, injected), nil
			}
		}
		return next.RoundTrip(req)
	})
}

// Vanish deletes the instance's objects at once, as a human would.
func (b *apiBackend) Vanish(t *testing.T, id string) {
	t.Helper()
	ns, name, err := parseID(id)
	if err != nil {
		t.Fatalf("Vanish(%q): %v", id, err)
	}
	ctx := context.Background()
	now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	for _, del := range []func() error{
		func() error { return b.cs.CoreV1().Pods(ns).Delete(ctx, name, now) },
		func() error { return b.cs.CoreV1().Services(ns).Delete(ctx, name, now) },
		func() error { return b.cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, now) },
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("Vanish(%q): %v", id, err)
		}
	}
	// Unscheduled Pods go at once; wait for the API server to agree.
	testenv.EventuallyNil(t, "pod "+id+" gone after Vanish", func() error {
		pod, err := b.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			t.Fatalf("Vanish(%q): reading the pod: %v", id, err)
		}
		return fmt.Errorf("pod still there (deletionTimestamp %v, finalizers %v)", pod.DeletionTimestamp, pod.Finalizers)
	})
}

// Plant creates a Pod named name with marks as labels (none for nil), as
// another installation or a human would.
func (b *apiBackend) Plant(t *testing.T, name string, marks *provider.Marks) {
	t.Helper()
	var labels map[string]string
	if marks != nil {
		labels = marks.Labels()
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "planted", Image: "planted:1"}}},
	}
	if _, err := b.cs.CoreV1().Pods(b.ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Plant(%q): %v", name, err)
	}
}

func (b *apiBackend) FailNext(_ *testing.T, op string, class error) { b.faults.FailNext(op, class) }

func (b *apiBackend) Block(_ *testing.T, op string) func() { return b.faults.Block(op) }

func (b *apiBackend) Inspect(t *testing.T, name string) (*provider.Marks, bool) {
	t.Helper()
	pod, err := b.cs.CoreV1().Pods(b.ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	_, managed := pod.Labels[provider.MarkManaged]
	_, uid := pod.Labels[provider.MarkUID]
	_, inst := pod.Labels[provider.MarkInstallation]
	if !managed && !uid && !inst {
		return nil, true
	}
	m := provider.MarksFromLabels(pod.Labels)
	return &m, true
}
