package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// The Service each instance gets, by serviceType: headless by default (no
// ClusterIP drawn from the Service range), a ClusterIP one when asked.
func TestServiceTypeShapesTheService(t *testing.T) {
	for _, tc := range []struct {
		serviceType   string
		wantClusterIP string
	}{
		{"", corev1.ClusterIPNone},
		{ServiceHeadless, corev1.ClusterIPNone},
		{ServiceClusterIP, ""},
	} {
		t.Run("serviceType="+tc.serviceType, func(t *testing.T) {
			p := pureProvider(t, Config{ServiceType: tc.serviceType})
			s, err := p.resolve(baseRequest())
			if err != nil {
				t.Fatal(err)
			}
			svc := p.buildService(s)
			if svc.Spec.ClusterIP != tc.wantClusterIP || svc.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("service type %s clusterIP %q, want ClusterIP with clusterIP %q", svc.Spec.Type, svc.Spec.ClusterIP, tc.wantClusterIP)
			}
		})
	}
}

func TestServiceTypeValidation(t *testing.T) {
	_, errs := Parse([]byte(`{"serviceType": "LoadBalancer"}`), field.NewPath("providers").Index(0).Child("kubernetes"))
	want := `providers[0].kubernetes.serviceType: Unsupported value: "LoadBalancer": supported values: "Headless", "ClusterIP"`
	if got := errs.ToAggregate(); got == nil || got.Error() != want {
		t.Errorf("errors %v, want %q", got, want)
	}
}

// A full Service range is a capacity answer (issue 13: with a /24 range,
// every Service after the 256th failed with "range is full", classed
// Transient, so 747 Proxies retried for ever, re-creating their ConfigMap
// and Service each time). On a real kube-apiserver whose range holds 6
// addresses: with serviceType ClusterIP the 7th instance's Create is
// ErrQuotaExceeded, its message naming the range and the fix; with the
// default (headless) instances need no address, so more are created on the
// same full range.
func TestServiceRangeFullIsQuotaExceeded(t *testing.T) {
	e, err := testenv.New(testenv.WithAPIServerArg("service-cluster-ip-range", "10.0.0.0/29"),
		testenv.WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	cs, err := clientset.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "svc-range"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(p provider.Provider, proxy string) error {
		_, err := p.Create(ctx, apiRequest(ns, proxy))
		return err
	}

	clusterIP := bounded(newAPIProvider(t, "inst", Config{ServiceType: ServiceClusterIP}, e.Config))
	var full error
	created := 0
	for i := 0; i < 20 && full == nil; i++ {
		if err := create(clusterIP, fmt.Sprintf("cip-%d", i)); err != nil {
			full = err
			break
		}
		created++
	}
	// 10.0.0.0/29: 8 addresses, less the network and broadcast ones, less
	// the kubernetes Service's own.
	if created != 5 {
		t.Errorf("%d ClusterIP instances created before the first failure, want 5 (a /29 less the kubernetes Service)", created)
	}
	if !errors.Is(full, provider.ErrQuotaExceeded) {
		t.Fatalf("Create on a full Service range: %v, want ErrQuotaExceeded", full)
	}
	for _, want := range []string{"range is full", "Service ClusterIP range", "--service-cluster-ip-range", "serviceType: Headless"} {
		if !strings.Contains(full.Error(), want) {
			t.Errorf("error %q does not say %q", full, want)
		}
	}
	t.Logf("Create on a full range: %v", full)

	headless := bounded(newAPIProvider(t, "inst", Config{}, e.Config))
	for i := 0; i < 10; i++ {
		if err := create(headless, fmt.Sprintf("hl-%d", i)); err != nil {
			t.Fatalf("headless instance %d on the full range: %v", i, err)
		}
	}
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	headlessN := 0
	for _, s := range svcs.Items {
		if strings.Contains(s.Name, "-hl-") && s.Spec.ClusterIP == corev1.ClusterIPNone {
			headlessN++
		}
	}
	if headlessN != 10 {
		t.Errorf("%d headless Services, want 10", headlessN)
	}
}
