package controller

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// How Ready and the phase are decided. The passes say what they saw (an
// observation, given to report); deriveStatus alone turns it into the Ready
// condition, the phase and the address, and its table in
// proxy_status_test.go covers every reason of docs/api.md.
//
// A pass reports each finding when it makes it, not once at its end: a
// stopped instance that its start brings back within the same pass is
// still a stop, and its InstanceStopped transition records the Warning
// event that says so.

// finding is what a pass saw.
type finding int

const (
	// noProvider: spec.provider names no entry of the providers config.
	noProvider finding = iota + 1
	// secretUnresolved: a Secret the Proxy names (its user-data, its
	// clientAuth users) could not be resolved (err, a *secretError).
	secretUnresolved
	// failure: a provider call failed (err, classified at its source).
	failure
	// instanceLost: the current instance (id) is gone from the backend.
	instanceLost
	// supersededBacklog: backlog superseded instances wait to be deleted
	// before the instance next is created.
	supersededBacklog
	// instanceSeen: the current instance as its provider reports it (inst).
	instanceSeen
	// instanceStarted: what the start of a stopped instance returned (inst)
	// while it does not serve yet; interrupted says the stop was a create a
	// restart interrupted.
	instanceStarted
	// deletingInstance: the deletion pass deletes the instance id.
	deletingInstance
	// addressReleasing: backlog instances that held the Proxy's pool
	// address are deleted before the instance next is created on it.
	addressReleasing
	// addressPending: the Proxy's pool address is not bound yet (err says
	// what is awaited), or, deleting, not released yet.
	addressPending
)

// observation is one finding of a pass, with what of the Proxy bears on
// how it shows.
type observation struct {
	seen        finding
	err         error
	id          string
	inst        provider.Instance
	interrupted bool
	backlog     int
	next        string
	// fresh: inst became current in this pass (created, adopted, or the
	// retiring one taken back), so the Ready condition the pass started
	// from describes another instance.
	fresh bool

	// The Proxy as the pass has left it so far (set by of).
	rec          record // the replacement state: whether, and which, an instance serves
	endpoint     string
	port         int32
	providerName string
	deleting     bool
	// readyReason is the Ready condition's reason before this report.
	readyReason string
	// now is the reconciler's clock.
	now time.Time
}

// of completes o with what px says.
func (o observation) of(px *egressv1.Proxy) observation {
	o.rec = recordOf(&px.Status)
	o.endpoint = px.Status.Endpoint
	o.port = specPort(px.Spec)
	o.providerName = px.Spec.Provider
	o.deleting = !px.DeletionTimestamp.IsZero()
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c != nil {
		o.readyReason = c.Reason
	}
	return o
}

// replacing says whether a retiring instance serves at status.endpoint.
func (o observation) replacing() bool { return o.rec.retiring != "" && o.rec.serving }

// address says what happens to status.ip and status.endpoint.
type address int

const (
	keepAddress address = iota
	clearAddress
	setAddress
)

// shown is what an observation shows in the status.
type shown struct {
	// keep: Ready, the phase and the address stay as they are.
	keep bool

	ready   metav1.ConditionStatus
	reason  string
	message string
	// progress: the message changes as the instance progresses, so it is
	// written at most once per ProgressEvery (proxy_progress.go).
	progress bool
	// phase is the new phase; "" keeps the current one.
	phase egressv1.ProxyPhase

	address      address
	ip, endpoint string // with setAddress

	// warn is the reason of a Warning event, with its note, that no
	// transition of Ready records: a failure of the replacement while the
	// retiring instance keeps Ready True.
	warn, warnNote string
}

// deriveStatus is the one place that decides Ready and the phase. It is
// pure; report applies what it returns.
func deriveStatus(o observation) shown {
	if o.deleting {
		return deriveDeleting(o)
	}
	switch o.seen {
	case noProvider:
		// Re-evaluated when the providers config changes.
		return shown{ready: metav1.ConditionFalse, reason: egressv1.ReasonProviderNotFound,
			message: fmt.Sprintf("spec.provider %q names no entry in the operator's providers config", o.providerName),
			phase:   egressv1.PhasePending}
	case secretUnresolved:
		s := shown{ready: metav1.ConditionFalse, reason: egressv1.ReasonBackendError, message: o.err.Error()}
		if se := (*secretError)(nil); errors.As(o.err, &se) && se.reason != "" {
			s.reason = se.reason
		}
		if o.rec.current == "" {
			s.phase = egressv1.PhasePending
		}
		return s
	case failure:
		return deriveFailure(o)
	case instanceLost:
		return o.notServing(egressv1.ReasonInstanceLost, fmt.Sprintf("instance %s is gone from the backend; creating it again", o.id), "")
	case supersededBacklog:
		return o.notServing(egressv1.ReasonProvisioning,
			fmt.Sprintf("waiting for %d superseded instances to be deleted before creating %s", o.backlog, o.next), "")
	case addressReleasing:
		return o.notServing(egressv1.ReasonProvisioning,
			fmt.Sprintf("deleting %d instance(s) on the Proxy's pool address before creating %s on it: the address is never on two instances", o.backlog, o.next), "")
	case addressPending:
		return o.notServing(egressv1.ReasonProvisioning, o.err.Error(), o.unlessServing(egressv1.PhasePending))
	case instanceStarted:
		if !o.interrupted && o.inst.Progress == "" {
			return shown{keep: true} // InstanceStopped until the start completes
		}
		return o.provisioning("resuming")
	case instanceSeen:
		inst := o.inst
		switch {
		case serves(inst):
			host := inst.Host
			if host == "" {
				host = inst.IP
			}
			endpoint := net.JoinHostPort(host, strconv.Itoa(int(o.port)))
			return shown{ready: metav1.ConditionTrue, reason: egressv1.ReasonRunning, message: "serving at " + endpoint,
				phase: egressv1.PhaseRunning, address: setAddress, ip: inst.IP, endpoint: endpoint}
		case inst.State == provider.StateRunning && inst.IP != "" && inst.Serving == provider.ServingNotAnswering:
			return o.notAnswering()
		case inst.State == provider.StateStopped && inst.Progress != "":
			// An unfinished create that a restart interrupted: no stop
			// to warn about; its start shows as resuming.
			return shown{keep: true}
		case inst.State == provider.StateStopped:
			return o.notServing(egressv1.ReasonInstanceStopped, fmt.Sprintf("instance %s stopped; starting it again", inst.ID), "")
		case inst.State == provider.StateTerminated:
			return o.notServing(egressv1.ReasonInstanceStopped, fmt.Sprintf("instance %s terminated; deleting it to create it anew", inst.ID), "")
		}
		return o.provisioning(describeState(inst.State))
	}
	return shown{keep: true} // no finding: nothing to show
}

// notAnswering shows a running instance whose proxy does not answer:
// its guest's setup failed (a latch: nothing retries it), or it answered
// before and stopped (autohealed after the entry's replaceUnhealthyAfter),
// or it has not answered yet.
func (o observation) notAnswering() shown {
	inst := o.inst
	detail := ""
	if inst.ServingDetail != "" {
		detail = ": " + inst.ServingDetail
	}
	switch {
	case inst.SetupError != "":
		return o.notServing(egressv1.ReasonCloudInitFailed,
			fmt.Sprintf("instance %s runs at %s, its cloud-init failed and its proxy does not answer: %s; it is not replaced until the Proxy's spec or user-data changes",
				inst.ID, inst.IP, inst.SetupError), o.unlessServing(egressv1.PhaseFailed))
	case o.stoppedAnswering():
		return o.notServing(egressv1.ReasonProxyNotAnswering,
			fmt.Sprintf("instance %s at %s stopped answering%s", inst.ID, inst.IP, detail), "")
	}
	waited := ""
	if !inst.CreatedAt.IsZero() && !o.now.IsZero() && o.now.After(inst.CreatedAt) {
		waited = fmt.Sprintf(" (%s after the instance was created)", o.now.Sub(inst.CreatedAt).Round(time.Second))
	}
	return o.notServing(egressv1.ReasonProxyStarting,
		fmt.Sprintf("instance %s runs at %s; its proxy does not answer yet%s%s", inst.ID, inst.IP, detail, waited),
		o.unlessServing(egressv1.PhaseProvisioning))
}

// stoppedAnswering: the Proxy showed this instance serving, or already
// showed it stopped. Only then is it down rather than starting, whatever
// the signal says of its last answer: a guest answers while cloud-init
// runs, and cloud-init's last step restarts Squid, so a report may catch
// it down with cloud-init done and an answer of minutes ago, which
// would autoheal a replacement that never served (the libvirt end-to-end
// test's autoheals 2). A reason the condition carries over from the
// instance this one replaced is not this one's either: an autohealed
// Proxy's replacement that has not answered yet is starting, not down
// since its predecessor went down.
func (o observation) stoppedAnswering() bool {
	if o.fresh || o.rec.current != o.inst.ID {
		return false
	}
	return o.readyReason == egressv1.ReasonRunning || o.readyReason == egressv1.ReasonProxyNotAnswering
}

// deriveFailure shows a failed provider call by its class.
func deriveFailure(o observation) shown {
	msg := o.err.Error()
	switch provider.ClassOf(o.err) {
	case provider.ErrPermanent:
		s := o.notServing(egressv1.ReasonPermanentFailure, msg, o.unlessServing(egressv1.PhaseFailed))
		s.warnIfReplacing(o, egressv1.ReasonPermanentFailure, msg)
		return s
	case provider.ErrQuotaExceeded:
		s := o.notServing(egressv1.ReasonQuotaExceeded, msg, o.unlessServing(egressv1.PhaseProvisioning))
		s.warnIfReplacing(o, egressv1.ReasonQuotaExceeded, msg)
		return s
	default:
		if o.rec.serving {
			// A serving Proxy whose backend hiccups still serves; keep
			// Ready as it is and let the next read tell.
			return shown{keep: true}
		}
		return o.notServing(egressv1.ReasonBackendError, msg, egressv1.PhaseProvisioning)
	}
}

// deriveDeleting shows the deletion pass: the phase is Deleting, Ready is
// False with what the deletion does or waits for.
func deriveDeleting(o observation) shown {
	s := shown{ready: metav1.ConditionFalse, phase: egressv1.PhaseDeleting}
	switch o.seen {
	case noProvider:
		s.reason = egressv1.ReasonProviderNotFound
		s.message = fmt.Sprintf("cannot delete instance %s: spec.provider %q names no entry in the providers config; add it back, or set the annotation %s=true to abandon the instance",
			o.id, o.providerName, egressv1.AnnotationForceRelease)
	case deletingInstance:
		s.reason, s.message = egressv1.ReasonDeleting, "deleting instance "+o.id
	case addressPending:
		s.reason, s.message = egressv1.ReasonDeleting, o.err.Error()
	case failure:
		s.message = "deleting the instance: " + o.err.Error()
		switch provider.ClassOf(o.err) {
		case provider.ErrPermanent:
			s.reason = egressv1.ReasonPermanentFailure
		case provider.ErrQuotaExceeded:
			s.reason = egressv1.ReasonQuotaExceeded
		default:
			s.reason = egressv1.ReasonBackendError
		}
	default:
		return shown{keep: true}
	}
	return s
}

// notServing shows a finding that leaves the current instance not serving.
// While a retiring instance serves, the Proxy is Ready (Replacing) and the
// message says what holds the replacement up; otherwise nothing serves: the
// address is cleared, Ready is False with reason, and phase ("" to keep it)
// is set.
func (o observation) notServing(reason, msg string, phase egressv1.ProxyPhase) shown {
	if o.replacing() {
		return shown{ready: metav1.ConditionTrue, reason: egressv1.ReasonReplacing, progress: true, phase: egressv1.PhaseRunning,
			message: fmt.Sprintf("serving at %s (instance %s) while it is replaced: %s", o.endpoint, o.rec.retiring, msg)}
	}
	return shown{ready: metav1.ConditionFalse, reason: reason, message: msg, progress: true, phase: phase, address: clearAddress}
}

// provisioning shows an instance that does not serve yet, with what its
// provider says it is doing.
func (o observation) provisioning(doing string) shown {
	note := fmt.Sprintf("instance %s is %s", o.inst.ID, doing)
	if o.inst.Progress != "" {
		note += ": " + o.inst.Progress
	}
	return o.notServing(egressv1.ReasonProvisioning, note, egressv1.PhaseProvisioning)
}

// unlessServing is phase when nothing serves, else "" (the phase stays).
func (o observation) unlessServing(phase egressv1.ProxyPhase) egressv1.ProxyPhase {
	if o.rec.serving {
		return ""
	}
	return phase
}

func (s *shown) warnIfReplacing(o observation, reason, note string) {
	if o.replacing() {
		// Ready stays True (Replacing), so no transition records it.
		s.warn, s.warnNote = reason, note
	}
}

// serves says whether an instance serves: it runs, has an address, and its
// provider's serving signal does not say its proxy fails to answer.
func serves(inst provider.Instance) bool {
	return inst.State == provider.StateRunning && inst.IP != "" && inst.Serving != provider.ServingNotAnswering
}

func describeState(s provider.State) string {
	if s == "" || s == provider.StateRunning {
		return "starting (no address yet)"
	}
	return string(s)
}

// secretError says why a Secret the Proxy names could not be resolved:
// reason is the user's to fix (a Secret or key that does not exist, a file
// that cannot be used); empty when reading the Secret failed.
type secretError struct {
	reason string
	msg    string
}

func (e *secretError) Error() string { return e.msg }

// report shows what a pass saw in px.Status (deriveStatus), and records a
// Warning event when Ready turns to a failure (proxy_events.go) or when a
// failure leaves it True.
func (r *ProxyReconciler) report(px *egressv1.Proxy, o observation) {
	o = o.of(px)
	o.now = r.progress.clock()
	s := deriveStatus(o)
	if s.keep {
		return
	}
	if s.warn != "" {
		r.event(px, corev1.EventTypeWarning, s.warn, "Reconcile", "%s", s.warnNote)
	}
	if s.phase != "" {
		px.Status.Phase = s.phase
	}
	switch s.address {
	case clearAddress:
		px.Status.Endpoint, px.Status.IP = "", ""
		px.Status.HoldsGroupAddress = nil
	case setAddress:
		px.Status.IP, px.Status.Endpoint = s.ip, s.endpoint
		applyEgress(&px.Status, o.inst, px.Generation)
		px.Status.HoldsGroupAddress = heldGroupAddress(px, o.inst)
	}
	msg := s.message
	if s.progress {
		msg = r.progress.message(px, s.ready, s.reason, msg, r.ProgressEvery)
	}
	r.setReady(px, s.ready, s.reason, msg)
}

// progressOf says, for kstatus, what Ready's reason means: the operator
// is working on it (Reconciling), only a person can help (Stalled), or
// neither (Running). Every reason of docs/api.md is in one of the lists;
// TestKstatusCoversEveryReason checks.
func progressOf(ready metav1.ConditionStatus, reason string) (reconciling, stalled bool) {
	switch reason {
	case egressv1.ReasonRunning:
		return false, false
	case egressv1.ReasonPermanentFailure, egressv1.ReasonProviderNotFound, egressv1.ReasonCloudInitSecretNotFound,
		egressv1.ReasonClientAuthSecretNotFound, egressv1.ReasonClientAuthInvalid, egressv1.ReasonCloudInitFailed:
		return false, ready != metav1.ConditionTrue
	case egressv1.ReasonReplacing, egressv1.ReasonProvisioning, egressv1.ReasonProxyStarting, egressv1.ReasonProxyNotAnswering,
		egressv1.ReasonInstanceStopped, egressv1.ReasonInstanceLost, egressv1.ReasonQuotaExceeded, egressv1.ReasonBackendError,
		egressv1.ReasonDeleting:
		return true, false
	}
	return ready != metav1.ConditionTrue, false
}

// setProgress writes Reconciling and Stalled from Ready's reason: True
// with Ready's reason and message, removed when False (kstatus reads an
// absent abnormal-true condition as False).
func setProgress(px *egressv1.Proxy, ready metav1.ConditionStatus, reason, msg string) {
	reconciling, stalled := progressOf(ready, reason)
	for _, c := range []struct {
		typ string
		on  bool
	}{{egressv1.ConditionReconciling, reconciling}, {egressv1.ConditionStalled, stalled}} {
		if !c.on {
			meta.RemoveStatusCondition(&px.Status.Conditions, c.typ)
			continue
		}
		meta.SetStatusCondition(&px.Status.Conditions, metav1.Condition{
			Type: c.typ, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: px.Generation,
		})
	}
}

// setReady sets the Ready condition and records a Warning event when it
// turns to a failure (proxy_events.go): events follow transitions, not
// reconciles, and only those the status alone would lose.
func (r *ProxyReconciler) setReady(px *egressv1.Proxy, status metav1.ConditionStatus, reason, msg string) {
	// Copied, not pointed to: SetStatusCondition updates the slice in place.
	var prev metav1.Condition
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c != nil {
		prev = *c
	}
	meta.SetStatusCondition(&px.Status.Conditions, metav1.Condition{
		Type: egressv1.ConditionReady, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: px.Generation,
	})
	setProgress(px, status, reason, msg)
	if prev.Reason == reason && prev.Status == status {
		return
	}
	if typ, emit := transitionEvent(status == metav1.ConditionTrue, reason); emit {
		r.event(px, typ, reason, "Reconcile", "%s", msg)
	}
}
