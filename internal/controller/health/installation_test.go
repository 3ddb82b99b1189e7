package health

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// TestTwoInstallationsKeepTheirProviderHealth: two installations in one
// cluster, each with its own provider, share the cluster-scoped
// ProviderHealth kind. Neither deletes the other's object as one of its own
// providers that left the config, and a provider named like the other
// installation's is refused, not taken over.
func TestTwoInstallationsKeepTheirProviderHealth(t *testing.T) {
	const nameA, nameB = "h-inst-a", "h-inst-b"
	cleanup(t, nameA, nameB)
	ea, _ := fakeEntry(nameA)
	eb, _ := fakeEntry(nameB)
	la, _ := newLoop(t, nil, &providers{entries: []*registry.Entry{ea}})
	la.Installation = "installation-a"
	psB := &providers{entries: []*registry.Entry{eb}}
	lb, _ := newLoop(t, nil, psB)
	lb.Installation = "installation-b"

	for range 2 {
		pass(t, la)
		pass(t, lb)
	}
	for name, inst := range map[string]string{nameA: "installation-a", nameB: "installation-b"} {
		ph, _ := wantCondition(t, name, metav1.ConditionTrue, provider.ReasonHealthy)
		if ph.Labels[InstallationLabel] != inst || ph.Labels[ManagedByLabel] != ManagedBy {
			t.Errorf("%s labels = %v; want %s=%s", name, ph.Labels, InstallationLabel, inst)
		}
	}

	// b configures a provider of a's name too: its pass reports it, and
	// a's object stays a's.
	ea2, _ := fakeEntry(nameA)
	psB.set(eb, ea2)
	err := lb.CheckOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "installation-a") {
		t.Errorf("CheckOnce = %v; want the name clash with installation-a reported", err)
	}
	if ph := get(t, nameA); ph == nil || ph.Labels[InstallationLabel] != "installation-a" {
		t.Errorf("%s after b configured the name: %+v", nameA, ph)
	}

	// A provider leaving b's config takes only b's object with it.
	psB.set()
	pass(t, lb)
	if get(t, nameB) != nil {
		t.Errorf("%s outlived its provider", nameB)
	}
	if get(t, nameA) == nil {
		t.Errorf("installation b deleted %s of installation a", nameA)
	}
}
