package kubernetes

import (
	"context"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

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

func (p *Provider) list(ctx context.Context) ([]provider.Instance, error) {
	c, err := p.begin(ctx, provider.OpList)
	if err != nil {
		return nil, err
	}
	pods := c.CoreV1().Pods(p.cfg.Namespace) // "" lists every namespace
	opts := metav1.ListOptions{LabelSelector: p.selector(), Limit: listPageSize}
	list := []provider.Instance{}
	for {
		page, err := pods.List(ctx, opts)
		if err != nil {
			return nil, classify(err, "listing pods")
		}
		for i := range page.Items {
			pod := &page.Items[i]
			if !p.ours(pod.Labels) { // the selector did it; a belt for the braces
				continue
			}
			list = append(list, provider.Instance{
				ID:        instanceID(pod.Namespace, pod.Name),
				UID:       pod.Labels[provider.MarkUID],
				CreatedAt: pod.CreationTimestamp.UTC(),
			})
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list, nil
}
