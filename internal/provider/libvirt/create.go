package libvirt

import (
	"context"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Create is not implemented yet: it returns a Permanent error.
//
// The plan (issue 9), shaped for the non-blocking create of
// internal/provider/inflight (branch i8-async) once it is on main: under the
// per-name lock (keyedlock), validate the placement before any dial (host by
// zone, optional with one host; machine type and image from the catalogue,
// or an image URL with its sha256), look the domain up (adoption with the
// UID guard; a paused or suspended domain of ours resumed), then hand the
// slow steps to an inflight.Step keyed by the instance name: the capacity
// precheck (pool free space, host free memory: ErrQuotaExceeded with the
// figures), the image cache (downloaded once per host, verified by sha256,
// streamed into the pool on a dedicated connection, hostTable.fresh), the
// overlay (reused only if its backing image and size match), the NoCloud
// seed (internal/provider/nocloud, with squid.UserData and the guest-agent
// vendor-data), the domain XML with the marks' metadata element, define and
// start. Create returns Provisioning with the step's Progress meanwhile. A
// volume or domain that vanishes under it is Transient (reclassify), never
// NotFound.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpCreate); err != nil {
		return provider.Instance{}, err
	}
	return provider.Instance{}, errNotImplemented("Create")
}
