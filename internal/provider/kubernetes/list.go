package kubernetes

import (
	"context"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// listPageSize bounds each page of the listing, so a cluster with many Pods
// of ours is read in pieces rather than one large response.
const listPageSize = 500

// ListByTag returns this installation's managed Pods, in every namespace or
// the entry's one, with ID, UID and CreatedAt, sorted by ID. The selector
// does the filtering on the API server; State and IP are left out, as the
// contract allows. A failed page fails the whole listing (fail-whole).
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	return p.list(ctx)
}

// selector matches this installation's managed objects.
func (p *Provider) selector() string {
	return labels.Set{
		provider.MarkManaged:      provider.MarkManagedValue,
		provider.MarkInstallation: p.opts.InstallationID,
	}.AsSelector().String()
}

// ownerSelector matches this installation's managed objects whose UID
// mark is uid. An empty or malformed uid is Permanent: it would select the
// objects with an empty mark, or none.
func (p *Provider) ownerSelector(uid string) (string, error) {
	if msgs := validation.IsValidLabelValue(uid); uid == "" || len(msgs) > 0 {
		return "", provider.Errorf(provider.ErrPermanent, "owner UID %q is not a label value: %s", uid, strings.Join(msgs, "; "))
	}
	return labels.Set{
		provider.MarkManaged:      provider.MarkManagedValue,
		provider.MarkInstallation: p.opts.InstallationID,
		provider.MarkUID:          uid,
	}.AsSelector().String(), nil
}

// ListOwnedInstances is ListByTag for the Pods whose UID mark is uid: the
// selector does it on the API server, so a Proxy's deletion pass reads its
// own Pod, not the fleet's (provider.OwnerLister). It is the one read of
// a deletion pass that is not the cache's (cache.go): a plain LIST, which
// the API server answers as of now.
func (p *Provider) ListOwnedInstances(ctx context.Context, uid string) ([]provider.Instance, error) {
	if _, err := p.begin(ctx, provider.OpListOwnedInstances); err != nil {
		return nil, err
	}
	sel, err := p.ownerSelector(uid)
	if err != nil {
		return nil, err
	}
	// Live: this answer is what lets the deletion pass drop the
	// finalizer, and the cache cannot vouch for objects made behind its
	// back (a killed predecessor's create still in flight, the soak's
	// --inject-leak=behind). A Pod found here that the cache lacks is
	// read live by Delete too.
	list, err := p.listPods(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, in := range list {
		ns, name, _ := strings.Cut(in.ID, "/")
		if _, found, _ := p.cache.lookup("pod", ns, name); !found {
			p.cache.own.behind(objectKey{"pod", ns, name})
		}
	}
	return list, nil
}

func (p *Provider) list(ctx context.Context) ([]provider.Instance, error) {
	if _, err := p.begin(ctx, provider.OpList); err != nil {
		return nil, err
	}
	if pods, ok := p.cache.all("pod"); ok {
		return instancesOf(pods), nil
	}
	return p.listPods(ctx, p.selector())
}

// instancesOf is the listing of pods, sorted by ID.
func instancesOf(pods []metav1.Object) []provider.Instance {
	list := make([]provider.Instance, 0, len(pods))
	for _, pod := range pods {
		list = append(list, listed(pod))
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list
}

// listed is a Pod as a listing shows it.
func listed(pod metav1.Object) provider.Instance {
	return provider.Instance{
		ID:        instanceID(pod.GetNamespace(), pod.GetName()),
		UID:       pod.GetLabels()[provider.MarkUID],
		CreatedAt: pod.GetCreationTimestamp().UTC(),
	}
}

// listPods lists the Pods of ours that sel matches, in every namespace or
// the entry's one, sorted by ID: as metadata only, since a listing shows
// no more (listed).
func (p *Provider) listPods(ctx context.Context, sel string) ([]provider.Instance, error) {
	pods, err := p.listOurs(ctx, podKind, sel)
	if err != nil {
		return nil, err
	}
	return instancesOf(pods), nil
}
