package provider

import (
	"context"
	"time"
)

// SecondaryLister is implemented by providers that make backend objects
// next to an instance (a ConfigMap and a Service beside a Pod, an overlay
// volume and a seed ISO beside a domain, a firewall rule beside a VM), so
// that the garbage collector can remove those whose instance is gone: a
// crash between two steps of Create, or an instance destroyed by hand,
// leaves them behind, and Delete, which removes an instance's secondaries
// with it, is never called for an instance nobody lists.
//
// It is optional and separate from Provider on purpose: a provider without
// secondary resources (profile secondary-resources: none, or cascade, where
// the backend removes them with the instance) implements nothing, and the
// lifecycle seam stays four methods. docs/provider-contract.md gives the
// rules.
type SecondaryLister interface {
	// ListSecondary returns every secondary resource carrying the managed
	// mark and this installation's identity, whether its instance exists or
	// not, each with its owner (the UID mark and the instance name) and
	// InstanceGone set only when the provider read the backend and found
	// that instance absent. A failed part fails the whole listing, or is
	// left out: the collector deletes only what it saw.
	ListSecondary(ctx context.Context) ([]Secondary, error)
	// DeleteSecondary removes the secondary resource by the ID
	// ListSecondary returned. Something already gone, or no longer ours,
	// counts as deleted and succeeds; a malformed ID is ErrPermanent.
	DeleteSecondary(ctx context.Context, id string) error
}

// Secondary is one secondary resource as ListSecondary reports it.
type Secondary struct {
	// ID is the provider's own key, opaque to the collector: what
	// DeleteSecondary accepts. It must differ from every other secondary's
	// and should name the exact object listed (an object recreated under
	// the same name gets a new ID where the backend allows), so that a
	// deletion never reaches what was not judged.
	ID string
	// Kind is a short lowercase word for what it is ("configmap",
	// "service", "volume", "seed-iso", "firewall-rule"): the collector's
	// metrics label and log value. Keep the set small and fixed per
	// provider.
	Kind string
	// Marks are the resource's marks as read back from the backend: the
	// managed mark, the owning Proxy's UID (which may be empty, as on an
	// instance adopted before its UID was written) and the installation.
	Marks Marks
	// Instance is the name of the instance the resource belongs to
	// (InstanceName's result), which the collector compares with the
	// instance names Proxies record.
	Instance string
	// InstanceID, when the provider can tell, is the ID that instance has
	// or had, in the form ListByTag returns; the collector compares it with
	// the IDs Proxies record.
	InstanceID string
	// InstanceGone is true only when the provider read the backend and the
	// instance named Instance is not there. false means it exists, or that
	// the provider could not tell: the collector never touches the
	// resource then.
	InstanceGone bool
	// CreatedAt is when the backend made the resource; the zero time means
	// "age unknown", and the collector then ages it from first sight.
	CreatedAt time.Time
}
