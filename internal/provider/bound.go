package provider

import "time"

// CallBound is the longest any Provider call may hold its caller (a
// reconcile worker, a collector pass) while the backend answers, however
// slow the work behind it is. A step that may take longer (an image
// download, a clone task, a boot wait) continues in the provider, keyed by
// instance name (see internal/provider/inflight), while Create and Get
// report StateProvisioning with a Progress detail.
//
// 10 seconds: long enough for the few round trips a call makes to a remote
// backend (a lookup, a define, a task submission over SSH or HTTPS, each
// typically well under a second) with room for a slow link; short enough
// that with the reconciler's default 8 workers a fleet whose backend is
// slow still gets every Proxy looked at within seconds, not minutes. It is
// also the health loop's default --health-timeout, so a backend that cannot
// answer one call within it is reported unhealthy anyway. A hung backend is
// still the caller's ctx to end (--provider-call-timeout); CallBound is
// what a provider promises while the backend does answer.
const CallBound = 10 * time.Second
