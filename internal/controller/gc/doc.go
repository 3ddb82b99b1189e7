// Package gc is the garbage collector of backend instances and of the
// secondary resources providers make beside them: it deletes what no Proxy
// accounts for, so that nothing the operator made leaks, and it never
// touches anything a Proxy still uses or another installation made.
//
// # One pass
//
// A pass runs per configured provider, each in its own goroutine, so a
// provider whose listing fails or hangs delays and stops no other. A pass
//
//  1. lists the backend (ListByTag: this installation's marked instances,
//     read for ID, UID and CreatedAt only; then, for a provider with
//     secondary resources, ListSecondary), and only then
//  2. reads every Proxy from the manager's cache, so that the cluster view
//     is the fresher of the two: an instance listed in step 1 was created
//     after its Proxy entered the cache (the reconciler works from the same
//     cache), so its Proxy is seen in step 2.
//
// A failed ListByTag ends the pass on that provider; a failed
// ListSecondary only keeps the secondary resources from being collected
// that pass.
//
// An instance whose ID any Proxy's status records
// (ProxyStatus.RecordedProviderIDs: status.providerID,
// status.retiringProviderID and status.supersededProviderIDs, which the
// reconciler deletes itself) is never collected, whatever its UID mark says:
// the contract adopts an instance whose UID mark is empty (and the provider
// fills the mark in), and the status is the record of what a Proxy uses.
// Any other instance is collected, once it is older than the grace period,
// when it is
//
//   - an orphan: its UID is on no Proxy, or its UID mark is empty (the
//     Proxy is gone, or a crash between Create and the status write left it
//     unrecorded), or
//   - a duplicate: its UID is a Proxy's whose status.providerID is set and
//     names another instance (no Proxy records this one, by the rule above:
//     not as its providerID, nor as the instance a make-before-break
//     replacement retires, status.retiringProviderID). This
//     holds whatever provider lists it: spec.provider is immutable, so an
//     instance of the Proxy listed by another provider entry is a stray,
//     unless it is the recorded one (two entries may share one backend and
//     then both list it).
//
// It is kept, whatever its age, when its Proxy's status.providerID is empty
// (a Create is in flight and its result is not recorded yet), or when the
// Proxy's status.observedGeneration is behind metadata.generation: a spec
// change the reconciler has not finished a pass for, and that pass may be
// creating the replacement right now.
//
// # Secondary resources
//
// A provider that makes objects beside its instances (the kubernetes
// provider's ConfigMap and Service, a VM provider's volumes, seed ISOs and
// firewall rules) lists them through provider.SecondaryLister, the
// registry entry's Secondary. A crash between two steps of a Create, or an
// instance removed by hand, leaves them where no Delete will come. Each is
// collected, once older than the grace, when
//
//   - the provider says its instance is gone (Secondary.InstanceGone: it
//     read the backend and found no instance of that name; a provider
//     that cannot tell reports false, and the collector keeps). Only the
//     provider knows whether its view was complete and how a resource names
//     its instance, so the collector never infers absence from ListByTag;
//   - no Proxy records its instance: neither its name (status.instanceName,
//     status.retiringInstanceName: a lost instance is created again under
//     its name and uses what is left of it) nor its ID
//     (ProxyStatus.RecordedProviderIDs);
//   - and its owner (the UID mark) is on no Proxy, or the mark is empty
//     (ReasonOrphan), or is a Proxy whose status.providerID is set and
//     whose observedGeneration is current (ReasonLeftover: a replaced
//     instance whose Delete stopped half-way).
//
// It is kept, whatever its age, while its owner's create is in flight
// (status.providerID empty) or its spec change not yet acted on
// (observedGeneration behind generation): that create may be about to make
// or use its instance. A resource whose marks say it is not managed, or
// name no installation, or that has no ID, is a provider bug and is kept.
// Age, first sight, dry run and once-per-resource logging work as for
// instances, in a memory of their own (secondary and instance IDs are the
// provider's and may look alike).
//
// # Age
//
// Age is the collector's clock minus the instance's CreatedAt. A zero
// CreatedAt means "age unknown" (the contract allows it): such an instance
// is then aged from the first pass of this process that listed it. The
// first-seen times live in memory, keyed by provider, ID and UID, and are
// forgotten when a pass no longer lists the instance; a restart or a new
// leader starts them over. Either way the measured age is never more than
// the true age, so the error is a later collection, never an earlier one.
//
// # Defaults
//
// DefaultInterval is 2 minutes (Karpenter's steady cadence): a pass costs
// one ListByTag per provider and a read of the in-memory cache, and a leaked
// instance lives at most Grace + Interval.
//
// DefaultGrace is 20 minutes, longer than the reconciler's 15-minute
// provider call timeout on purpose. The Proxy and its UID exist before
// Create is called, so an orphan needs grace only against cache lag; but a
// Proxy records an instance's ID only when Create returns, and a blocking VM
// Create may take the whole call timeout. When an instance was lost or
// terminated and is being created again, the status still names the old ID
// during that Create: the new instance looks exactly like a duplicate until
// then. The same holds for an instance whose UID mark is written after
// creation: it looks like an orphan. The grace must therefore exceed the
// call timeout (CheckGrace says so at start); the 5 minutes on top cover the
// status write, cache propagation and clock skew between the backend that
// stamps CreatedAt and the operator. 10 minutes would collect a VM still
// being created. A longer grace only lets a leaked instance live longer.
//
// # Dry run, logs, metrics
//
// With DryRun the collector logs "would delete" and counts, and deletes
// nothing. Every deletion is logged at Info with provider, id, uid, reason,
// age and ageSince (created or firstSeen), and a secondary resource's with
// kind and instance besides; nothing else about any of them is logged. An instance deleted (or reported in dry run) is logged and
// counted once while it stays listed: a Delete that returns early leaves it
// listed for a while, and the next passes delete it again quietly.
//
// The metrics, in controller-runtime's registry:
//
//   - egress_proxy_gc_runs_total{provider}: passes, failed ones included
//   - egress_proxy_gc_list_errors_total{provider}: failed ListByTag calls
//   - egress_proxy_gc_instances_deleted_total{provider,reason}: deletions,
//     reason orphan or duplicate
//   - egress_proxy_gc_instances_would_delete_total{provider,reason}: what a
//     dry run would have deleted (a counter of its own, so deleted_total
//     always means deleted)
//   - egress_proxy_gc_delete_errors_total{provider}: failed Deletes, retried
//     next pass
//   - egress_proxy_gc_secondary_list_errors_total{provider}: failed
//     ListSecondary calls
//   - egress_proxy_gc_secondaries_deleted_total{provider,kind,reason} and
//     egress_proxy_gc_secondaries_would_delete_total{provider,kind,reason}:
//     secondary resources deleted, or reported in dry run, by the
//     provider's kind (configmap, service, volume...) and reason (orphan,
//     leftover); metrics of their own, so the instance counters keep their
//     meaning and labels
//   - egress_proxy_gc_secondary_delete_errors_total{provider,kind}: failed
//     DeleteSecondary calls, retried next pass
//
// # Scope
//
// The collector lists only this installation's instances (the installation
// mark) and counts as owners every Proxy its reader holds: those of the
// installation's watched namespaces, of every class. The default
// installation ID differs per namespace and class (docs/operations.md), so
// another installation's instances are never listed; counting a Proxy of
// another class as an owner can then only keep an instance, never delete
// one, which is why the Proxies are not filtered by class. The watched
// namespaces do limit the view: narrowing them turns the instances of the
// Proxies in the dropped namespaces into orphans.
package gc
