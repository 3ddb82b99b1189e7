package controller

import (
	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// Events tell a user what the Proxy's status cannot: a failure (the status
// keeps only the latest condition; an event stays for the API server's
// event TTL), an instance lost behind the operator's back, instances
// abandoned by a forced release. The normal life of a Proxy (created,
// provisioning, running, replaced, deleting, deleted) is in its status and
// in the Proxy's own existence, and records no event: at a fleet's scale
// such events were half of the operator's API writes (docs/performance.md).
//
// Repeats are aggregated by client-go's events broadcaster: an event of
// the same type, reason and action on the same Proxy within 6 minutes of
// the last becomes a series (one more write for the second, then the
// count is patched when the series ends), which is the dedupe Karpenter
// adds on top of the older core/v1 recorder.

// transitionEvent says which event type, if any, a change of the Ready
// condition to (ready, reason) records: a warning for a failure, nothing
// for the normal life of a Proxy.
func transitionEvent(ready bool, reason string) (typ string, emit bool) {
	if ready {
		return "", false // Running, Replacing: the status says it
	}
	switch reason {
	case egressv1.ReasonProvisioning, egressv1.ReasonDeleting:
		return "", false
	case egressv1.ReasonInstanceLost:
		// observe records every loss itself, also the ones that are no
		// transition (lost again before running) or leave Ready True.
		return "", false
	}
	return corev1.EventTypeWarning, true
}

func (r *ProxyReconciler) event(px *egressv1.Proxy, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(px, nil, typ, reason, action, note, args...)
	}
}
