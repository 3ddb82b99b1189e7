package kubernetes

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// A member Pod carries the group's label and a preferred anti-affinity
// from the group's other members, beside placement's node affinity; its
// spec is otherwise the non-member's. A Pod of no group has neither, and
// the member's other objects (Service, ConfigMap, NetworkPolicy) carry no
// group label, so that no listing takes them for a group's.
func TestBuildMemberPod(t *testing.T) {
	p := pureProvider(t, Config{})
	zone := provider.Placement{Zone: "eu-1a"}
	group := &provider.GroupRef{Namespace: "team-a", Name: "web", UID: "group-uid-1"}
	for _, tc := range []struct {
		name      string
		group     *provider.GroupRef
		placement provider.Placement
	}{
		{"no group, no placement", nil, provider.Placement{}},
		{"no group, zone", nil, zone},
		{"member, no placement", group, provider.Placement{}},
		{"member, zone", group, zone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := baseRequest()
			req.Placement = tc.placement
			plainSpec, err := p.resolve(req)
			if err != nil {
				t.Fatal(err)
			}
			req.Group = tc.group
			s, err := p.resolve(req)
			if err != nil {
				t.Fatal(err)
			}
			pod, plain := p.buildPod(s), p.buildPod(plainSpec)
			label, labelled := pod.Labels[labelGroupUID]
			a := pod.Spec.Affinity
			if tc.group == nil {
				if labelled || (a != nil && a.PodAntiAffinity != nil) {
					t.Errorf("a Pod of no group: group label %q (%t), affinity %+v; want neither", label, labelled, a)
				}
				if !equality.Semantic.DeepEqual(pod, plain) {
					t.Error("a Pod of no group differs from the Pod the same request made before groups")
				}
			} else {
				if label != group.UID {
					t.Errorf("member Pod's %s label %q, want %q", labelGroupUID, label, group.UID)
				}
				if a == nil || a.PodAntiAffinity == nil {
					t.Fatalf("member Pod's affinity %+v, want a pod anti-affinity", a)
				}
				anti := a.PodAntiAffinity
				want := []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelGroupUID: group.UID}},
					TopologyKey:   "kubernetes.io/hostname",
				}}}
				if len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 0 || !equality.Semantic.DeepEqual(anti.PreferredDuringSchedulingIgnoredDuringExecution, want) {
					t.Errorf("member Pod's anti-affinity %+v, want only the preferred %+v", anti, want)
				}
				if a.PodAffinity != nil {
					t.Errorf("member Pod's pod affinity %+v, want none", a.PodAffinity)
				}
				// The spec is otherwise the non-member's.
				memberSpec, plainPodSpec := pod.Spec.DeepCopy(), plain.Spec.DeepCopy()
				memberSpec.Affinity, plainPodSpec.Affinity = nil, nil
				if !equality.Semantic.DeepEqual(memberSpec, plainPodSpec) {
					t.Error("a member Pod's spec differs from the non-member's beyond its affinity")
				}
				wantLabels := maps.Clone(plain.Labels)
				wantLabels[labelGroupUID] = group.UID
				if !maps.Equal(pod.Labels, wantLabels) {
					t.Errorf("member Pod's labels %v, want %v", pod.Labels, wantLabels)
				}
			}
			// Placement's node affinity, member or not.
			if tc.placement.Zone == "" {
				if a != nil && a.NodeAffinity != nil {
					t.Errorf("node affinity %+v without placement", a.NodeAffinity)
				}
			} else if a == nil || !equality.Semantic.DeepEqual(a.NodeAffinity, nodeAffinity(tc.placement).NodeAffinity) {
				t.Errorf("affinity %+v, want placement's node affinity on zone %s", a, tc.placement.Zone)
			}
			for kind, m := range map[string]metav1.ObjectMeta{
				"service": p.buildService(s).ObjectMeta, "configmap": p.buildConfigMap(s).ObjectMeta,
				"networkpolicy": p.buildNetworkPolicy(s).ObjectMeta,
			} {
				if _, ok := m.Labels[labelGroupUID]; ok {
					t.Errorf("the instance's %s carries %s: %v", kind, labelGroupUID, m.Labels)
				}
			}
		})
	}

	// The entry cannot set the group label, nor override it past
	// validation; a request naming a group with no UID is refused.
	entry := field.NewPath("kubernetes")
	if _, errs := Parse([]byte(`{"podLabels":{"`+labelGroupUID+`":"x"}}`), entry); len(errs) != 1 ||
		errs[0].Field != "kubernetes.podLabels["+labelGroupUID+"]" || !strings.Contains(errs[0].Error(), "ProxyGroup's UID") {
		t.Errorf("podLabels with %s: %v, want one error saying it is the ProxyGroup's UID", labelGroupUID, errs)
	}
	forced := pureProvider(t, Config{})
	forced.cfg.PodLabels = map[string]string{labelGroupUID: "someone-else"}
	req := baseRequest()
	req.Group = group
	s, err := forced.resolve(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := forced.buildPod(s).Labels[labelGroupUID]; got != group.UID {
		t.Errorf("an entry's podLabels replaced the group label: %q", got)
	}
	req.Group = &provider.GroupRef{Namespace: "team-a", Name: "web"}
	if _, err := p.resolve(req); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "group UID") {
		t.Errorf("resolve of a member with no group UID: %v, want Permanent naming the group UID", err)
	}
}

// The front's name: a DNS-1035 label of at most 63 characters, from the
// group's namespace and name only (the same after the group is made
// again with a new UID), distinct across namespaces and across names that
// sanitise alike.
func TestGroupFrontName(t *testing.T) {
	long := strings.Repeat("n", 63)
	longName := strings.Repeat("a.b-", 60) + "z"
	cases := [][2]string{
		{"team-a", "web"}, {"team-b", "web"}, {"team-a", "web.prod"}, {"team-a", "web-prod"},
		{long, longName}, {long, longName + "x"}, {"a", "b"}, {long, "web"},
	}
	seen := map[string][2]string{}
	for _, c := range cases {
		name := groupFrontName(c[0], c[1])
		if len(name) > 63 || len(validation.IsDNS1035Label(name)) > 0 || !strings.HasPrefix(name, "proxygroup-") {
			t.Errorf("groupFrontName(%q, %q) = %q (%d characters): want a DNS-1035 label of at most 63 starting proxygroup-",
				c[0], c[1], name, len(name))
		}
		if other, dup := seen[name]; dup {
			t.Errorf("groupFrontName gives %q to both %v and %v", name, other, c)
		}
		seen[name] = c
		if again := groupFrontName(c[0], c[1]); again != name {
			t.Errorf("groupFrontName(%q, %q) is not stable: %q then %q", c[0], c[1], name, again)
		}
	}
	if got := groupFrontName("team-a", "web"); !strings.HasPrefix(got, "proxygroup-team-a-web-") || len(got) != len("proxygroup-team-a-web-")+8 {
		t.Errorf("groupFrontName(team-a, web) = %q, want proxygroup-team-a-web-<8 hex>", got)
	}
	// The UID is no part of it: the same group made again keeps its
	// Service's name, and so its clients' endpoint.
	p := pureProvider(t, Config{})
	a, err := p.resolveFront(provider.GroupRef{Namespace: "team-a", Name: "web", UID: "uid-1"}, 3128, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.resolveFront(provider.GroupRef{Namespace: "team-a", Name: "web", UID: "uid-2"}, 3128, true)
	if err != nil {
		t.Fatal(err)
	}
	if a.name != b.name || groupEndpoint(a) != groupEndpoint(b) {
		t.Errorf("the front's name changes with the group's UID: %q / %q", groupEndpoint(a), groupEndpoint(b))
	}
}

// The front's Service and budget: named after the group, in the entry's
// namespace or the group's, selecting exactly the group's managed member
// Pods by reserved keys, the group's marks and annotation, and the
// group as owner only in its own namespace.
func TestBuildGroupFront(t *testing.T) {
	g := provider.GroupRef{Namespace: "team-a", Name: "web", UID: "group-uid-1"}
	wantSelector := map[string]string{labelGroupUID: g.UID, provider.MarkManaged: provider.MarkManagedValue}
	for _, tc := range []struct {
		name      string
		cfg       Config
		namespace string
		clusterIP string
		owned     bool
	}{
		{"in the group's namespace, headless", Config{}, "team-a", corev1.ClusterIPNone, true},
		{"entry namespace = group's, ClusterIP", Config{Namespace: "team-a", ServiceType: ServiceClusterIP}, "team-a", "", true},
		{"entry namespace elsewhere", Config{Namespace: "proxies"}, "proxies", corev1.ClusterIPNone, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pureProvider(t, tc.cfg)
			f, err := p.resolveFront(g, 8080, true)
			if err != nil {
				t.Fatal(err)
			}
			f.members = 3
			svc, pdb := p.buildGroupService(f), p.buildGroupPDB(f)
			wantName := groupFrontName(g.Namespace, g.Name)
			if got := groupEndpoint(f); got != wantName+"."+tc.namespace+".svc:8080" {
				t.Errorf("endpoint %q, want %s.%s.svc:8080", got, wantName, tc.namespace)
			}
			for kind, m := range map[string]metav1.ObjectMeta{"service": svc.ObjectMeta, "pdb": pdb.ObjectMeta} {
				if m.Name != wantName || m.Namespace != tc.namespace {
					t.Errorf("%s %s/%s, want %s/%s", kind, m.Namespace, m.Name, tc.namespace, wantName)
				}
				if got := provider.MarksFromLabels(m.Labels); got != (provider.Marks{Managed: true, UID: g.UID, Installation: "inst-1"}) {
					t.Errorf("%s marks %+v, want the group's UID and the installation", kind, got)
				}
				if m.Labels[labelGroupUID] != g.UID || m.Labels[labelName] != labelNameValue || m.Labels[labelManagedBy] != managedByValue {
					t.Errorf("%s labels %v, want the group label and the app labels", kind, m.Labels)
				}
				if _, ok := m.Labels[labelInstance]; ok {
					t.Errorf("%s carries %s: it is no instance's", kind, labelInstance)
				}
				if m.Annotations[annotationGroup] != "team-a/web" {
					t.Errorf("%s annotations %v, want %s=team-a/web", kind, m.Annotations, annotationGroup)
				}
				wantRefs := []metav1.OwnerReference(nil)
				if tc.owned {
					wantRefs = []metav1.OwnerReference{{APIVersion: "egress.proxy-operator.dev/v1alpha1", Kind: "ProxyGroup",
						Name: "web", UID: types.UID(g.UID), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false)}}
				}
				if !equality.Semantic.DeepEqual(m.OwnerReferences, wantRefs) {
					t.Errorf("%s owner references %+v, want %+v", kind, m.OwnerReferences, wantRefs)
				}
			}
			if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP != tc.clusterIP {
				t.Errorf("service type %q clusterIP %q, want ClusterIP with %q", svc.Spec.Type, svc.Spec.ClusterIP, tc.clusterIP)
			}
			wantPorts := []corev1.ServicePort{{Name: "proxy", Protocol: corev1.ProtocolTCP, Port: 8080, TargetPort: intstr.FromString("proxy")}}
			if !equality.Semantic.DeepEqual(svc.Spec.Ports, wantPorts) {
				t.Errorf("service ports %+v, want %+v", svc.Spec.Ports, wantPorts)
			}
			if !maps.Equal(svc.Spec.Selector, wantSelector) {
				t.Errorf("service selector %v, want %v", svc.Spec.Selector, wantSelector)
			}
			if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(2) || pdb.Spec.MaxUnavailable != nil ||
				pdb.Spec.Selector == nil || len(pdb.Spec.Selector.MatchExpressions) != 0 || !maps.Equal(pdb.Spec.Selector.MatchLabels, wantSelector) {
				t.Errorf("pdb spec %+v, want minAvailable 2 (3 members less one), an integer, over %v", pdb.Spec, wantSelector)
			}
			for k := range wantSelector {
				if _, ok := reservedPodLabels[k]; !ok {
					t.Errorf("the front selects by %q, which an entry's podLabels may set", k)
				}
			}

			// It selects the group's member Pods and no other.
			req := baseRequest()
			req.Group = &g
			s, err := p.resolve(req)
			if err != nil {
				t.Fatal(err)
			}
			sel := labels.SelectorFromSet(svc.Spec.Selector)
			if !sel.Matches(labels.Set(p.buildPod(s).Labels)) {
				t.Error("the front's selector does not select a member Pod")
			}
			req.Group = &provider.GroupRef{Namespace: "team-a", Name: "db", UID: "group-uid-2"}
			if s, err = p.resolve(req); err != nil {
				t.Fatal(err)
			}
			if sel.Matches(labels.Set(p.buildPod(s).Labels)) {
				t.Error("the front's selector selects another group's member Pod")
			}
			req.Group = nil
			if s, err = p.resolve(req); err != nil {
				t.Fatal(err)
			}
			if sel.Matches(labels.Set(p.buildPod(s).Labels)) {
				t.Error("the front's selector selects a Pod of no group")
			}
		})
	}

	p := pureProvider(t, Config{})
	for _, bad := range []struct {
		g    provider.GroupRef
		port int32
		want string
	}{
		{provider.GroupRef{Namespace: "team-a", Name: "web"}, 3128, "group UID"},
		{provider.GroupRef{Namespace: "team-a", Name: "web", UID: "u"}, 0, "port 0"},
		{provider.GroupRef{Namespace: "Team_A", Name: "web", UID: "u"}, 3128, "group namespace"},
		{provider.GroupRef{Namespace: "team-a", UID: "u"}, 3128, "group name"},
	} {
		if _, err := p.resolveFront(bad.g, bad.port, true); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("resolveFront(%+v, %d): %v, want Permanent naming %q", bad.g, bad.port, err, bad.want)
		}
	}
}

// groupFrontObjects reads the front's Service and budget, failing t when
// either is missing.
func groupFrontObjects(t *testing.T, cs clientset.Interface, ns, name string) (*corev1.Service, *policyv1.PodDisruptionBudget) {
	t.Helper()
	ctx := context.Background()
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the front's service %s/%s: %v", ns, name, err)
	}
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the front's budget %s/%s: %v", ns, name, err)
	}
	return svc, pdb
}

// FrontGroup against a real API server, through the method boundary: it
// makes the Service and budget; a second call writes nothing; a new port
// is patched in; a hand-edited selector is put back; a same-named group
// made again takes the objects over; an object that is not this
// installation's is Permanent and left as it is. The Service selects the
// member Pods Create makes (including an adopted Pod that lacked the
// label).
func TestFrontGroupOnAPIServer(t *testing.T) {
	cs := adminClient(t)
	ns := newNamespace(t, "front", nil)
	ctx := t.Context()
	rc, counter := testenv.CountingConfig(apiEnv(t).Config)
	raw := newAPIProvider(t, "front-test", Config{}, rc)
	b := boundary(raw)
	fr := b.Fronter
	if fr == nil {
		t.Fatal("the kubernetes provider behind the boundary is no provider.GroupFronter")
	}
	g := provider.GroupRef{Namespace: ns, Name: "web", UID: "group-uid-1"}
	name := groupFrontName(ns, "web")

	endpoint, err := fr.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 3128, Members: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := name + "." + ns + ".svc:3128"; endpoint != want {
		t.Errorf("endpoint %q, want %q", endpoint, want)
	}
	svc, pdb := groupFrontObjects(t, cs, ns, name)
	owner := []metav1.OwnerReference{{APIVersion: "egress.proxy-operator.dev/v1alpha1", Kind: "ProxyGroup", Name: "web",
		UID: types.UID(g.UID), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false)}}
	wantSelector := map[string]string{labelGroupUID: g.UID, provider.MarkManaged: provider.MarkManagedValue}
	if !maps.Equal(svc.Spec.Selector, wantSelector) || svc.Spec.Ports[0].Port != 3128 || svc.Spec.ClusterIP != corev1.ClusterIPNone ||
		!equality.Semantic.DeepEqual(svc.OwnerReferences, owner) || svc.Labels[provider.MarkUID] != g.UID {
		t.Errorf("front service %+v", svc)
	}
	if !maps.Equal(pdb.Spec.Selector.MatchLabels, wantSelector) || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil ||
		!equality.Semantic.DeepEqual(pdb.OwnerReferences, owner) || pdb.Labels[provider.MarkUID] != g.UID {
		t.Errorf("front budget %+v", pdb)
	}

	// As asked: the reads only.
	counter.Reset()
	if again, err := fr.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 3128, Members: 2}); err != nil || again != endpoint {
		t.Fatalf("second FrontGroup: %q, %v", again, err)
	}
	if w := counter.WritesBy(); len(w) != 0 {
		t.Errorf("a front as asked cost writes %v, want none", w)
	}
	svc2, pdb2 := groupFrontObjects(t, cs, ns, name)
	if svc2.ResourceVersion != svc.ResourceVersion || pdb2.ResourceVersion != pdb.ResourceVersion {
		t.Error("a front as asked was written")
	}

	// A new port: the Service is patched, the budget left.
	counter.Reset()
	if endpoint, err = fr.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 8080, Members: 2}); err != nil || endpoint != name+"."+ns+".svc:8080" {
		t.Fatalf("FrontGroup on port 8080: %q, %v", endpoint, err)
	}
	if w := counter.WritesBy(); !maps.Equal(w, map[string]int{"PATCH services": 1}) {
		t.Errorf("a new port cost writes %v, want one PATCH of the service", w)
	}
	svc3, pdb3 := groupFrontObjects(t, cs, ns, name)
	if len(svc3.Spec.Ports) != 1 || svc3.Spec.Ports[0].Port != 8080 || svc3.Spec.Ports[0].TargetPort != intstr.FromString("proxy") ||
		svc3.UID != svc.UID || pdb3.ResourceVersion != pdb.ResourceVersion {
		t.Errorf("after a new port: service ports %+v (uid %s, was %s), budget rv %s (was %s)",
			svc3.Spec.Ports, svc3.UID, svc.UID, pdb3.ResourceVersion, pdb.ResourceVersion)
	}

	// Edited by hand: a selector key added, the budget turned to
	// maxUnavailable. Both are put back, the key removed.
	svc3.Spec.Selector["someone"] = "else"
	if _, err := cs.CoreV1().Services(ns).Update(ctx, svc3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb3.Spec.MaxUnavailable, pdb3.Spec.MinAvailable = ptr.To(intstr.FromInt32(1)), nil
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 8080, Members: 2}); err != nil {
		t.Fatal(err)
	}
	svc4, pdb4 := groupFrontObjects(t, cs, ns, name)
	if !maps.Equal(svc4.Spec.Selector, wantSelector) {
		t.Errorf("edited selector not put back: %v, want %v", svc4.Spec.Selector, wantSelector)
	}
	if pdb4.Spec.MaxUnavailable != nil || pdb4.Spec.MinAvailable == nil || pdb4.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("edited budget not put back: %+v", pdb4.Spec)
	}

	// The group deleted and made again under the same name (a new UID):
	// the objects are taken over, not made again, so the DNS name and a
	// ClusterIP stay.
	g2 := provider.GroupRef{Namespace: ns, Name: "web", UID: "group-uid-2"}
	if endpoint, err = fr.FrontGroup(ctx, provider.GroupFront{Group: g2, Port: 8080, Members: 3}); err != nil || endpoint != name+"."+ns+".svc:8080" {
		t.Fatalf("FrontGroup of the group made again: %q, %v", endpoint, err)
	}
	svc5, pdb5 := groupFrontObjects(t, cs, ns, name)
	if pdb5.Spec.MinAvailable == nil || pdb5.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("budget of a group of 3: minAvailable %v, want 2", pdb5.Spec.MinAvailable)
	}
	wantSelector2 := map[string]string{labelGroupUID: g2.UID, provider.MarkManaged: provider.MarkManagedValue}
	for kind, o := range map[string]struct {
		obj      metav1.Object
		selector map[string]string
		was      types.UID
	}{
		"service": {svc5, svc5.Spec.Selector, svc.UID},
		"pdb":     {pdb5, pdb5.Spec.Selector.MatchLabels, pdb.UID},
	} {
		l := o.obj.GetLabels()
		refs := o.obj.GetOwnerReferences()
		if o.obj.GetUID() != o.was || l[provider.MarkUID] != g2.UID || l[labelGroupUID] != g2.UID || !maps.Equal(o.selector, wantSelector2) ||
			len(refs) != 1 || refs[0].UID != types.UID(g2.UID) {
			t.Errorf("%s after the takeover: uid %s (was %s), labels %v, selector %v, owners %+v; want the same object, group-uid-2's",
				kind, o.obj.GetUID(), o.was, l, o.selector, refs)
		}
	}

	// The member Pods: made by Create with the group, and one made before
	// it was marked (adopted, given the label); a Pod of no group and one
	// of another group are not selected.
	member := apiRequest(ns, "member-a")
	member.Group = &g2
	if _, err := raw.Create(ctx, member); err != nil {
		t.Fatal(err)
	}
	unmarked := apiRequest(ns, "member-b")
	if _, err := raw.Create(ctx, unmarked); err != nil {
		t.Fatal(err)
	}
	unmarked.Group = &g2
	if _, err := raw.Create(ctx, unmarked); err != nil {
		t.Fatal(err)
	}
	loner := apiRequest(ns, "loner")
	if _, err := raw.Create(ctx, loner); err != nil {
		t.Fatal(err)
	}
	stranger := apiRequest(ns, "stranger")
	stranger.Group = &provider.GroupRef{Namespace: ns, Name: "db", UID: "group-uid-db"}
	if _, err := raw.Create(ctx, stranger); err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc5.Spec.Selector).String()})
	if err != nil {
		t.Fatal(err)
	}
	var selected []string
	for _, pod := range pods.Items {
		selected = append(selected, pod.Name)
		if pod.Name == member.Name && (pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAntiAffinity == nil) {
			t.Errorf("member Pod %s has no anti-affinity: %+v", pod.Name, pod.Spec.Affinity)
		}
	}
	slices.Sort(selected)
	want := []string{member.Name, unmarked.Name}
	slices.Sort(want)
	if !slices.Equal(selected, want) {
		t.Errorf("the front's selector selects Pods %v, want the members %v", selected, want)
	}

	// Not this installation's: Permanent, named, left alone.
	foreignName := groupFrontName(ns, "foreign")
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: foreignName, Namespace: ns, Labels: map[string]string{"owner": "a-human"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "x"}},
	}
	if foreign, err = cs.CoreV1().Services(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gf := provider.GroupRef{Namespace: ns, Name: "foreign", UID: "group-uid-f"}
	_, err = fr.FrontGroup(ctx, provider.GroupFront{Group: gf, Port: 3128, Members: 2})
	var pe *provider.Error
	if !errors.Is(err, provider.ErrPermanent) || !errors.As(err, &pe) || pe.Op != provider.OpFrontGroup ||
		!strings.Contains(err.Error(), "service "+ns+"/"+foreignName+" exists and is not this installation's: rename or delete it") {
		t.Errorf("FrontGroup over a foreign Service: %v, want Permanent naming it", err)
	}
	after, err := cs.CoreV1().Services(ns).Get(ctx, foreignName, metav1.GetOptions{})
	if err != nil || after.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the foreign Service was changed: %v", err)
	}
	// Another installation's front of the same group name: Permanent too.
	otherNS := newNamespace(t, "front-other", nil)
	other := newAPIProvider(t, "front-other-installation", Config{}, nil)
	og := provider.GroupRef{Namespace: otherNS, Name: "web", UID: "group-uid-o"}
	if _, err := other.FrontGroup(ctx, provider.GroupFront{Group: og, Port: 3128, Members: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.FrontGroup(ctx, provider.GroupFront{Group: og, Port: 3128, Members: 2}); !errors.Is(err, provider.ErrPermanent) ||
		!strings.Contains(err.Error(), "is not this installation's") {
		t.Errorf("FrontGroup over another installation's front: %v, want Permanent", err)
	}
}

// An entry with a namespace of its own: the front lives there, beside
// the members, with no owner (Kubernetes has no cross-namespace owners).
func TestFrontGroupInEntryNamespace(t *testing.T) {
	cs := adminClient(t)
	ns := newNamespace(t, "front-entry", nil)
	p := newAPIProvider(t, "front-entry", Config{Namespace: ns}, nil)
	g := provider.GroupRef{Namespace: "team-elsewhere", Name: "web", UID: "group-uid-e"}
	endpoint, err := p.FrontGroup(t.Context(), provider.GroupFront{Group: g, Port: 3128, Members: 2})
	if err != nil {
		t.Fatal(err)
	}
	name := groupFrontName(g.Namespace, g.Name)
	if endpoint != name+"."+ns+".svc:3128" {
		t.Errorf("endpoint %q, want the Service in the entry's namespace %s", endpoint, ns)
	}
	svc, pdb := groupFrontObjects(t, cs, ns, name)
	if len(svc.OwnerReferences)+len(pdb.OwnerReferences) != 0 {
		t.Errorf("a front outside its group's namespace has owners: %+v %+v", svc.OwnerReferences, pdb.OwnerReferences)
	}
}

// RemoveGroupFront removes the group's Service and budget, leaves another
// group's under the same name, and counts a front already gone as
// removed.
func TestRemoveGroupFront(t *testing.T) {
	cs := adminClient(t)
	ns := newNamespace(t, "front-remove", nil)
	fr := boundary(newAPIProvider(t, "front-remove", Config{}, nil)).Fronter
	ctx := t.Context()
	g := provider.GroupRef{Namespace: ns, Name: "web", UID: "group-uid-1"}
	name := groupFrontName(ns, "web")
	if _, err := fr.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 3128, Members: 2}); err != nil {
		t.Fatal(err)
	}
	// The group made again holds the name now: the old group's removal
	// leaves its objects.
	stale := provider.GroupRef{Namespace: ns, Name: "web", UID: "group-uid-0"}
	if err := fr.RemoveGroupFront(ctx, stale); err != nil {
		t.Fatalf("RemoveGroupFront of another group's name: %v", err)
	}
	groupFrontObjects(t, cs, ns, name) // both still there

	if err := fr.RemoveGroupFront(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the front's Service after RemoveGroupFront: %v, want NotFound", err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the front's budget after RemoveGroupFront: %v, want NotFound", err)
	}
	if err := fr.RemoveGroupFront(ctx, g); err != nil {
		t.Errorf("RemoveGroupFront of a front already gone: %v, want success", err)
	}
	if err := fr.RemoveGroupFront(ctx, provider.GroupRef{Namespace: ns, Name: "web"}); !errors.Is(err, provider.ErrPermanent) {
		t.Errorf("RemoveGroupFront with no group UID: %v, want Permanent", err)
	}
}

// The fronts' objects are secondaries of no instance: ListSecondary lists
// them with the group's marks, no instance and InstanceGone, beside (and
// never mixed with) the instances' objects; DeleteSecondary removes them
// by their IDs, never a recreated one; the owner listing of a Proxy, and
// a Proxy's Delete, never reach them.
func TestGroupFrontsAsSecondaries(t *testing.T) {
	cs := adminClient(t)
	ns := newNamespace(t, "front-gc", nil)
	const installation = "front-gc"
	b := boundary(newAPIProvider(t, installation, Config{Namespace: ns}, nil))
	p, sl, ol, fr := b.Provider, b.Secondary, b.Owned, b.Fronter
	ctx := t.Context()
	g := provider.GroupRef{Namespace: "team", Name: "web", UID: "group-uid-gc"}
	name := groupFrontName(g.Namespace, g.Name)
	if _, err := fr.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 3128, Members: 2}); err != nil {
		t.Fatal(err)
	}
	member := apiRequest("team", "member")
	member.Group = &g
	memberInst, err := p.Create(ctx, member)
	if err != nil {
		t.Fatal(err)
	}
	loner := apiRequest("team", "loner")
	if _, err := p.Create(ctx, loner); err != nil {
		t.Fatal(err)
	}

	list, err := sl.ListSecondary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fronts := map[string]provider.Secondary{}
	for _, s := range list {
		switch s.Kind {
		case kindGroupService, kindGroupPDB:
			fronts[s.Kind] = s
			want := provider.Marks{Managed: true, UID: g.UID, Installation: installation}
			if s.Marks != want || s.Instance != "" || s.InstanceID != "" || !s.InstanceGone || s.CreatedAt.IsZero() ||
				!strings.HasPrefix(s.ID, s.Kind+"/"+ns+"/"+name+"/") {
				t.Errorf("front %s listed as %+v; want marks %+v, no instance, InstanceGone, a CreatedAt and an ID naming it", s.Kind, s, want)
			}
		default:
			if s.Instance != member.Name && s.Instance != loner.Name {
				t.Errorf("secondary %+v listed as an instance's object; want only the two instances'", s)
			}
			if s.InstanceGone || s.Marks.UID == g.UID {
				t.Errorf("an instance's secondary %+v: InstanceGone %t, UID %q", s, s.InstanceGone, s.Marks.UID)
			}
		}
	}
	if len(fronts) != 2 || len(list) != 2+2*3 {
		t.Errorf("ListSecondary: %d objects, fronts %v; want the group's service and pdb and each instance's three: %+v", len(list), fronts, list)
	}
	if got := secondariesOf(list, name); len(got) != 0 {
		t.Errorf("the group's Service listed as the secondary of an instance named %s: %+v", name, got)
	}

	// A Proxy's owner listing never lists them, nor does one by the
	// group's UID.
	for _, uid := range []string{member.UID, g.UID} {
		owned, err := ol.ListOwnedSecondaries(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range owned {
			if s.Kind == kindGroupService || s.Kind == kindGroupPDB || s.Instance == "" {
				t.Errorf("ListOwnedSecondaries(%s) lists a front's object %+v", uid, s)
			}
		}
		if uid == member.UID && len(owned) != 3 {
			t.Errorf("ListOwnedSecondaries(%s) = %+v, want the member's three objects", uid, owned)
		}
	}

	// A member's Delete leaves the group's front.
	if err := p.Delete(ctx, memberInst.ID); err != nil {
		t.Fatal(err)
	}
	groupFrontObjects(t, cs, ns, name)

	// DeleteSecondary: exactly the listed objects; gone is success; a
	// stale ID does not reach the front made again.
	for _, s := range fronts {
		if err := sl.DeleteSecondary(ctx, s.ID); err != nil {
			t.Errorf("DeleteSecondary(%s): %v", s.ID, err)
		}
		if err := sl.DeleteSecondary(ctx, s.ID); err != nil {
			t.Errorf("DeleteSecondary(%s) again: %v, want success", s.ID, err)
		}
	}
	if _, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the front's Service after DeleteSecondary: %v, want NotFound", err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the front's budget after DeleteSecondary: %v, want NotFound", err)
	}
	if _, err := fr.FrontGroup(ctx, provider.GroupFront{Group: g, Port: 3128, Members: 2}); err != nil {
		t.Fatal(err)
	}
	for _, s := range fronts {
		if err := sl.DeleteSecondary(ctx, s.ID); err != nil {
			t.Errorf("DeleteSecondary(%s) of a recreated front: %v", s.ID, err)
		}
	}
	groupFrontObjects(t, cs, ns, name) // made again, left alone
}
