package provider

// InstanceWatcher is implemented by providers that see a change of one of
// their instances as it happens (a listener that stopped, a Pod deleted, a
// domain shut down), where the reconciler would otherwise learn it at its
// next read: the running resync for an instance that serves, minutes away.
// The reconciler reads the instance's Proxy at once instead; a group's
// endpoint then moves within that pass.
//
// It is optional and apart from Provider, as UsersUpdater is. A change
// the provider misses costs only time: the polls still find it.
type InstanceWatcher interface {
	// WatchInstances registers changed, which the provider calls with an
	// instance's ID each time it sees that instance change by itself; the
	// changes of its own calls, whose caller knows, need not be told
	// (telling them costs one pass). changed never blocks. The registry
	// calls it once, before any other call.
	WatchInstances(changed func(id string))
}
