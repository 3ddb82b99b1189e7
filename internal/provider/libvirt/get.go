package libvirt

import (
	"context"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Get is not implemented yet: a well-formed ID gets a Permanent "not
// implemented" error, a malformed one the Permanent malformed-ID error.
//
// The plan (issue 9): the seeds' state table (nostate Provisioning;
// running or blocked Provisioning until an address is known, then Running;
// every other state Stopped), the address from the guest agent first, then
// the DHCP lease and ARP tables, matched by the NIC's MAC, first routable
// IPv4; a failing source is skipped, only ctx ending is an error; the
// in-flight step's Progress while Create's step runs.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpGet); err != nil {
		return provider.Instance{}, err
	}
	if _, _, err := parseID(id); err != nil {
		return provider.Instance{}, err
	}
	return provider.Instance{}, errNotImplemented("Get")
}
