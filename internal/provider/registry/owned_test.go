package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"
)

// ownerStub lists by owner: one instance of the UID asked for, and a
// secondaries listing that fails unclassified.
type ownerStub struct{ stub }

func (o *ownerStub) ListOwnedInstances(_ context.Context, uid string) ([]provider.Instance, error) {
	return []provider.Instance{{ID: "i1", UID: uid}}, nil
}

func (o *ownerStub) ListOwnedSecondaries(context.Context, string) ([]provider.Secondary, error) {
	return nil, errors.New("connection reset")
}

// TestEntryCarriesOwnerLister (issue 13): an entry's Owned is set exactly
// when its provider is a provider.OwnerLister, and its calls cross the
// method boundary (errors named and classified).
func TestEntryCarriesOwnerLister(t *testing.T) {
	types := testTypes(new([]*stub))
	types["owner"] = descriptor.TypeOf(parseStub, func(name string, c stubConfig, _ provider.Options) (*ownerStub, error) {
		return &ownerStub{stub: stub{name: name, size: c.Size}}, nil
	}, 0)
	r := New(types, provider.Options{})
	t.Cleanup(r.Close)
	if err := r.Apply(entries(t, r, "providers:\n- {name: p, type: plain}\n- {name: o, type: owner}\n")); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Get("p")
	o, _ := r.Get("o")
	if p.Owned != nil || o.Owned == nil {
		t.Fatalf("Owned: plain %v, owner %v; want nil and set", p.Owned, o.Owned)
	}
	if list, err := o.Owned.ListOwnedInstances(context.Background(), "u1"); err != nil || len(list) != 1 || list[0].UID != "u1" {
		t.Errorf("ListOwnedInstances = %+v, %v; want the stub's instance of u1", list, err)
	}
	_, err := o.Owned.ListOwnedSecondaries(context.Background(), "u1")
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Provider != "o" || pe.Op != provider.OpListOwnedSecondaries || !errors.Is(err, provider.ErrTransient) {
		t.Errorf("ListOwnedSecondaries error %#v: want a Transient *provider.Error naming o and %s", err, provider.OpListOwnedSecondaries)
	}
}
