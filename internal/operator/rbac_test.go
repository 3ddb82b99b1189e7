package operator

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestOperatorRunsWithGeneratedRBAC runs the operator as a user that holds
// exactly the generated ClusterRole and the leader-election Role: a missing
// RBAC marker shows up here as a Proxy that never gets Ready or a
// ProviderHealth that never appears.
func TestOperatorRunsWithGeneratedRBAC(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := env.Namespace(t, "rbac")
	user, err := env.Environment.AddUser(envtest.User{Name: "rbac-test-operator"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, Name: "rbac-test-operator", APIGroup: rbacv1.GroupName}

	cr := &rbacv1.ClusterRole{}
	readYAML(t, filepath.Join(root, "config/rbac/role.yaml"), cr)
	cr.Name = "rbac-test-manager-role"
	mustCreate(t, cr)
	mustCreate(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-manager"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{subject}})
	le := &rbacv1.Role{}
	readYAML(t, filepath.Join(root, "config/rbac/leader_election_role.yaml"), le)
	le.Namespace = ns
	mustCreate(t, le)
	mustCreate(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rbac-test-le"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: le.Name},
		Subjects: []rbacv1.Subject{subject}})

	op, err := New(ctx, user.Config(), Options{
		ProvidersConfig: writeConfig(t, "providers:\n- {name: rbac-local, type: local, local: {bindCIDR: 127.0.122.0/24}}\n"),
		MetricsAddr:     "0", ProbeAddr: "0",
		// No --installation-id: deriving it from kube-system needs its RBAC too.
		LeaderElect: true, LeaderElectionNamespace: ns,
		SkipControllerNameValidation: true,
		HealthInterval:               200 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("operator with the generated RBAC: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: egressv1.ProxySpec{Provider: "rbac-local"}}
	if err := env.Client.Create(ctx, px); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Proxy Ready under the generated RBAC", func() bool {
		got := &egressv1.Proxy{}
		return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, got) == nil &&
			meta.IsStatusConditionTrue(got.Status.Conditions, egressv1.ConditionReady)
	})
	eventually(t, "ProviderHealth written under the generated RBAC", func() bool {
		ph := &egressv1.ProviderHealth{}
		return env.Client.Get(ctx, types.NamespacedName{Name: "rbac-local"}, ph) == nil &&
			meta.IsStatusConditionTrue(ph.Status.Conditions, egressv1.ConditionHealthy)
	})
	if err := env.Client.Delete(ctx, px); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Proxy deleted under the generated RBAC", func() bool {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &egressv1.Proxy{}) != nil
	})
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

// eventually polls cond; the bound only stops a hung test.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
