package provider

import "context"

// GroupRef names a ProxyGroup: the group an egress address belongs to
// (EgressAddress.Group), the group an instance is a member of
// (CreateRequest.Group), the group a front is for (GroupFront).
type GroupRef struct {
	Namespace, Name, UID string
}

// GroupFronter is implemented by providers that put one endpoint of the
// backend's own in front of a ProxyGroup's members (kubernetes: a Service
// over the member Pods, with a PodDisruptionBudget), so that clients keep
// one address while members come and go and no single member holds it.
// The group's controller calls FrontGroup on every pass while the group
// lives and RemoveGroupFront once it is deleted; the provider selects the
// member instances by CreateRequest.Group, which it marks them with.
//
// It is optional and apart from Provider, as EgressAddressMover is: a
// provider without it gives a group the endpoint of the member that holds
// it (or a pool address through VRRP, or a moved egress address).
type GroupFronter interface {
	// FrontGroup makes the group's front, or brings an existing one to
	// f (idempotent: a front as asked costs its reads), and returns its
	// endpoint (host:port). The front's resources carry the managed mark,
	// the installation and the group's UID as their UID mark, and are
	// listed by ListSecondary with no instance, so that the collector
	// removes a front whose group is gone.
	FrontGroup(ctx context.Context, f GroupFront) (string, error)
	// RemoveGroupFront deletes the group's front. One already gone, or
	// one under the same name that is another group's, counts as removed.
	RemoveGroupFront(ctx context.Context, g GroupRef) error
}

// GroupFront is what a group's front is made from.
type GroupFront struct {
	Group GroupRef
	// Port is the members' proxy port (spec.port of the template): the
	// front listens on it and forwards to it.
	Port int32
	// Members is spec.members: a front that bounds voluntary disruptions
	// (a PodDisruptionBudget) lets one member at a time go.
	Members int32
}

// The GroupFronter's calls, as used in errors and log lines.
const (
	OpFrontGroup       = "front_group"
	OpRemoveGroupFront = "remove_group_front"
)
