package local

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// TestListOwnedInstances: the owner listing (a Proxy's deletion pass)
// returns exactly what ListByTag returns for that UID: another Proxy's
// instance, another installation's and an unmarked one with the same UID
// are left out, and a UID with nothing gives nothing.
func TestListOwnedInstances(t *testing.T) {
	p := newTestProvider(t, "inst-a", 29)
	ctx := context.Background()
	web := mustCreate(t, p, request("web"))
	mustCreate(t, p, request("api"))
	second := request("web")
	second.Name = provider.InstanceName("ns", "web", second.UID, "t") // a replacement's shape
	web2 := mustCreate(t, p, second)
	plant(t, p, "proxy-other-install", &provider.Marks{Managed: true, UID: "uid-web", Installation: "inst-b"}, 0)
	plant(t, p, "proxy-unmarked", &provider.Marks{UID: "uid-web"}, 0)

	own, err := p.ListOwnedInstances(ctx, "uid-web")
	if err != nil {
		t.Fatal(err)
	}
	all, err := p.ListByTag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []provider.Instance
	for _, in := range all {
		if in.UID == "uid-web" {
			want = append(want, in)
		}
	}
	byID := func(a, b provider.Instance) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(own, byID)
	if !slices.Equal(own, want) || len(own) != 2 || own[0].ID != min(web.ID, web2.ID) {
		t.Errorf("ListOwnedInstances(uid-web) = %+v, want %+v (ListByTag's, for that UID: %s and %s)", own, want, web.ID, web2.ID)
	}
	if none, err := p.ListOwnedInstances(ctx, "uid-nobody"); err != nil || len(none) != 0 {
		t.Errorf("ListOwnedInstances(uid-nobody) = %+v, %v; want nothing", none, err)
	}
	if sec, err := p.ListOwnedSecondaries(ctx, "uid-web"); err != nil || len(sec) != 0 {
		t.Errorf("ListOwnedSecondaries = %+v, %v; want nothing (no secondary resources here)", sec, err)
	}
}
