package providertest_test

import (
	"context"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
)

// The secondary-resource mutants (issue 8, conformance case 5), each the
// fake with one rule of provider.SecondaryLister broken the way a VM
// provider would break it.

// PlantSecondary plants a volume of the instance on the fake's backend.
func (h hook) PlantSecondary(_ *testing.T, instance string, marks provider.Marks) {
	h.p.Backend().PlantSecondary("volume", instance, &marks)
}

func (m *mutant) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	list, err := m.Provider.ListSecondary(m.ctx(ctx))
	switch m.mode {
	case "secondary-live-as-orphan":
		// Compares with the wrong name (the earlier providers' overlay check against
		// "<name>.qcow2"): every instance looks gone.
		for i := range list {
			list[i].InstanceGone = true
		}
	case "secondary-never-listed":
		// ListByTag's blind spot, kept: nothing but instances is listed.
		list = nil
	case "secondary-lists-every-installation":
		list = nil
		for _, r := range m.Backend().Secondaries() {
			if r.Marks != nil && r.Marks.Managed {
				_, exists := m.Backend().Lookup(r.Instance)
				list = append(list, provider.Secondary{ID: r.ID, Kind: r.Kind, Marks: *r.Marks, Instance: r.Instance,
					InstanceID: fake.ID(r.Instance), InstanceGone: !exists, CreatedAt: r.CreatedAt})
			}
		}
	}
	return list, m.post(err)
}

func (m *mutant) DeleteSecondary(ctx context.Context, id string) error {
	if m.mode == "secondary-delete-is-noop" {
		return nil
	}
	return m.post(m.Provider.DeleteSecondary(m.ctx(ctx), id))
}
