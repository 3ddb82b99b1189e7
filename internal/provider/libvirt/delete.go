package libvirt

import (
	"context"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Delete is not implemented yet: a well-formed ID gets a Permanent "not
// implemented" error, a malformed one the Permanent malformed-ID error.
//
// The plan (issue 9): cancel the name's in-flight step first, then destroy,
// undefine with NVRAM, managed save, snapshot and checkpoint metadata
// (backend.DomainUndefine), remove the overlay and the seed; nothing is left
// when nil is returned. An ID on a host that is no longer configured is a
// Permanent error saying to re-add the host or force-release the Proxy, not
// a silent success (the seeds orphaned such VMs).
func (p *Provider) Delete(ctx context.Context, id string) error {
	if err := provider.CtxErr(ctx, p.name, provider.OpDelete); err != nil {
		return err
	}
	if _, _, err := parseID(id); err != nil {
		return err
	}
	return errNotImplemented("Delete")
}
