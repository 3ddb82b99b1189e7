// Package gcp runs each Proxy as a Compute Engine VM, through the real Go
// SDK (cloud.google.com/go/compute/apiv1, REST) in one project.
//
// Create returns within provider.CallBound: it resolves the placement and
// renders the user-data before any call, reads the instance once, adopts
// one of ours that exists (the UID guard; a stopped one is started, a
// suspended one resumed), and otherwise runs the slow part in the
// background, keyed by instance name (internal/provider/inflight): the
// instance's firewall rule, the insert, and its operation followed to its
// end, so that an insert the API accepted and then failed
// (ZONE_RESOURCE_POOL_EXHAUSTED, QUOTA_EXCEEDED, a bad image) reaches the
// next Create or Get with its class instead of reading as NotFound.
//
// Layout:
//   - api.go: the seam (computeAPI), a ctx-first interface over exactly the
//     SDK calls the provider makes, its adapter over the SDK's REST clients,
//     per-call budgets, and the call registry that gives every request its
//     caller's ctx back (the SDK's list iterators build theirs without it).
//   - credentials.go: Application Default Credentials or a key file, re-read
//     when it changes; the transport that adds the token.
//   - config.go, errors.go (classification, once, at the source), check.go,
//     observe.go (log tiers, the wire log, the listing metric), id.go,
//     marks.go (labels; the firewall rules' description marks), state.go.
//   - create.go, get.go, delete.go, list.go (ListByTag, and the firewall
//     rules as secondary resources), firewall.go, operations.go.
//   - address.go: the egress address (spec.egressAddress): reserved or
//     the user's, named as natIP on insert, moved between a Proxy's
//     instances (MoveEgressAddress), and the reserved ones as secondary
//     resources. A ProxyGroup's address (EgressAddress.Group) is reserved
//     by its first move, marked with the group's UID, and moved between
//     its members' instances (different Proxies) by the group's controller.
//   - serving.go: the serving signal, the guest's report in the guest
//     attribute egress-proxy/report (the startup script installs its
//     reporter), read at most once per instance per report interval.
//   - fakecompute: the fake Compute API the tests run the SDK against;
//     gcptest: a token endpoint and a key file for tests of this package
//     and of the controllers.
package gcp
