package providertest

import (
	"errors"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Rule: a provider keeps a Proxy's egress address across its instances
// only by being an EgressAddressMover; any other refuses the request
// (Permanent, naming spec.egressAddress) and makes nothing. A mover gives
// the address to the Proxy's first instance, gives a second instance of the
// same Proxy one of its own while the first holds it, moves it to the
// second (after which the first no longer egresses from it, and a second
// move is no move), and, for an address it reserved under the Delete
// policy, lists it as the Proxy's own secondary resource (no instance),
// which DeleteSecondary removes once no instance holds it.
func testEgressAddressKeptAcrossInstances(t *testing.T, h Harness) {
	e := newEnv(t, h)
	first := e.request("keeps-address")
	addr := provider.EgressAddress{Name: provider.EgressAddressName(first.Namespace, first.ProxyName, first.UID), Reserve: true}
	first.EgressAddress = &addr
	if e.bound.Mover == nil {
		_, err := e.create(e.ctx, first)
		if !expectClass(t, "Create with an egress address on a provider that keeps none", err, provider.ErrPermanent) {
			return
		}
		if !strings.Contains(err.Error(), "spec.egressAddress") {
			t.Errorf("Create with an egress address: %v, want it to name spec.egressAddress", err)
		}
		if list := e.mustList(); len(list) > 0 {
			t.Errorf("a refused Create left instances: %v", ids(list))
		}
		return
	}

	one := e.mustCreate(first)
	one, ok := e.waitRunning(one.ID)
	if !ok {
		return
	}
	kept := one.Egress.IP
	if kept == "" || one.Egress.Source != provider.EgressFromBackend {
		t.Fatalf("the first instance's egress %+v: want the kept address, from the backend", one.Egress)
	}

	second := first
	second.Name = provider.InstanceName(first.Namespace, first.ProxyName, first.UID, "another shape")
	two := e.mustCreate(second)
	two, ok = e.waitRunning(two.ID)
	if !ok {
		return
	}
	if two.Egress.IP == kept {
		t.Fatalf("a second instance came up on the kept address %s while the first holds it", kept)
	}
	move := func(what string) {
		t.Helper()
		ctx, cancel := e.callCtx(e.ctx)
		defer cancel()
		var err error = errPanicked
		guard(t, what, func() { err = e.bound.Mover.MoveEgressAddress(ctx, addr, one.ID, two.ID) })
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	move("MoveEgressAddress")
	if got, err := e.get(e.ctx, two.ID); err != nil || got.Egress.IP != kept {
		t.Fatalf("after the move the second instance egresses from %+v (%v), want %s", got.Egress, err, kept)
	}
	if got, err := e.get(e.ctx, one.ID); err == nil && got.Egress.IP == kept {
		t.Fatalf("after the move the first instance still egresses from %s", kept)
	}
	move("MoveEgressAddress again (no move)")

	sl := e.bound.Secondary
	if sl == nil {
		t.Fatal("a provider that reserves addresses must list them (SecondaryLister)")
	}
	var own *provider.Secondary
	for _, s := range e.mustListSecondary(sl) {
		if s.Instance == "" && s.InstanceID == "" && s.Marks.UID == first.UID {
			own = &s
		}
	}
	if own == nil || !own.InstanceGone || !own.Marks.Managed || own.Marks.Installation != e.installation {
		t.Fatalf("the reserved address as a secondary resource of the Proxy: %+v", own)
	}
	e.mustDelete(one.ID)
	e.mustDelete(two.ID)
	e.waitGone(one.ID)
	e.waitGone(two.ID)
	if !e.eventually("DeleteSecondary of the address once no instance holds it", func() (bool, string) {
		err := e.deleteSecondary(e.ctx, sl, own.ID)
		if err != nil && !errors.Is(err, provider.ErrTransient) {
			t.Fatalf("DeleteSecondary(%q): %v", own.ID, err)
		}
		return err == nil, errText(err)
	}) {
		return
	}
	for _, s := range e.mustListSecondary(sl) {
		if s.ID == own.ID {
			t.Errorf("the address %s is still listed after DeleteSecondary", own.ID)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
