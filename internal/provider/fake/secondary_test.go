package fake_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
)

func secondaryIDs(list []provider.Secondary) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.ID
	}
	return out
}

// TestFakeSecondaries (issue 8, item 2): planted secondary resources are
// listed for their installation only, with their owner, marks, age and
// whether their instance is gone; DeleteSecondary removes exactly the
// listed one; Delete of the instance takes its secondaries with it; every
// call is counted and scriptable like the lifecycle calls.
func TestFakeSecondaries(t *testing.T) {
	b := fake.NewBackend()
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	b.SetClock(func() time.Time { return at })
	p := fake.New(providerName, b, provider.Options{InstallationID: "inst-a"})
	var _ provider.SecondaryLister = p

	live := mustCreate(t, p, request("web", "u1"))
	liveName := nameOf(t, live.ID)
	ours := &provider.Marks{Managed: true, UID: "u1", Installation: "inst-a"}
	withLive := b.PlantSecondary("volume", liveName, ours)
	orphan := b.PlantSecondary("volume", "proxy-gone-0123", &provider.Marks{Managed: true, UID: "u2", Installation: "inst-a"})
	seed := b.PlantSecondary("seed-iso", "proxy-gone-0123", &provider.Marks{Managed: true, Installation: "inst-a"})
	b.PlantSecondary("volume", "proxy-theirs-0123", &provider.Marks{Managed: true, UID: "u3", Installation: "inst-b"})
	b.PlantSecondary("volume", "proxy-unmarked-0123", nil)

	list, err := p.ListSecondary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Secondary{
		{ID: withLive.ID, Kind: "volume", Marks: *ours, Instance: liveName, InstanceID: live.ID, CreatedAt: at},
		{ID: orphan.ID, Kind: "volume", Marks: provider.Marks{Managed: true, UID: "u2", Installation: "inst-a"},
			Instance: "proxy-gone-0123", InstanceID: fake.ID("proxy-gone-0123"), InstanceGone: true, CreatedAt: at},
		{ID: seed.ID, Kind: "seed-iso", Marks: provider.Marks{Managed: true, Installation: "inst-a"},
			Instance: "proxy-gone-0123", InstanceID: fake.ID("proxy-gone-0123"), InstanceGone: true, CreatedAt: at},
	}
	slices.SortFunc(want, func(x, y provider.Secondary) int { return compare(x.ID, y.ID) })
	if !slices.Equal(list, want) {
		t.Errorf("ListSecondary =\n%+v\nwant\n%+v", list, want)
	}
	if len(slices.Compact(secondaryIDs(list))) != 3 {
		t.Errorf("IDs not distinct: %v", secondaryIDs(list))
	}

	// The other installation sees only its own.
	other := fake.New("b", b, provider.Options{InstallationID: "inst-b"})
	if l, err := other.ListSecondary(t.Context()); err != nil || len(l) != 1 || l[0].Marks.UID != "u3" {
		t.Errorf("inst-b lists %+v, %v; want only its own", l, err)
	}
	if err := other.DeleteSecondary(t.Context(), orphan.ID); err != nil {
		t.Errorf("DeleteSecondary of another installation's resource: %v, want success", err)
	}
	if _, ok := b.LookupSecondary("volume", "proxy-gone-0123"); !ok {
		t.Error("another installation deleted inst-a's secondary")
	}

	// DeleteSecondary removes exactly what it names; gone is success.
	if err := p.DeleteSecondary(t.Context(), orphan.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteSecondary(t.Context(), orphan.ID); err != nil {
		t.Errorf("DeleteSecondary of something gone: %v, want success", err)
	}
	if _, ok := b.LookupSecondary("volume", "proxy-gone-0123"); ok {
		t.Error("the deleted secondary is still on the backend")
	}
	// A resource recreated under the same kind and instance is another
	// object: the old ID does not reach it.
	again := b.PlantSecondary("seed-iso", "proxy-gone-0123", &provider.Marks{Managed: true, Installation: "inst-a"})
	if again.ID == seed.ID {
		t.Fatalf("a recreated secondary kept the ID %q", seed.ID)
	}
	if err := p.DeleteSecondary(t.Context(), seed.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.LookupSecondary("seed-iso", "proxy-gone-0123"); !ok {
		t.Error("a stale ID deleted the recreated secondary")
	}
	if err := p.DeleteSecondary(t.Context(), "fake/proxy-web"); !errors.Is(err, provider.ErrPermanent) {
		t.Errorf("DeleteSecondary of an instance ID: %v, want Permanent", err)
	}
	if got := p.DeletedSecondaries(); !slices.Equal(got, []string{orphan.ID, orphan.ID, seed.ID, "fake/proxy-web"}) {
		t.Errorf("DeletedSecondaries = %v", got)
	}

	// Delete of the instance removes its secondaries.
	if err := p.Delete(t.Context(), live.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.LookupSecondary("volume", liveName); ok {
		t.Error("Delete of the instance left its secondary")
	}

	// Counted and scriptable like any call.
	p.FailNext(provider.OpListSecondary, provider.ErrQuotaExceeded)
	if _, err := p.ListSecondary(t.Context()); !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Errorf("scripted ListSecondary: %v", err)
	}
	if n := p.Calls(provider.OpListSecondary); n != 2 {
		t.Errorf("Calls(list_secondary) = %d, want 2", n)
	}
	if n := p.Calls(provider.OpDeleteSecondary); n != 4 {
		t.Errorf("Calls(delete_secondary) = %d, want 4", n)
	}
	p.Reset()
	if len(p.DeletedSecondaries()) != 0 || p.Calls(provider.OpDeleteSecondary) != 0 {
		t.Error("Reset kept the secondary records")
	}
	if len(b.Secondaries()) != 3 {
		t.Errorf("Reset touched the world: %v", b.Secondaries())
	}
	if !b.RemoveSecondary("volume", "proxy-theirs-0123") || b.RemoveSecondary("volume", "proxy-theirs-0123") {
		t.Error("RemoveSecondary does not report what it removed")
	}
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// PlantSecondary is the conformance suite's hand for secondary resources: a
// volume of the instance, as a crash before the instance leaves it.
func (h hook) PlantSecondary(_ *testing.T, instance string, marks provider.Marks) {
	h.p.Backend().PlantSecondary("volume", instance, &marks)
}

var _ providertest.SecondaryPlanter = hook{}
