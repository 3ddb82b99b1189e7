package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

var (
	_ provider.SecondaryLister = (*Provider)(nil)
	_ provider.OwnerLister     = (*Provider)(nil)
)

// objectKind is one kind of object the provider makes for an instance, as
// Delete, ListSecondary and DeleteSecondary reach it: every object of an
// instance is named after it and carries its marks.
type objectKind struct {
	kind string
	// resource is the kind's API resource (the cache's informers, the
	// permissions Check asks for).
	resource schema.GroupVersionResource
	// Listings are the metadata client's (listOurs).
	get func(ctx context.Context, c clientset.Interface, ns, name string) (metav1.Object, error)
	del func(ctx context.Context, c clientset.Interface, ns, name string, opts metav1.DeleteOptions) error
}

// typedClient is what objectKind needs of a typed client-go client.
type typedClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// kindOf makes the objectKind of a typed client.
func kindOf[T any, PT interface {
	*T
	metav1.Object
}](kind string, resource schema.GroupVersionResource, api func(c clientset.Interface, ns string) typedClient[T]) objectKind {
	return objectKind{
		kind: kind, resource: resource,
		get: func(ctx context.Context, c clientset.Interface, ns, name string) (metav1.Object, error) {
			obj, err := api(c, ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return PT(obj), nil
		},
		del: func(ctx context.Context, c clientset.Interface, ns, name string, opts metav1.DeleteOptions) error {
			return api(c, ns).Delete(ctx, name, opts)
		},
	}
}

// podKind is the instance itself.
var podKind = kindOf[corev1.Pod]("pod", corev1.SchemeGroupVersion.WithResource("pods"),
	func(c clientset.Interface, ns string) typedClient[corev1.Pod] {
		return c.CoreV1().Pods(ns)
	})

// secondaryKinds are the objects the provider makes beside each Pod, in the
// order Delete removes them (after the Pod). A kind added to Create is
// added here, and Delete, ListSecondary and DeleteSecondary cover it; the
// RBAC component and Check's neededPermissions grant and check its verbs.
var secondaryKinds = []objectKind{
	kindOf[corev1.Service]("service", corev1.SchemeGroupVersion.WithResource("services"),
		func(c clientset.Interface, ns string) typedClient[corev1.Service] {
			return c.CoreV1().Services(ns)
		}),
	kindOf[corev1.ConfigMap]("configmap", corev1.SchemeGroupVersion.WithResource("configmaps"),
		func(c clientset.Interface, ns string) typedClient[corev1.ConfigMap] {
			return c.CoreV1().ConfigMaps(ns)
		}),
	// Only a Proxy with clientAuth, or of an entry with an egressIPEcho
	// (the echo token), has one.
	kindOf[corev1.Secret]("secret", corev1.SchemeGroupVersion.WithResource("secrets"),
		func(c clientset.Interface, ns string) typedClient[corev1.Secret] {
			return c.CoreV1().Secrets(ns)
		}),
	// Last: the Pod it fences is already going (and Squid's own ACL admits
	// the same ranges while it shuts down).
	kindOf[networkingv1.NetworkPolicy]("networkpolicy", networkingv1.SchemeGroupVersion.WithResource("networkpolicies"),
		func(c clientset.Interface, ns string) typedClient[networkingv1.NetworkPolicy] {
			return c.NetworkingV1().NetworkPolicies(ns)
		}),
}

// collectableKinds are the kinds DeleteSecondary accepts: an instance's
// secondaries and a group front's objects (group.go).
func collectableKinds() []objectKind {
	return append(append([]objectKind{}, secondaryKinds...), groupKinds...)
}

func secondaryKind(kind string) (objectKind, bool) {
	for _, k := range collectableKinds() {
		if k.kind == kind {
			return k, true
		}
	}
	return objectKind{}, false
}

// secondaryID is "<kind>/<namespace>/<name>/<object UID>": the object UID
// makes DeleteSecondary delete exactly the object listed, never one made
// under the same name since (the next Create of the same Proxy).
func secondaryID(kind, namespace, name string, uid types.UID) string {
	return kind + "/" + namespace + "/" + name + "/" + string(uid)
}

// parseSecondaryID splits a secondary ID; a malformed one, or one of a kind
// that is not a secondary, is Permanent and never reaches the API server.
func parseSecondaryID(id string) (k objectKind, namespace, name string, uid types.UID, err error) {
	parts := strings.Split(id, "/")
	if len(parts) == 4 {
		var ok bool
		k, ok = secondaryKind(parts[0])
		if ok && len(validation.IsDNS1123Label(parts[1])) == 0 && len(validation.IsDNS1035Label(parts[2])) == 0 && parts[3] != "" {
			return k, parts[1], parts[2], types.UID(parts[3]), nil
		}
	}
	return objectKind{}, "", "", "", provider.Errorf(provider.ErrPermanent,
		"malformed secondary ID %q: want <%s>/<namespace>/<name>/<uid>", id, strings.Join(secondaryKindNames(), "|"))
}

func secondaryKindNames() []string {
	kinds := collectableKinds()
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.kind
	}
	return names
}

// listOurs lists every object of k carrying this installation's marks, in
// the entry's namespace or every one, page by page, as metadata only: its
// callers read the marks, names, UIDs and creation times, and a
// ConfigMap's data (a Squid config, some KiB) was most of what a fleet's
// listing carried (a collector pass in a wave of 10,000 Pods, when the
// cache cannot vouch for the fleet, held 90 MB of them at once:
// docs/performance.md). A failed page fails the whole listing (fail-whole).
func (p *Provider) listOurs(ctx context.Context, k objectKind, sel string) ([]metav1.Object, error) {
	p.mu.Lock()
	mc := p.metaClient
	p.mu.Unlock()
	api := mc.Resource(k.resource).Namespace(p.cfg.Namespace) // "" lists every namespace
	opts := metav1.ListOptions{LabelSelector: sel, Limit: listPageSize}
	var out []metav1.Object
	for {
		page, err := api.List(ctx, opts)
		if err != nil {
			return nil, classify(err, "listing "+k.kind+"s")
		}
		for i := range page.Items {
			obj := &page.Items[i]
			if p.ours(obj.Labels) { // the selector did it; a belt for the braces
				out = append(out, obj)
			}
		}
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// ListSecondary returns this installation's Services, ConfigMaps, Secrets
// and NetworkPolicies (every
// kind in secondaryKinds), sorted by ID, each with its marks, its instance
// (the object's name: every object of an instance is named after it) and
// InstanceGone when no Pod of that name exists. The secondaries are listed
// first and the Pods after, so a Pod made in between is seen; a Pod of the
// name that is not ours (its marks stripped by hand) still counts as the
// instance, since it may mount the ConfigMap: for each secondary whose Pod
// the marked listing lacks, one Get of the Pod decides.
//
// The group fronts' Services and PodDisruptionBudgets (groupKinds) are
// listed too, apart: they carry labelGroupUID, which an instance's objects
// never do, and are no instance's (Instance empty, InstanceGone true,
// their UID mark the group's), so that no group Service is taken for an
// instance's Service whose Pod is gone.
func (p *Provider) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	c, err := p.begin(ctx, provider.OpListSecondary)
	if err != nil {
		return nil, err
	}
	out, ok := p.cachedSecondaries("")
	if !ok {
		if out, err = p.listSecondaries(ctx, p.selector()); err != nil {
			return nil, err
		}
	}
	pods, ok := p.cache.all("pod")
	if !ok {
		if pods, err = p.listOurs(ctx, podKind, p.selector()); err != nil {
			return nil, err
		}
	}
	exists := make(map[string]bool, len(pods))
	for _, pod := range pods {
		exists[instanceID(pod.GetNamespace(), pod.GetName())] = true
	}
	gone := 0
	for i := range out {
		s := &out[i]
		id := s.InstanceID
		if _, known := exists[id]; !known {
			ns, name, _ := strings.Cut(id, "/")
			_, err := podKind.get(ctx, c, ns, name)
			switch {
			case apierrors.IsNotFound(err):
				exists[id] = false
			case err != nil:
				return nil, classify(err, "reading pod "+id)
			default:
				exists[id] = true
			}
		}
		s.InstanceGone = !exists[id]
		if s.InstanceGone {
			gone++
		}
	}
	fronts, err := p.listGroupFronts(ctx, p.selector())
	if err != nil {
		return nil, err
	}
	out = append(out, fronts...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	provider.Note(ctx, "instanceGone", gone, "groupFronts", len(fronts))
	return out, nil
}

// listSecondaries lists the objects of every secondary kind that sel
// matches, with InstanceGone unset: an instance's objects only, never a
// group front's (instanceSelector).
func (p *Provider) listSecondaries(ctx context.Context, sel string) ([]provider.Secondary, error) {
	out := []provider.Secondary{}
	for _, k := range secondaryKinds {
		objs, err := p.listOurs(ctx, k, instanceSelector(sel))
		if err != nil {
			return nil, err
		}
		out = appendSecondaries(out, k, objs)
	}
	return out, nil
}

// cachedSecondaries is listSecondaries from the cache, for the owner uid
// ("" for every owner); false when the cache cannot vouch for it.
func (p *Provider) cachedSecondaries(uid string) ([]provider.Secondary, bool) {
	out := []provider.Secondary{}
	for _, k := range secondaryKinds {
		objs, ok := p.cache.all(k.kind)
		if uid != "" {
			objs, ok = p.cache.owned(k.kind, uid)
		}
		if !ok {
			return nil, false
		}
		// What this provider deleted is gone (no finalizers hold these
		// kinds), though the cache may not have seen it yet.
		objs = slices.DeleteFunc(objs, func(o metav1.Object) bool { return p.cache.own.isDeleting(o.GetUID()) })
		out = appendSecondaries(out, k, objs)
	}
	return out, true
}

// appendSecondaries appends the instance's objects among objs of kind k.
func appendSecondaries(out []provider.Secondary, k objectKind, objs []metav1.Object) []provider.Secondary {
	for _, obj := range objs {
		if obj.GetLabels()[labelGroupUID] != "" { // a group front's
			continue
		}
		out = append(out, provider.Secondary{
			ID:         secondaryID(k.kind, obj.GetNamespace(), obj.GetName(), obj.GetUID()),
			Kind:       k.kind,
			Marks:      provider.MarksFromLabels(obj.GetLabels()),
			Instance:   obj.GetName(),
			InstanceID: instanceID(obj.GetNamespace(), obj.GetName()),
			CreatedAt:  obj.GetCreationTimestamp().UTC(),
		})
	}
	return out
}

// ListOwnedSecondaries is ListSecondary for the objects whose UID mark is
// uid, from the cache, or one LIST of each kind with the owner in the
// selector when the cache cannot vouch for them (cache.go), sorted by ID;
// InstanceGone is left false, as provider.OwnerLister allows, which saves
// the Pods' listing. It lists a Proxy's instances' objects only: a group
// front's, whose UID mark is a ProxyGroup's, is RemoveGroupFront's and
// the collector's, never a Proxy's deletion pass's.
func (p *Provider) ListOwnedSecondaries(ctx context.Context, uid string) ([]provider.Secondary, error) {
	if _, err := p.begin(ctx, provider.OpListOwnedSecondaries); err != nil {
		return nil, err
	}
	sel, err := p.ownerSelector(uid)
	if err != nil {
		return nil, err
	}
	out, ok := p.cachedSecondaries(uid)
	if !ok {
		if out, err = p.listSecondaries(ctx, sel); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// DeleteSecondary deletes the object the ID names (an instance's secondary
// or a group front's object), only when it is still
// the object listed (same UID, a precondition of the delete) and ours; one
// that is gone, recreated since or not ours counts as deleted and is left
// alone.
func (p *Provider) DeleteSecondary(ctx context.Context, id string) error {
	outcome, err := p.deleteSecondary(ctx, id)
	if err == nil {
		provider.Note(ctx, "outcome", outcome)
	}
	return err
}

func (p *Provider) deleteSecondary(ctx context.Context, id string) (string, error) {
	c, err := p.begin(ctx, provider.OpDeleteSecondary)
	if err != nil {
		return "", err
	}
	k, ns, name, uid, err := parseSecondaryID(id)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("%s %s/%s", k.kind, ns, name)
	obj, err := p.readObject(ctx, c, k, ns, name, false)
	switch {
	case apierrors.IsNotFound(err):
		return "already gone", nil
	case err != nil:
		return "", classify(err, "reading "+what)
	case obj.GetUID() != uid:
		return "recreated since, left alone", nil
	case !p.ours(obj.GetLabels()):
		return "not ours, left alone", nil
	case p.cache.own.isDeleting(uid):
		return "already being deleted", nil
	}
	return p.deleteObject(ctx, c, k, obj)
}

// readObject is the object of kind k at namespace/name, from the cache
// when it can say (cache.go) and live is false, else from the API server;
// absent is the API server's NotFound either way.
func (p *Provider) readObject(ctx context.Context, c clientset.Interface, k objectKind, namespace, name string, live bool) (metav1.Object, error) {
	if !live {
		obj, found, known := p.cache.lookup(k.kind, namespace, name)
		switch {
		case found:
			return obj, nil
		case known:
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: k.kind}, name)
		}
	}
	obj, err := k.get(ctx, c, namespace, name)
	if apierrors.IsNotFound(err) {
		p.cache.own.absent(objectKey{k.kind, namespace, name})
	}
	return obj, err
}

// The outcomes of deleteObject that sent a DELETE the API server took.
const (
	outcomeDeleted = "deleted"
	outcomeForced  = "deleted past its grace (grace 0)"
)

// deleteObject deletes obj, of kind k, only while it is the object read
// (the UID precondition), and says how it went. An object still there
// past its deletion deadline (callers skip one within it: going) is
// deleted with a grace of 0: a Pod whose kubelet did not end it in its
// grace is on a node that is lost or cut off, and only that removes it
// from the API server, so that its name, its Service's endpoints and its
// owner's replacement are free; a proxy holds no state a second copy
// could corrupt, and a kubelet that comes back stops the containers of a
// Pod the API server no longer has.
func (p *Provider) deleteObject(ctx context.Context, c clientset.Interface, k objectKind, obj metav1.Object) (string, error) {
	uid := obj.GetUID()
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	outcome := outcomeDeleted
	if obj.GetDeletionTimestamp() != nil {
		opts.GracePeriodSeconds = ptr.To[int64](0)
		outcome = outcomeForced
	}
	err := k.del(ctx, c, obj.GetNamespace(), obj.GetName(), opts)
	switch {
	case err == nil:
		p.cache.own.deleted(uid)
		return outcome, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return "gone or replaced meanwhile", nil
	default:
		return "", classify(err, fmt.Sprintf("deleting %s %s/%s", k.kind, obj.GetNamespace(), obj.GetName()))
	}
}
