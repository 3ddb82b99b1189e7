package libvirt

import (
	"context"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// ListByTag is not implemented yet: it returns a Permanent error.
//
// The plan (issue 9): every host (each on its pooled connection,
// concurrently), active and inactive domains, only this installation's
// marks read from the metadata element, no per-domain state or address
// RPC; one unreachable host does not blind the others (list the rest,
// report the failed hosts in a log line and a metric). Orphaned overlay and
// seed volumes are reported through provider.SecondaryLister.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpList); err != nil {
		return nil, err
	}
	return nil, errNotImplemented("ListByTag")
}
