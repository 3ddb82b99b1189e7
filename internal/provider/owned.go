package provider

import "context"

// OwnerLister is implemented by providers that can list one Proxy's
// objects by its UID on the backend's side (a label selector), so that a
// Proxy's deletion pass reads that Proxy's few objects rather than the
// whole fleet's: with ListByTag and ListSecondary a delete wave of N
// Proxies reads O(N²) objects (docs/performance.md, make bench-fleet on the
// kubernetes provider).
//
// It is optional, like SecondaryLister: the reconciler's deletion pass uses
// it when the entry offers it, and the fleet listings (shared between
// concurrent passes) otherwise. The garbage collector never uses it: what
// it looks for carries no UID, or one nobody knows any more.
//
// Both methods read the backend as it is when they are called (no cache
// that may lag behind): the pass relies on seeing every object made before
// it saw its Proxy being deleted.
type OwnerLister interface {
	// ListOwnedInstances returns what ListByTag would, restricted to the
	// instances whose UID mark is uid.
	ListOwnedInstances(ctx context.Context, uid string) ([]Instance, error)
	// ListOwnedSecondaries returns what ListSecondary would, restricted to
	// the secondary resources whose UID mark is uid, except that
	// InstanceGone may be left false (could not tell): the deletion pass
	// does not read it. A provider that is an OwnerLister and keeps
	// secondary resources is a SecondaryLister too (DeleteSecondary
	// removes what this returns).
	ListOwnedSecondaries(ctx context.Context, uid string) ([]Secondary, error)
}

// The OwnerLister's calls, as used in errors and log lines.
const (
	OpListOwnedInstances   = "list_owned_instances"
	OpListOwnedSecondaries = "list_owned_secondaries"
)
