package operator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

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
	user := userWithRoles(t, "rbac-test-operator", filepath.Join(root, "config/rbac/role.yaml"))
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, Name: "rbac-test-operator", APIGroup: rbacv1.GroupName}
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
	key := types.NamespacedName{Namespace: ns, Name: "web"}
	testenv.EventuallyNil(t, "Proxy Ready under the generated RBAC", func() error {
		return proxyReady(ctx, key)
	})
	testenv.EventuallyNil(t, "ProviderHealth written under the generated RBAC", func() error {
		ph := &egressv1.ProviderHealth{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: "rbac-local"}, ph); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(ph.Status.Conditions, egressv1.ConditionHealthy) {
			return fmt.Errorf("not Healthy: %+v", ph.Status.Conditions)
		}
		return nil
	})
	// Leader election records a core/v1 Event when it takes the lease;
	// without the right to it the event is dropped (and logged as refused).
	testenv.EventuallyNil(t, "the leader election's event written under the generated RBAC", func() error {
		evs := &corev1.EventList{}
		if err := env.Client.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "LeaderElection" {
				return nil
			}
		}
		return fmt.Errorf("no LeaderElection event among %d events in %s", len(evs.Items), ns)
	})
	if err := env.Client.Delete(ctx, px); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "Proxy deleted under the generated RBAC", func() error {
		return proxyGone(ctx, key)
	})
}

// proxyReady is nil once the Proxy's Ready condition is True.
func proxyReady(ctx context.Context, key types.NamespacedName) error {
	return proxyReason(ctx, key, metav1.ConditionTrue, "")
}

// proxyReason is nil once the Proxy's Ready condition has status and reason
// (any reason when reason is "").
func proxyReason(ctx context.Context, key types.NamespacedName, status metav1.ConditionStatus, reason string) error {
	px := &egressv1.Proxy{}
	if err := env.Client.Get(ctx, key, px); err != nil {
		return err
	}
	c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady)
	if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
		return fmt.Errorf("Proxy %s: Ready = %+v, want %s/%s", key, c, status, reason)
	}
	return nil
}

// proxyGone is nil once the Proxy no longer exists.
func proxyGone(ctx context.Context, key types.NamespacedName) error {
	px := &egressv1.Proxy{}
	err := env.Client.Get(ctx, key, px)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("Proxy %s still there (deletionTimestamp %v, finalizers %v)", key, px.DeletionTimestamp, px.Finalizers)
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

// userWithRoles is a user of the test API server bound to the ClusterRoles
// of these files, and nothing else.
func userWithRoles(t *testing.T, name string, roleFiles ...string) *envtest.AuthenticatedUser {
	t.Helper()
	user, err := env.Environment.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, Name: name, APIGroup: rbacv1.GroupName}
	for i, f := range roleFiles {
		cr := &rbacv1.ClusterRole{}
		readYAML(t, f, cr)
		cr.Name = fmt.Sprintf("%s-%d", name, i)
		mustCreate(t, cr)
		mustCreate(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects: []rbacv1.Subject{subject}})
	}
	return user
}

// TestAddressPoolsRunWithTheirComponentRBAC runs the operator with the
// generated ClusterRole and the address-pools component's, an entry with
// an addressPool: the Proxy's claim is bound by the built-in allocator,
// its instance made on the address, and its deletion releases both. A
// right missing from config/components/address-pools shows up here.
func TestAddressPoolsRunWithTheirComponentRBAC(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := env.Namespace(t, "rbac-pool")
	user := userWithRoles(t, "rbac-test-pools", filepath.Join(root, "config/rbac/role.yaml"),
		filepath.Join(root, "config/components/address-pools/role.yaml"))
	fp := newFakeProviders()
	typs := fp.types()
	pooled := typs["fake"]
	pooled.AddressPools = true
	typs["fake"] = pooled
	deleteProviderHealthAtEnd(t, "rbac-pool")
	op, err := New(ctx, user.Config(), Options{
		ProvidersConfig: writeConfig(t, "providers:\n- {name: rbac-pool, type: fake, addressPool: {addresses: [192.0.2.10-192.0.2.11], prefix: 24, gateway: 192.0.2.1}}\n"),
		MetricsAddr:     "0", ProbeAddr: "0", InstallationID: "rbac-pool", Namespaces: []string{ns},
		SkipControllerNameValidation: true, HealthInterval: 200 * time.Millisecond, Types: typs,
	})
	if err != nil {
		t.Fatalf("operator with the address pools' RBAC: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: egressv1.ProxySpec{Provider: "rbac-pool"}}
	if err := env.Client.Create(ctx, px); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "web"}
	testenv.EventuallyNil(t, "Proxy Ready on its pool address under the address pools' RBAC", func() error {
		if err := proxyReady(ctx, key); err != nil {
			return err
		}
		if err := env.Client.Get(ctx, key, px); err != nil {
			return err
		}
		if st := px.Status.EgressAddress; st == nil || st.Address != "192.0.2.10" || px.Status.IP != "192.0.2.10" {
			return fmt.Errorf("status.egressAddress %+v, status.ip %s", st, px.Status.IP)
		}
		return nil
	})
	if err := env.Client.Delete(ctx, px); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "Proxy, claim and address gone under the address pools' RBAC", func() error {
		if err := proxyGone(ctx, key); err != nil {
			return err
		}
		for _, o := range []client.Object{&ipamv1.IPAddressClaim{}, &ipamv1.IPAddress{}} {
			if err := env.Client.Get(ctx, key, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s: %v", o, key, err)
			}
		}
		return nil
	})
}
