package providertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// SecondaryPlanter is the Backend extension a provider that is a
// provider.SecondaryLister must give the suite: it makes a secondary
// resource outside the provider, as a crash between the provider's steps
// leaves it (kubernetes: a ConfigMap with the marks and no Pod; libvirt: an
// overlay volume without its domain).
type SecondaryPlanter interface {
	// PlantSecondary makes a secondary resource of the instance named
	// instance, carrying marks, whether that instance exists or not. When
	// the provider's Create already made one for that instance, the backend
	// may leave it as it is.
	PlantSecondary(t *testing.T, instance string, marks provider.Marks)
}

func (e *env) listSecondary(ctx context.Context, sl provider.SecondaryLister) (list []provider.Secondary, err error) {
	ctx, cancel := e.callCtx(ctx)
	defer cancel()
	err = errPanicked
	guard(e.t, "ListSecondary", func() { list, err = sl.ListSecondary(ctx) })
	return list, err
}

func (e *env) deleteSecondary(ctx context.Context, sl provider.SecondaryLister, id string) (err error) {
	ctx, cancel := e.callCtx(ctx)
	defer cancel()
	err = errPanicked
	guard(e.t, fmt.Sprintf("DeleteSecondary(%q)", id), func() { err = sl.DeleteSecondary(ctx, id) })
	return err
}

func (e *env) mustListSecondary(sl provider.SecondaryLister) []provider.Secondary {
	e.t.Helper()
	list, err := e.listSecondary(e.ctx, sl)
	if err != nil {
		e.t.Fatalf("ListSecondary: %v", err)
	}
	return list
}

// secondariesOf returns the listed secondary resources of the instance
// named instance.
func secondariesOf(list []provider.Secondary, instance string) []provider.Secondary {
	var out []provider.Secondary
	for _, s := range list {
		if s.Instance == instance {
			out = append(out, s)
		}
	}
	return out
}

// Rule: a provider that makes secondary resources beside its instances
// (a provider.SecondaryLister) lists every one of this installation's with
// its owner (UID mark and instance name), its marks and an age, and says
// InstanceGone exactly when its instance is not on the backend, so that the
// garbage collector removes, through DeleteSecondary, one without its
// instance after the grace and never touches one whose instance exists.
// DeleteSecondary removes exactly what it names, and succeeds on what is
// gone; Delete of an instance takes its secondaries with it. Providers
// without secondary resources skip this case.
func testSecondaryWithoutInstanceIsCollectable(t *testing.T, h Harness) {
	start := time.Now()
	e := newEnv(t, h)
	sl := e.bound.Secondary
	if sl == nil {
		t.Skip("the provider keeps no secondary resources (profile secondary-resources: none or cascade): it is no provider.SecondaryLister")
	}
	planter, ok := e.b.(SecondaryPlanter)
	if !ok {
		t.Fatal("the provider is a provider.SecondaryLister, but its harness backend is no providertest.SecondaryPlanter")
	}
	ours := func(uid string) provider.Marks {
		return provider.Marks{Managed: true, UID: uid, Installation: e.installation}
	}
	live := e.request("secondary-live")
	inst := e.mustCreate(live)
	planter.PlantSecondary(t, live.Name, ours(live.UID))
	orphan := e.request("secondary-orphan") // a crash before its instance was made
	planter.PlantSecondary(t, orphan.Name, ours(orphan.UID))
	foreign := e.request("secondary-foreign")
	planter.PlantSecondary(t, foreign.Name, provider.Marks{Managed: true, UID: foreign.UID, Installation: "other-" + randHex(t)})

	list := e.mustListSecondary(sl)
	end := time.Now()
	skew := h.clockSkew()
	seen := map[string]bool{}
	for _, s := range list {
		switch {
		case s.ID == "" || s.Kind == "":
			t.Errorf("ListSecondary gives %+v: every secondary needs an ID to delete it by and a Kind", s)
		case seen[s.ID]:
			t.Errorf("ListSecondary gives the ID %q twice", s.ID)
		case !s.Marks.Managed || s.Marks.Installation != e.installation:
			t.Errorf("ListSecondary gives %+v, which is not this installation's (marks %+v)", s, s.Marks)
		case !s.CreatedAt.IsZero() && (s.CreatedAt.Before(start.Add(-skew)) || s.CreatedAt.After(end.Add(skew))):
			t.Errorf("ListSecondary gives %q CreatedAt %v, want between %v and %v (±%v), or zero for unknown", s.ID, s.CreatedAt, start, end, skew)
		}
		seen[s.ID] = true
	}
	if got := secondariesOf(list, foreign.Name); len(got) != 0 {
		t.Errorf("ListSecondary lists another installation's secondary resources: %+v", got)
	}
	orphans := secondariesOf(list, orphan.Name)
	if len(orphans) == 0 {
		t.Fatalf("ListSecondary does not list the secondary resource of %q, whose instance was never made: %+v", orphan.Name, list)
	}
	for _, s := range orphans {
		if !s.InstanceGone || s.Marks.UID != orphan.UID {
			t.Errorf("the secondary %q of the missing instance %q: InstanceGone %t, UID %q; want true and %q", s.ID, orphan.Name, s.InstanceGone, s.Marks.UID, orphan.UID)
		}
	}
	lives := secondariesOf(list, live.Name)
	if len(lives) == 0 {
		t.Fatalf("ListSecondary does not list the secondary resources of the existing instance %q: %+v", live.Name, list)
	}
	for _, s := range lives {
		if s.InstanceGone || s.Marks.UID != live.UID || (s.InstanceID != "" && s.InstanceID != inst.ID) {
			t.Errorf("the secondary %q of the existing instance %q: InstanceGone %t, UID %q, InstanceID %q; want false, %q and %q (or empty)",
				s.ID, inst.ID, s.InstanceGone, s.Marks.UID, s.InstanceID, live.UID, inst.ID)
		}
	}

	// What the collector does past the grace: delete the orphans through
	// the provider, and nothing else.
	for _, s := range orphans {
		if err := e.deleteSecondary(e.ctx, sl, s.ID); err != nil {
			t.Errorf("DeleteSecondary(%q): %v", s.ID, err)
		}
	}
	e.eventually("the deleted secondary resources no longer listed", func() (bool, string) {
		l, err := e.listSecondary(e.ctx, sl)
		if err != nil {
			return false, err.Error()
		}
		left := secondariesOf(l, orphan.Name)
		return len(left) == 0, fmt.Sprintf("still listed: %+v", left)
	})
	for _, s := range orphans {
		if err := e.deleteSecondary(e.ctx, sl, s.ID); err != nil {
			t.Errorf("DeleteSecondary(%q) of something gone: %v, want success", s.ID, err)
		}
	}
	after := e.mustListSecondary(sl)
	for _, s := range lives {
		if !containsSecondary(after, s.ID) {
			t.Errorf("the secondary %q of the existing instance %q is gone after the orphans were deleted", s.ID, inst.ID)
		}
	}
	if _, err := e.get(e.ctx, inst.ID); err != nil {
		t.Errorf("Get(%q) of the existing instance after deleting the orphans: %v", inst.ID, err)
	}

	for _, id := range garbageIDs(inst.ID) {
		if err := e.deleteSecondary(e.ctx, sl, id); err != nil {
			expectClass(t, fmt.Sprintf("DeleteSecondary(%q)", id), err, provider.ErrPermanent, provider.ErrNotFound)
			var pe *provider.Error
			if errors.As(err, &pe) && (pe.Provider != h.Name || pe.Op != provider.OpDeleteSecondary) {
				t.Errorf("DeleteSecondary(%q) error names provider %q op %q, want %q and %q", id, pe.Provider, pe.Op, h.Name, provider.OpDeleteSecondary)
			}
		}
	}
	cancelled, cancel := context.WithCancel(e.ctx)
	cancel()
	_, err := e.listSecondary(cancelled, sl)
	expectClass(t, "ListSecondary with a cancelled ctx", err, provider.ErrTransient)
	expectClass(t, "DeleteSecondary with a cancelled ctx", e.deleteSecondary(cancelled, sl, lives[0].ID), provider.ErrTransient)

	// Delete removes an instance's secondary resources with it.
	e.mustDelete(inst.ID)
	e.waitGone(inst.ID)
	e.eventually("Delete of the instance taking its secondary resources", func() (bool, string) {
		l, err := e.listSecondary(e.ctx, sl)
		if err != nil {
			return false, err.Error()
		}
		left := secondariesOf(l, live.Name)
		return len(left) == 0, fmt.Sprintf("still listed: %+v", left)
	})
}

func containsSecondary(list []provider.Secondary, id string) bool {
	for _, s := range list {
		if s.ID == id {
			return true
		}
	}
	return false
}
