package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// A ProxyGroup on this provider (provider.GroupFronter): its member Pods
// carry labelGroupUID and keep apart from each other, and the group gets
// one Service over its ready members, its endpoint, and a
// PodDisruptionBudget over them. The Service and the budget are the
// group's, not an instance's: they carry the group's UID as their UID
// mark, no labelInstance, and are listed by ListSecondary with no
// instance (kinds kindGroupService and kindGroupPDB), so that the
// collector removes those whose group is gone.
const (
	// labelGroupUID holds the UID of the ProxyGroup an object belongs to:
	// on the member Pods (what the group's Service, budget and the
	// members' anti-affinity select) and on the group's Service and
	// budget (what tells them from an instance's objects). An instance's
	// other objects never carry it.
	labelGroupUID = operatorDomain + "/group-uid"
	// annotationGroup names the group (<namespace>/<name>) on its Service
	// and budget, as annotationProxy names a Proxy.
	annotationGroup = operatorDomain + "/group"
	groupKind       = "ProxyGroup"

	// The kinds of a group's front as ListSecondary lists them.
	kindGroupService = "group-service"
	kindGroupPDB     = "group-pdb"

	groupFrontPrefix  = "proxygroup-"
	groupFrontHashLen = 8
	// groupSpreadWeight is the anti-affinity's weight: the most a
	// preference can weigh, so the scheduler spreads the members wherever
	// the nodes allow it.
	groupSpreadWeight = 100
)

// groupFrontName is the name of the Service and budget of the ProxyGroup
// name in namespace: the prefix, the namespace and name (sanitised and
// shortened), then 8 hex digits of sha256("<namespace>/<name>"), at most
// 63 characters, a DNS-1035 label. It is made of the group's namespace and
// name only, not its UID, so that the Service's DNS name, which clients
// were given, survives the group being deleted and made again.
func groupFrontName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	hash := hex.EncodeToString(sum[:])[:groupFrontHashLen]
	room := validation.DNS1035LabelMaxLength - len(groupFrontPrefix) - 1 - groupFrontHashLen
	body := strings.Trim(provider.SanitizeName(namespace)+"-"+provider.SanitizeName(name), "-")
	if len(body) > room {
		body = strings.TrimRight(body[:room], "-")
	}
	if body == "" {
		return groupFrontPrefix + hash
	}
	return groupFrontPrefix + body + "-" + hash
}

// groupAntiAffinity keeps a group's members on different nodes where the
// nodes allow it. Preferred, not required: a required anti-affinity would
// leave every member past the number of schedulable nodes Pending, so a
// single-node cluster (kind, a laptop) could not run a group of two, and a
// drained node's member could not come back while the others hold the
// remaining nodes. A group whose members share a node still serves; it only
// loses that node's failure together.
func groupAntiAffinity(groupUID string) *corev1.PodAntiAffinity {
	return &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: groupSpreadWeight,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelGroupUID: groupUID}},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}
}

// groupSelector selects a group's member Pods, this provider's only (the
// managed mark): what the group's Service routes to (its ready ones) and
// its budget counts.
func groupSelector(groupUID string) map[string]string {
	return map[string]string{labelGroupUID: groupUID, provider.MarkManaged: provider.MarkManagedValue}
}

// front is a validated group front: what the builders need.
type front struct {
	// name and namespace are the Service's and the budget's.
	name, namespace string
	group           provider.GroupRef
	port            int32
	// members is the group's size (GroupFront.Members): the budget keeps
	// all but one.
	members int32
}

// resolveFront validates a group (and the port, when withPort) against
// the entry, naming every problem no retry can fix (Permanent). The front
// lives where the group's members do: the entry's namespace, or the
// group's own when the entry names none.
func (p *Provider) resolveFront(g provider.GroupRef, port int32, withPort bool) (front, error) {
	f := front{name: groupFrontName(g.Namespace, g.Name), namespace: p.namespaceFor(g.Namespace), group: g, port: port}
	var problems []string
	if msgs := validation.IsDNS1123Label(g.Namespace); len(msgs) > 0 {
		problems = append(problems, fmt.Sprintf("group namespace %q: %s", g.Namespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(g.Name); len(msgs) > 0 {
		problems = append(problems, fmt.Sprintf("group name %q: %s", g.Name, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsValidLabelValue(g.UID); g.UID == "" || len(msgs) > 0 {
		problems = append(problems, fmt.Sprintf("group UID %q is not a label value: %s", g.UID, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Label(f.namespace); len(msgs) > 0 {
		problems = append(problems, fmt.Sprintf("namespace %q: %s", f.namespace, strings.Join(msgs, "; ")))
	}
	if withPort && (port < 1 || port > 65535) {
		problems = append(problems, fmt.Sprintf("port %d is outside 1-65535", port))
	}
	if len(problems) > 0 {
		return front{}, provider.Errorf(provider.ErrPermanent, "invalid group front: %s", strings.Join(problems, "; "))
	}
	return f, nil
}

// groupMeta is the ObjectMeta of a group's Service and budget: the marks
// with the group's UID, the app labels, labelGroupUID (and no
// labelInstance: they are no instance's), the group's annotation and, in
// the group's own namespace, an OwnerReference to the ProxyGroup.
func (p *Provider) groupMeta(f front) metav1.ObjectMeta {
	labels := provider.Marks{Managed: true, UID: f.group.UID, Installation: p.opts.InstallationID}.Labels()
	labels[labelName] = labelNameValue
	labels[labelManagedBy] = managedByValue
	labels[labelGroupUID] = f.group.UID
	m := metav1.ObjectMeta{
		Name:        f.name,
		Namespace:   f.namespace,
		Labels:      labels,
		Annotations: map[string]string{annotationGroup: f.group.Namespace + "/" + f.group.Name},
	}
	if ref, ok := groupOwnerRef(f); ok {
		m.OwnerReferences = []metav1.OwnerReference{ref}
	}
	return m
}

// groupOwnerRef makes the ProxyGroup the controller of its front, on the
// rule of ownerRef: only in the group's own namespace (Kubernetes has no
// cross-namespace owners), blockOwnerDeletion false.
func groupOwnerRef(f front) (metav1.OwnerReference, bool) {
	if f.namespace != f.group.Namespace {
		return metav1.OwnerReference{}, false
	}
	return metav1.OwnerReference{
		APIVersion:         proxyAPIVersion,
		Kind:               groupKind,
		Name:               f.group.Name,
		UID:                types.UID(f.group.UID),
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(false),
	}, true
}

// buildGroupService is the group's endpoint: <name>.<namespace>.svc over
// the group's ready members (a Service's EndpointSlices hold only the
// Pods whose readiness probe passes), headless or with a ClusterIP as the
// entry's serviceType says, like an instance's Service.
func (p *Provider) buildGroupService(f front) *corev1.Service {
	return &corev1.Service{ObjectMeta: p.groupMeta(f), Spec: p.serviceSpec(groupSelector(f.group.UID), f.port)}
}

// buildGroupPDB lets voluntary disruptions (a node drain's evictions) take
// one member at a time: minAvailable is the group's size less one, an
// integer, since the disruption controller computes a maxUnavailable (or a
// percentage) from the Pods' controller's scale subresource, which a Proxy
// has not ("proxies.egress.proxy-operator.dev does not implement the scale
// subresource", and no eviction is ever allowed), while an integer
// minAvailable counts the selected Pods. With one member, that member may
// go (a budget that allowed none would block the drain for ever). A member
// that is not ready may always be evicted (AlwaysAllow): it serves
// nothing, and holding a drain on it helps no client.
func (p *Provider) buildGroupPDB(f front) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: p.groupMeta(f),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable:               ptr.To(intstr.FromInt32(max(f.members-1, 0))),
			Selector:                   &metav1.LabelSelector{MatchLabels: groupSelector(f.group.UID)},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

// groupEndpoint is the front's endpoint, in the host form an instance's
// Service gives its Proxy (serviceHost).
func groupEndpoint(f front) string {
	return fmt.Sprintf("%s:%d", serviceHost(f.name, f.namespace), f.port)
}

// groupKinds are the objects of a group's front, as RemoveGroupFront,
// ListSecondary and DeleteSecondary reach them. They are not
// secondaryKinds: an instance's Delete never looks for them, and
// ListOwnedSecondaries (a Proxy's objects) never lists them.
var groupKinds = []objectKind{
	kindOf[corev1.Service](kindGroupService, corev1.SchemeGroupVersion.WithResource("services"),
		func(c clientset.Interface, ns string) typedClient[corev1.Service] {
			return c.CoreV1().Services(ns)
		}),
	kindOf[policyv1.PodDisruptionBudget](kindGroupPDB, policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"),
		func(c clientset.Interface, ns string) typedClient[policyv1.PodDisruptionBudget] {
			return c.PolicyV1().PodDisruptionBudgets(ns)
		}),
}

// FrontGroup makes the group's Service and PodDisruptionBudget, or brings
// existing ones to f, and returns the Service's endpoint
// <name>.<namespace>.svc:<port>. An object as asked costs its read only.
// One of this installation's with the group's UID is patched where it
// differs (port, selector, labels, owner); one of a deleted group of the
// same name (another group UID) is taken over; one that is not this
// installation's is Permanent, and left alone.
func (p *Provider) FrontGroup(ctx context.Context, f provider.GroupFront) (string, error) {
	endpoint, outcomes, err := p.frontGroup(ctx, f)
	if err == nil {
		provider.Note(ctx, "service", outcomes[0], "pdb", outcomes[1])
	}
	return endpoint, err
}

func (p *Provider) frontGroup(ctx context.Context, gf provider.GroupFront) (string, [2]string, error) {
	var outcomes [2]string
	c, err := p.begin(ctx, provider.OpFrontGroup)
	if err != nil {
		return "", outcomes, err
	}
	f, err := p.resolveFront(gf.Group, gf.Port, true)
	if err != nil {
		return "", outcomes, err
	}
	f.members = gf.Members
	svcs := c.CoreV1().Services(f.namespace)
	pdbs := c.PolicyV1().PodDisruptionBudgets(f.namespace)
	wantSvc, wantPDB := p.buildGroupService(f), p.buildGroupPDB(f)
	// The two need nothing of each other: one round trip, as the
	// instance's objects are made.
	steps := [2]func() (string, error){
		func() (string, error) {
			return ensureFront(ctx, p, f, frontObject[*corev1.Service]{
				kind: "service", want: wantSvc,
				get: func() (*corev1.Service, error) { return svcs.Get(ctx, f.name, metav1.GetOptions{}) },
				create: func() error {
					_, err := svcs.Create(ctx, wantSvc, metav1.CreateOptions{})
					return err
				},
				patch:     svcs.Patch,
				specPatch: func(have *corev1.Service) map[string]any { return serviceSpecPatch(have, wantSvc) },
			})
		},
		func() (string, error) {
			return ensureFront(ctx, p, f, frontObject[*policyv1.PodDisruptionBudget]{
				kind: "poddisruptionbudget", want: wantPDB,
				get: func() (*policyv1.PodDisruptionBudget, error) {
					return pdbs.Get(ctx, f.name, metav1.GetOptions{})
				},
				create: func() error {
					_, err := pdbs.Create(ctx, wantPDB, metav1.CreateOptions{})
					return err
				},
				patch: pdbs.Patch,
				specPatch: func(have *policyv1.PodDisruptionBudget) map[string]any {
					return pdbSpecPatch(have, wantPDB)
				},
			})
		},
	}
	var errs [len(steps)]error
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() { outcomes[i], errs[i] = step() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return "", outcomes, err
		}
	}
	return groupEndpoint(f), outcomes, nil
}

// frontObject is one object of a group's front as FrontGroup reaches it.
type frontObject[T metav1.Object] struct {
	// kind names it in errors ("service").
	kind   string
	want   T
	get    func() (T, error)
	create func() error
	patch  patchFunc[T]
	// specPatch is the spec part of the merge patch that brings have to
	// want; empty when its spec is as asked.
	specPatch func(have T) map[string]any
}

// ensureFront reads the object and creates it when it is missing, or
// judges the one there and patches it to o.want where it differs. It
// says what it did: created, unchanged, updated or taken over.
func ensureFront[T metav1.Object](ctx context.Context, p *Provider, f front, o frontObject[T]) (string, error) {
	what := o.kind + " " + instanceID(f.namespace, f.name)
	for range 2 {
		have, err := o.get()
		if apierrors.IsNotFound(err) {
			err = o.create()
			if apierrors.IsAlreadyExists(err) {
				continue // made meanwhile (another pass): judge it
			}
			if err != nil {
				return "", classify(err, "creating "+what)
			}
			return "created", nil
		}
		if err != nil {
			return "", classify(err, "reading "+what)
		}
		return bringFront(ctx, p, f, what, have, o)
	}
	return "", provider.Errorf(provider.ErrTransient, "%s was made and removed again while it was being made; tried again on the next pass", what)
}

// bringFront applies the front's rule to an existing object: the group's
// own or a deleted same-named group's (this installation's, with a group
// UID label) is patched to want, with the resourceVersion it was judged
// at as the patch's precondition (a change since is a Conflict,
// Transient); anything else is refused.
func bringFront[T metav1.Object](ctx context.Context, p *Provider, f front, what string, have T, o frontObject[T]) (string, error) {
	labels := have.GetLabels()
	if !p.ours(labels) {
		return "", provider.Errorf(provider.ErrPermanent, "%s exists and is not this installation's: rename or delete it", what)
	}
	held := labels[labelGroupUID]
	if held == "" {
		// Ours, but no group's: nothing the provider makes is like that
		// under a group's name. Taking it over could steal what selects an
		// instance's Pod.
		return "", provider.Errorf(provider.ErrPermanent,
			"%s is this installation's but no ProxyGroup's (it has no %s label): rename or delete it", what, labelGroupUID)
	}
	if have.GetDeletionTimestamp() != nil {
		return "", provider.Errorf(provider.ErrTransient, "%s is being deleted; it is made again once it is gone", what)
	}
	want := o.want
	md := map[string]any{}
	if l := missingEntries(labels, want.GetLabels()); l != nil {
		md["labels"] = l
	}
	if a := missingEntries(have.GetAnnotations(), want.GetAnnotations()); a != nil {
		md["annotations"] = a
	}
	// The owner is the group's alone; in another namespace than the
	// group's there is none to set, and whatever is there is left.
	if refs := want.GetOwnerReferences(); len(refs) > 0 && !equality.Semantic.DeepEqual(have.GetOwnerReferences(), refs) {
		md["ownerReferences"] = refs
	}
	spec := o.specPatch(have)
	if len(md) == 0 && len(spec) == 0 {
		return "unchanged", nil
	}
	md["resourceVersion"] = have.GetResourceVersion()
	patch := map[string]any{"metadata": md}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return "", provider.Errorf(provider.ErrPermanent, "encoding the patch of %s: %w", what, err)
	}
	if _, err := o.patch(ctx, f.name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return "", classify(err, "updating "+what)
	}
	if held != f.group.UID {
		p.logger(ctx).V(1).Info("took over a deleted group's front of the same name", "object", what, "previousGroupUID", held)
		return "taken over", nil
	}
	return "updated", nil
}

// missingEntries is want's entries that have lacks or holds with another
// value; nil when there are none. Entries have holds besides want's are
// left: the provider sets its own keys only.
func missingEntries(have, want map[string]string) map[string]string {
	var out map[string]string
	for k, v := range want {
		if cur, ok := have[k]; !ok || cur != v {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// replacing is the merge patch that turns the map have into want: want's
// entries, and null for each key only have holds.
func replacing(have, want map[string]string) map[string]any {
	out := make(map[string]any, len(want))
	for k, v := range want {
		out[k] = v
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			out[k] = nil
		}
	}
	return out
}

// serviceSpecPatch brings the selector and the port to want's. The type
// and clusterIP are left as found: a Service's clusterIP is immutable, so
// a changed serviceType reaches a front made after it, as it reaches an
// instance's Service.
func serviceSpecPatch(have, want *corev1.Service) map[string]any {
	sp := map[string]any{}
	if !maps.Equal(have.Spec.Selector, want.Spec.Selector) {
		sp["selector"] = replacing(have.Spec.Selector, want.Spec.Selector)
	}
	if !samePorts(have.Spec.Ports, want.Spec.Ports) {
		sp["ports"] = want.Spec.Ports // a merge patch replaces a list whole
	}
	return sp
}

// samePorts compares what the front sets of each port; what the API
// server fills in (a nodePort, were the type changed by hand) is left.
func samePorts(have, want []corev1.ServicePort) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range want {
		h, w := have[i], want[i]
		if h.Name != w.Name || h.Protocol != w.Protocol || h.Port != w.Port || h.TargetPort != w.TargetPort {
			return false
		}
	}
	return true
}

// pdbSpecPatch brings the budget's selector, minAvailable (with no
// maxUnavailable beside it) and unhealthy-Pod eviction policy to want's.
func pdbSpecPatch(have, want *policyv1.PodDisruptionBudget) map[string]any {
	sp := map[string]any{}
	wantSel := want.Spec.Selector.MatchLabels
	if sel := have.Spec.Selector; sel == nil || len(sel.MatchExpressions) > 0 || !maps.Equal(sel.MatchLabels, wantSel) {
		var old map[string]string
		if sel != nil {
			old = sel.MatchLabels
		}
		sp["selector"] = map[string]any{"matchLabels": replacing(old, wantSel), "matchExpressions": nil}
	}
	if have.Spec.MaxUnavailable != nil || have.Spec.MinAvailable == nil || *have.Spec.MinAvailable != *want.Spec.MinAvailable {
		sp["minAvailable"] = want.Spec.MinAvailable
		sp["maxUnavailable"] = nil
	}
	if ptr.Deref(have.Spec.UnhealthyPodEvictionPolicy, "") != *want.Spec.UnhealthyPodEvictionPolicy {
		sp["unhealthyPodEvictionPolicy"] = want.Spec.UnhealthyPodEvictionPolicy
	}
	return sp
}

// RemoveGroupFront deletes the group's Service and PodDisruptionBudget,
// each only when it is this installation's and labelled with g.UID, with
// the UID read as the delete's precondition. One that is gone, or another
// group's under the same name (the group made again), counts as removed
// and is left alone.
func (p *Provider) RemoveGroupFront(ctx context.Context, g provider.GroupRef) error {
	deleted, err := p.removeGroupFront(ctx, g)
	provider.Note(ctx, "deleted", deleted)
	return err
}

func (p *Provider) removeGroupFront(ctx context.Context, g provider.GroupRef) ([]string, error) {
	c, err := p.begin(ctx, provider.OpRemoveGroupFront)
	if err != nil {
		return nil, err
	}
	f, err := p.resolveFront(g, 0, false)
	if err != nil {
		return nil, err
	}
	// Another group's under the name (the group made again) is left
	// alone. The fronts are read live: the cache holds no group kind.
	return p.deleteNamed(ctx, c, groupKinds, f.namespace, f.name, func(labels map[string]string) bool {
		return p.ours(labels) && labels[labelGroupUID] == g.UID
	}, true)
}

// listGroupFronts lists the group fronts' objects that sel (this
// installation's marks, perhaps an owner's) matches and that carry
// labelGroupUID, as secondaries of no instance: Instance and InstanceID
// empty, InstanceGone true, so that the collector keeps one whose UID
// mark is a live ProxyGroup's and removes it once that group is gone.
func (p *Provider) listGroupFronts(ctx context.Context, sel string) ([]provider.Secondary, error) {
	var out []provider.Secondary
	for _, k := range groupKinds {
		objs, err := p.listOurs(ctx, k, frontSelector(sel))
		if apierrors.IsForbidden(err) {
			// An operator whose Role predates group fronts (its RBAC
			// component not applied again on an upgrade): the collector
			// keeps collecting the instances' objects, and leaves out what
			// it cannot see, as the contract allows; Check names the
			// missing right.
			p.logger(ctx).Info("group fronts' objects not listed for the collector: no right to list them", "kind", k.kind, "error", err.Error())
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			if obj.GetLabels()[labelGroupUID] == "" { // the selector did it
				continue
			}
			out = append(out, provider.Secondary{
				ID:           secondaryID(k.kind, obj.GetNamespace(), obj.GetName(), obj.GetUID()),
				Kind:         k.kind,
				Marks:        provider.MarksFromLabels(obj.GetLabels()),
				InstanceGone: true,
				CreatedAt:    obj.GetCreationTimestamp().UTC(),
			})
		}
	}
	return out, nil
}

// instanceSelector narrows sel to an instance's objects: they never carry
// labelGroupUID (a member's Pod does, and Pods are no secondaries), the
// group fronts' objects always do.
func instanceSelector(sel string) string { return sel + ",!" + labelGroupUID }

// frontSelector narrows sel to the group fronts' objects.
func frontSelector(sel string) string { return sel + "," + labelGroupUID }

// fillGroupLabel gives an adopted member Pod its group's label when it
// lacks it (a Pod made before the provider marked members), so that the
// group's Service selects it; a merge patch preconditioned on the
// resourceVersion judged, as fillUIDMark writes. The anti-affinity is in
// the Pod's spec, which cannot change: it reaches the group's next Pods.
func fillGroupLabel(ctx context.Context, p *Provider, s spec, pod *corev1.Pod, patch patchFunc[*corev1.Pod]) (*corev1.Pod, error) {
	g := s.req.Group
	if g == nil || pod.Labels[labelGroupUID] == g.UID {
		return pod, nil
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"labels":          map[string]string{labelGroupUID: g.UID},
	}})
	if err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "encoding the group label patch: %w", err)
	}
	got, err := patch(ctx, pod.Name, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		return nil, classify(err, "writing the group label of pod "+instanceID(s.namespace, s.name))
	}
	p.logger(ctx).WithValues("name", s.name).V(1).Info("adopted member Pod lacked its group's label; filled in", "group", g.Namespace+"/"+g.Name)
	return got, nil
}
