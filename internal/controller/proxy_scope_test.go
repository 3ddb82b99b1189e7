package controller

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
)

func TestTwoInstallationsScope(t *testing.T) {
	proxy := func(ns, class string) *egressv1.Proxy {
		return &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
			Spec: egressv1.ProxySpec{Provider: "local", ClassName: class}}
	}
	tests := []struct {
		name  string
		scope Scope
		px    *egressv1.Proxy
		want  bool
	}{
		{"default scope, no class", Scope{}, proxy("team-a", ""), true},
		{"default scope, a class", Scope{}, proxy("team-a", "gpu"), false},
		{"class scope, that class", Scope{Class: "gpu"}, proxy("team-a", "gpu"), true},
		{"class scope, no class", Scope{Class: "gpu"}, proxy("team-a", ""), false},
		{"class scope, another class", Scope{Class: "gpu"}, proxy("team-a", "gpu2"), false},
		{"class is matched whole, not as a prefix", Scope{Class: "gp"}, proxy("team-a", "gpu"), false},
		{"namespaces, listed", Scope{Namespaces: []string{"team-a", "team-b"}}, proxy("team-b", ""), true},
		{"namespaces, not listed", Scope{Namespaces: []string{"team-a", "team-b"}}, proxy("team-c", ""), false},
		{"namespaces and class, both match", Scope{Class: "gpu", Namespaces: []string{"team-a"}}, proxy("team-a", "gpu"), true},
		{"namespaces and class, class differs", Scope{Class: "gpu", Namespaces: []string{"team-a"}}, proxy("team-a", ""), false},
		{"namespaces and class, namespace differs", Scope{Class: "gpu", Namespaces: []string{"team-a"}}, proxy("team-b", "gpu"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.scope.Includes(tt.px); got != tt.want {
				t.Errorf("Includes = %t, want %t", got, tt.want)
			}
			// The watch filter agrees with the check, for every event kind.
			p := tt.scope.predicate()
			old := tt.px.DeepCopy()
			got := map[string]bool{
				"create":  p.Create(event.CreateEvent{Object: tt.px}),
				"update":  p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tt.px}),
				"delete":  p.Delete(event.DeleteEvent{Object: tt.px}),
				"generic": p.Generic(event.GenericEvent{Object: tt.px}),
			}
			for kind, passed := range got {
				if passed != tt.want {
					t.Errorf("predicate passes %s = %t, want %t", kind, passed, tt.want)
				}
			}
		})
	}
	// Anything but a Proxy is not in a Proxy scope.
	if (Scope{}).predicate().Generic(event.GenericEvent{Object: &metav1.PartialObjectMetadata{}}) {
		t.Error("the predicate passes a non-Proxy object")
	}
}

// TestTwoInstallationsReconcileLeavesOtherScope: a request for a Proxy
// outside the scope, however it was queued, acts on nothing: a live Proxy
// gets no finalizer, a Proxy being deleted keeps the finalizer another
// installation put on it, and neither gets a status, an event or a
// provider call.
func TestTwoInstallationsReconcileLeavesOtherScope(t *testing.T) {
	ctx := context.Background()
	providers := &staticProviders{}
	e, fp := fakeEntry("scope-fake")
	providers.set(e)
	d := newDirect(t, providers)
	d.r.Scope = Scope{Class: "gpu"}

	live := newProxy("live", "scope-fake") // no class: the default installation's
	leaving := newProxy("leaving", "scope-fake")
	leaving.Finalizers = []string{Finalizer}
	leaving.Status.ProviderID = fake.ID("recorded-by-the-other")
	for _, px := range []*egressv1.Proxy{live, leaving} {
		px.Namespace = d.ns
		if err := env.Client.Create(ctx, px); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Delete(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if px := d.get("leaving"); px != nil {
			px.Finalizers = nil
			if err := env.Client.Update(ctx, px); err != nil {
				t.Errorf("releasing leaving: %v", err)
			}
		}
	})
	before := map[string]string{}
	for _, name := range []string{"live", "leaving"} {
		before[name] = d.get(name).ResourceVersion
	}
	for i := 0; i < 3; i++ {
		for _, name := range []string{"live", "leaving"} {
			if res := d.reconcile(name); res != (ctrl.Result{}) {
				t.Errorf("Reconcile(%s) = %+v; want nothing to come back for", name, res)
			}
		}
	}
	for _, name := range []string{"live", "leaving"} {
		px := d.get(name)
		switch {
		case px == nil:
			t.Errorf("%s finalized by a reconciler of another scope", name)
		case px.ResourceVersion != before[name]:
			t.Errorf("%s written by a reconciler of another scope: finalizers %v, phase %q", name, px.Finalizers, px.Status.Phase)
		}
	}
	if evs := d.events(); len(evs) != 0 {
		t.Errorf("events %v; want none", evs)
	}
	for _, op := range []string{provider.OpCreate, provider.OpGet, provider.OpDelete} {
		if n := fp.Calls(op); n != 0 {
			t.Errorf("%d %s calls; want none", n, op)
		}
	}
}
