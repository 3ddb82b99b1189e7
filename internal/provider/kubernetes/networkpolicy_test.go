package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
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
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The same marks and owner as the Pod, and it selects exactly the Pod.
	if got := provider.MarksFromLabels(np.Labels); got != provider.MarksFromLabels(pod.Labels) || !got.Managed || got.UID != req.UID {
		t.Errorf("NetworkPolicy marks %+v, Pod marks %+v", got, provider.MarksFromLabels(pod.Labels))
	}
	if !reflect.DeepEqual(np.OwnerReferences, pod.OwnerReferences) || len(np.OwnerReferences) != 1 {
		t.Errorf("NetworkPolicy owners %+v, Pod owners %+v", np.OwnerReferences, pod.OwnerReferences)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) || sel.Empty() {
		t.Errorf("pod selector %v (%v) does not select the Pod %v", np.Spec.PodSelector, err, pod.Labels)
	}
	other := labels.Set{}
	for k, v := range pod.Labels {
		other[k] = v
	}
	other[labelInstance] = "proxy-someone-else"
	if sel.Matches(other) {
		t.Errorf("pod selector %v also selects another instance's Pod", np.Spec.PodSelector)
	}
	// Ingress only, one rule: the ranges as ipBlock peers, to the port.
	if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policy types %v, want Ingress only", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("ingress rules %+v, want one", np.Spec.Ingress)
	}
	rule := np.Spec.Ingress[0]
	var peers []string
	for _, f := range rule.From {
		if f.IPBlock == nil || f.PodSelector != nil || f.NamespaceSelector != nil || len(f.IPBlock.Except) > 0 {
			t.Errorf("peer %+v, want a plain ipBlock", f)
			continue
		}
		peers = append(peers, f.IPBlock.CIDR)
	}
	if !reflect.DeepEqual(peers, req.AllowedSourceRanges) {
		t.Errorf("peers %v, want allowedSourceRanges %v", peers, req.AllowedSourceRanges)
	}
	if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.IntValue() != int(req.Port) ||
		rule.Ports[0].Protocol == nil || *rule.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("ports %+v, want TCP %d only", rule.Ports, req.Port)
	}

	// Adopting a Pod whose NetworkPolicy went missing puts it back.
	if err := cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, req.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatalf("adopting: %v", err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, req.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the NetworkPolicy after adoption: %v", err)
	}

	// Deleted with the instance.
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, req.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the NetworkPolicy after Delete: %v, want NotFound", err)
	}

	// No ranges: the Pod admits loopback clients only, so no ingress peer
	// at all.
	closed := apiRequest(ns, "closed")
	closed.AllowedSourceRanges = nil
	if _, err := p.Create(ctx, closed); err != nil {
		t.Fatal(err)
	}
	np, err = cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, closed.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Ingress) != 0 || !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("NetworkPolicy for no ranges: types %v ingress %+v, want Ingress with no rule", np.Spec.PolicyTypes, np.Spec.Ingress)
	}
}

// A NetworkPolicy under the name that another installation made is not
// ours: Create refuses it (Permanent) and Delete leaves it alone.
func TestNetworkPolicyNotOursIsLeftAlone(t *testing.T) {
	ns := newNamespace(t, "netpol-foreign", nil)
	cs := adminClient(t)
	ctx := context.Background()
	req := apiRequest(ns, "foreign")
	theirs := newAPIProvider(t, "someone-else", Config{}, nil)
	s, err := theirs.resolve(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, theirs.buildNetworkPolicy(s), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := newAPIProvider(t, "inst", Config{}, nil)
	_, err = p.Create(ctx, req)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "networkpolicy") {
		t.Errorf("Create over another installation's NetworkPolicy: %v, want Permanent naming the networkpolicy", err)
	}
	if err := p.Delete(ctx, instanceID(ns, req.Name)); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, req.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("another installation's NetworkPolicy after our Delete: %v, want it left alone", err)
	}
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

// rbacObjects reads every RBAC object a kustomize component lists.
func rbacObjects(t *testing.T, component string) (roles []rbacv1.Role, clusterRoles []rbacv1.ClusterRole) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "config", "components", component)
	var k struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil || len(k.Resources) == 0 {
		t.Fatalf("%s/kustomization.yaml: resources %v, %v", component, k.Resources, err)
	}
	for _, res := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, res))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s/%s: %v", component, res, err)
			}
			switch meta.Kind {
			case "Role":
				var r rbacv1.Role
				if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
					t.Fatalf("%s/%s: %v", component, res, err)
				}
				roles = append(roles, r)
			case "ClusterRole":
				var r rbacv1.ClusterRole
				if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
					t.Fatalf("%s/%s: %v", component, res, err)
				}
				clusterRoles = append(clusterRoles, r)
			}
		}
	}
	return roles, clusterRoles
}

// grants says whether rules allow verb on group/resource.
func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

// Item 7: the default component grants the Pod, Service, ConfigMap and
// NetworkPolicy rights in one namespace (a Role), not cluster-wide; the
// provider with that namespace works with exactly those rights, and the
// cluster-wide variant grants the same everywhere.
func TestLeastPrivilege_ProviderRBACIsNamespaced(t *testing.T) {
	roles, clusterRoles := rbacObjects(t, "kubernetes-provider")
	for _, cr := range clusterRoles {
		for _, r := range cr.Rules {
			for _, res := range r.Resources {
				switch res {
				case "pods", "services", "configmaps", "networkpolicies", "*":
					t.Errorf("the default component grants %s in ClusterRole %s", res, cr.Name)
				}
			}
		}
	}
	if len(roles) != 1 {
		t.Fatalf("the default component holds %d Roles, want one", len(roles))
	}
	_, wide := rbacObjects(t, "kubernetes-provider-cluster-wide")
	var wideRules []rbacv1.PolicyRule
	for _, cr := range wide {
		wideRules = append(wideRules, cr.Rules...)
	}
	for _, n := range neededPermissions() {
		if !grants(roles[0].Rules, n.group, n.resource, n.verb) {
			t.Errorf("the default component's Role does not grant %s %s", n.verb, n.resource)
		}
		if !grants(wideRules, n.group, n.resource, n.verb) {
			t.Errorf("the cluster-wide variant does not grant %s %s", n.verb, n.resource)
		}
	}

	// On the API server: a user holding exactly the component's Role (in
	// the entry's namespace) and its access-review ClusterRole.
	e := apiEnv(t)
	ctx := context.Background()
	cs := adminClient(t)
	ns := newNamespace(t, "rbac-ns", nil)
	name := "provider-" + randHex(t)
	u, err := e.Environment.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: name, APIGroup: rbacv1.GroupName}}
	role := roles[0]
	role.Namespace, role.ResourceVersion = ns, ""
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, cr := range clusterRoles {
		cr.Name = name + "-" + cr.Name
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects:   subject,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := newAPIProvider(t, "inst", Config{Namespace: ns}, u.Config())
	changed := make(chan string, 16)
	p.WatchInstances(func(id string) {
		select {
		case changed <- id:
		default: // never blocks
		}
	})
	res := p.Check(ctx)
	if !res.Healthy || res.Details["missing"] != "none" {
		t.Errorf("Check with the component's Role in %s: %+v, want Healthy", ns, res)
	}
	req := apiRequest("team-a", "least")
	inst, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create with the component's Role: %v", err)
	}
	if list, err := p.ListByTag(ctx); err != nil || len(list) != 1 || list[0].ID != inst.ID {
		t.Errorf("ListByTag with the component's Role: %v, %v", list, err)
	}
	// The instance watch, with the component's rights: the Pod changed
	// behind the provider's back (here its readiness, as a kubelet would
	// write it) is told.
	podNS, podName, _ := parseID(inst.ID)
	pod, err := cs.CoreV1().Pods(podNS).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"})
	if _, err := cs.CoreV1().Pods(podNS).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "the watch told of the Pod's change", func() error {
		for {
			select {
			case id := <-changed:
				if id == inst.ID {
					return nil
				}
			default:
				return fmt.Errorf("not told of %s", inst.ID)
			}
		}
	})
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Errorf("Delete with the component's Role: %v", err)
	}
	// A group's front (its PodDisruptionBudget among the rights), listed
	// for the collector and removed, with the same rights.
	g := provider.GroupRef{Namespace: ns, Name: "least", UID: "group-uid-least"}
	if _, err := p.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 3128, Members: 2}); err != nil {
		t.Errorf("FrontGroup with the component's Role: %v", err)
	}
	if _, err := p.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 8080, Members: 2}); err != nil {
		t.Errorf("FrontGroup of a changed port with the component's Role: %v", err)
	}
	if list, err := p.ListSecondary(ctx); err != nil || len(list) != 2 {
		t.Errorf("ListSecondary with the component's Role: %+v, %v; want the front's two objects", list, err)
	}
	if err := p.RemoveGroupFront(ctx, g); err != nil {
		t.Errorf("RemoveGroupFront with the component's Role: %v", err)
	}
	// A Role from before group fronts (an upgrade that did not apply the
	// component again): the collector's listing still works, without the
	// budgets it may not see.
	old := role.DeepCopy()
	old.Rules = nil
	for _, r := range role.Rules {
		if !slices.Contains(r.Resources, "poddisruptionbudgets") {
			old.Rules = append(old.Rules, r)
		}
	}
	if len(old.Rules) == len(role.Rules) {
		t.Fatal("the component's Role grants no poddisruptionbudgets")
	}
	if _, err := cs.RbacV1().Roles(ns).Update(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "ListSecondary with a Role without poddisruptionbudgets", func() error {
		if res := p.Check(ctx); !strings.Contains(res.Details["missing"], "poddisruptionbudgets") {
			return fmt.Errorf("the RBAC change not seen yet: Check %+v", res)
		}
		if _, err := p.ListSecondary(ctx); err != nil {
			return fmt.Errorf("ListSecondary: %v", err)
		}
		return nil
	})
	// The same rights do not reach other namespaces: an entry without
	// namespace: needs the cluster-wide variant, and Check says so.
	everywhere := newAPIProvider(t, "inst", Config{}, u.Config())
	if res := everywhere.Check(ctx); res.Healthy || res.Reason != provider.ReasonForbidden || !strings.Contains(res.Details["missing"], "create networkpolicies") {
		t.Errorf("Check of an entry without namespace: with the namespaced Role: %+v, want Forbidden naming create networkpolicies", res)
	}
}
