package controller

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Statuses the table starts from.
var (
	nothingYet  = egressv1.ProxyStatus{}
	provisionsA = egressv1.ProxyStatus{ProviderID: "a", InstanceName: "A", Phase: egressv1.PhaseProvisioning}
	servesA     = egressv1.ProxyStatus{ProviderID: "a", InstanceName: "A", Phase: egressv1.PhaseRunning,
		IP: "10.0.0.1", Endpoint: "10.0.0.1:3128"}
	// servesAReady is servesA with its Ready condition, as a pass left it.
	servesAReady = withReady(servesA, metav1.ConditionTrue, egressv1.ReasonRunning)
	// stoppedA: A stopped answering; nothing serves.
	stoppedA = withReady(egressv1.ProxyStatus{ProviderID: "a", InstanceName: "A", Phase: egressv1.PhaseRunning},
		metav1.ConditionFalse, egressv1.ReasonProxyNotAnswering)
	// A serves while its replacement B provisions.
	replacesAWithB = egressv1.ProxyStatus{ProviderID: "b", InstanceName: "B", RetiringProviderID: "a", RetiringInstanceName: "A",
		Phase: egressv1.PhaseRunning, IP: "10.0.0.1", Endpoint: "10.0.0.1:3128"}
)

// t0 is when the table's instances were created.
var t0 = time.Date(2026, 12, 2, 20, 59, 20, 0, time.UTC)

func withReady(st egressv1.ProxyStatus, status metav1.ConditionStatus, reason string) egressv1.ProxyStatus {
	st.Conditions = []metav1.Condition{{Type: egressv1.ConditionReady, Status: status, Reason: reason, Message: "as a pass left it"}}
	return st
}

const whileReplaced = "serving at 10.0.0.1:3128 (instance a) while it is replaced: "

var (
	errTransient = provider.Errorf(provider.ErrTransient, "backend hiccup")
	errQuota     = provider.Errorf(provider.ErrQuotaExceeded, "out of addresses")
	errPermanent = provider.Errorf(provider.ErrPermanent, "no such image")
)

// statusRow is one observation and what it must show: the status the pass
// left before it (then, if set, is the replacement transition the pass ran
// on it, through record.store as the reconciler does), and the finding.
type statusRow struct {
	name     string
	status   egressv1.ProxyStatus
	then     func(record) record
	deleting bool
	o        observation
	want     shown
}

func falseFor(reason, msg string, phase egressv1.ProxyPhase) shown {
	return shown{ready: metav1.ConditionFalse, reason: reason, message: msg, progress: true, phase: phase, address: clearAddress}
}

func whileReplacing(msg string) shown {
	return shown{ready: metav1.ConditionTrue, reason: egressv1.ReasonReplacing, message: whileReplaced + msg, progress: true,
		phase: egressv1.PhaseRunning}
}

func warned(s shown, reason string, err error) shown {
	s.warn, s.warnNote = reason, err.Error()
	return s
}

func deletingShows(reason, msg string) shown {
	return shown{ready: metav1.ConditionFalse, reason: reason, message: msg, phase: egressv1.PhaseDeleting}
}

var statusTable = []statusRow{
	// The instance provisions, runs, stops, is lost.
	{name: "first instance provisioning", status: nothingYet,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateProvisioning}},
		want: falseFor(egressv1.ReasonProvisioning, "instance a is Provisioning", egressv1.PhaseProvisioning)},
	{name: "provisioning with the provider's progress", status: provisionsA,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateProvisioning, Progress: "downloading image: 12/400 MiB"}},
		want: falseFor(egressv1.ReasonProvisioning, "instance a is Provisioning: downloading image: 12/400 MiB",
			egressv1.PhaseProvisioning)},
	{name: "running without an address waits", status: provisionsA,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning}},
		want: falseFor(egressv1.ReasonProvisioning, "instance a is starting (no address yet)", egressv1.PhaseProvisioning)},
	{name: "running", status: provisionsA,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1"}},
		want: shown{ready: metav1.ConditionTrue, reason: egressv1.ReasonRunning, message: "serving at 10.0.0.1:3128",
			phase: egressv1.PhaseRunning, address: setAddress, ip: "10.0.0.1", endpoint: "10.0.0.1:3128"}},
	{name: "running under the provider's stable name", status: provisionsA,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.2", Host: "web.ns.svc"}},
		want: shown{ready: metav1.ConditionTrue, reason: egressv1.ReasonRunning, message: "serving at web.ns.svc:3128",
			phase: egressv1.PhaseRunning, address: setAddress, ip: "10.0.0.2", endpoint: "web.ns.svc:3128"}},
	// The provider's serving signal (issue 22).
	{name: "running, the proxy not answering yet", status: provisionsA,
		o: observation{seen: instanceSeen, now: t0.Add(95 * time.Second), inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", CreatedAt: t0,
			Serving: provider.ServingNotAnswering, ServingDetail: "not answering yet (cloud-init: running)"}},
		want: falseFor(egressv1.ReasonProxyStarting,
			"instance a runs at 10.0.0.1; its proxy does not answer yet: not answering yet (cloud-init: running) (1m35s after the instance was created)", egressv1.PhaseProvisioning)},
	{name: "running, not answering yet, age unknown", status: provisionsA,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingNotAnswering}},
		want: falseFor(egressv1.ReasonProxyStarting, "instance a runs at 10.0.0.1; its proxy does not answer yet", egressv1.PhaseProvisioning)},
	{name: "served, then stopped answering (the signal says when it last answered)", status: servesAReady,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingNotAnswering,
			ServingDetail: "it last answered at 2026-12-02T20:59:20Z", LastAnswered: t0}},
		want: falseFor(egressv1.ReasonProxyNotAnswering, "instance a at 10.0.0.1 stopped answering: it last answered at 2026-12-02T20:59:20Z", "")},
	{name: "answered while it was set up, never shown serving: starting, not stopped", status: provisionsA,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingNotAnswering,
			ServingDetail: "it last answered at 2026-12-02T20:59:20Z (cloud-init: done)", LastAnswered: t0}},
		want: falseFor(egressv1.ReasonProxyStarting, "instance a runs at 10.0.0.1; its proxy does not answer yet: it last answered at 2026-12-02T20:59:20Z (cloud-init: done)", egressv1.PhaseProvisioning)},
	{name: "served, then stopped answering (a readiness probe: the Proxy was Ready on it)", status: servesAReady,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingNotAnswering,
			ServingDetail: "the Squid container's readiness probe does not pass"}},
		want: falseFor(egressv1.ReasonProxyNotAnswering, "instance a at 10.0.0.1 stopped answering: the Squid container's readiness probe does not pass", "")},
	{name: "still not answering after it stopped", status: stoppedA,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingNotAnswering}},
		want: falseFor(egressv1.ReasonProxyNotAnswering, "instance a at 10.0.0.1 stopped answering", "")},
	{name: "a new instance not answering yet after its predecessor stopped: starting, not stopped", status: stoppedA,
		o: observation{seen: instanceSeen, fresh: true, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingNotAnswering,
			ServingDetail: "no report yet"}},
		want: falseFor(egressv1.ReasonProxyStarting, "instance a runs at 10.0.0.1; its proxy does not answer yet: no report yet", egressv1.PhaseProvisioning)},
	{name: "cloud-init failed: a latch, named with the guest's line", status: provisionsA,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingNotAnswering,
			SetupError: "('scripts-user', RuntimeError('Runparts: 1 failures'))"}},
		want: falseFor(egressv1.ReasonCloudInitFailed,
			"instance a runs at 10.0.0.1, its cloud-init failed and its proxy does not answer: ('scripts-user', RuntimeError('Runparts: 1 failures')); it is not replaced until the Proxy's spec or user-data changes",
			egressv1.PhaseFailed)},
	{name: "cloud-init failed, yet the proxy answers: it serves", status: provisionsA,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingAnswering,
			SetupError: "('package-update-upgrade-install', ...)"}},
		want: shown{ready: metav1.ConditionTrue, reason: egressv1.ReasonRunning, message: "serving at 10.0.0.1:3128",
			phase: egressv1.PhaseRunning, address: setAddress, ip: "10.0.0.1", endpoint: "10.0.0.1:3128"}},
	{name: "a replacement not answering yet: the old one serves", status: replacesAWithB,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "b", State: provider.StateRunning, IP: "10.0.0.2", Serving: provider.ServingNotAnswering}},
		want: whileReplacing("instance b runs at 10.0.0.2; its proxy does not answer yet")},
	{name: "running and answering", status: provisionsA,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateRunning, IP: "10.0.0.1", Serving: provider.ServingAnswering}},
		want: shown{ready: metav1.ConditionTrue, reason: egressv1.ReasonRunning, message: "serving at 10.0.0.1:3128",
			phase: egressv1.PhaseRunning, address: setAddress, ip: "10.0.0.1", endpoint: "10.0.0.1:3128"}},
	{name: "stopped", status: servesA,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateStopped}},
		want: falseFor(egressv1.ReasonInstanceStopped, "instance a stopped; starting it again", "")},
	{name: "stopped by a restart mid-create is no stop", status: provisionsA,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateStopped, Progress: "booting"}},
		want: shown{keep: true}},
	{name: "terminated", status: servesA,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "a", State: provider.StateTerminated}},
		want: falseFor(egressv1.ReasonInstanceStopped, "instance a terminated; deleting it to create it anew", "")},
	{name: "started, not running yet: still stopped", status: provisionsA,
		o:    observation{seen: instanceStarted, inst: provider.Instance{ID: "a", State: provider.StateProvisioning}},
		want: shown{keep: true}},
	{name: "started, with progress", status: provisionsA,
		o:    observation{seen: instanceStarted, inst: provider.Instance{ID: "a", State: provider.StateProvisioning, Progress: "booting"}},
		want: falseFor(egressv1.ReasonProvisioning, "instance a is resuming: booting", egressv1.PhaseProvisioning)},
	{name: "an interrupted create resumes", status: provisionsA,
		o:    observation{seen: instanceStarted, inst: provider.Instance{ID: "a", State: provider.StateProvisioning}, interrupted: true},
		want: falseFor(egressv1.ReasonProvisioning, "instance a is resuming", egressv1.PhaseProvisioning)},
	{name: "lost with nothing else serving", status: servesA, then: lost,
		o:    observation{seen: instanceLost, id: "a"},
		want: falseFor(egressv1.ReasonInstanceLost, "instance a is gone from the backend; creating it again", "")},

	// A replacement: the retiring instance serves until the new one runs.
	{name: "replacement provisioning", status: replacesAWithB,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "b", State: provider.StateProvisioning}},
		want: whileReplacing("instance b is Provisioning")},
	{name: "replacement vanishes while the retiring instance serves", status: replacesAWithB, then: lost,
		o:    observation{seen: instanceLost, id: "b"},
		want: whileReplacing("instance b is gone from the backend; creating it again")},
	{name: "replacement stopped", status: replacesAWithB,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "b", State: provider.StateStopped}},
		want: whileReplacing("instance b stopped; starting it again")},
	{name: "retiring instance vanished: nothing serves", status: replacesAWithB, then: retiredGone,
		o:    observation{seen: instanceSeen, inst: provider.Instance{ID: "b", State: provider.StateProvisioning}},
		want: falseFor(egressv1.ReasonProvisioning, "instance b is Provisioning", egressv1.PhaseProvisioning)},
	{name: "replacement runs: cut over", status: replacesAWithB, then: cutover,
		o: observation{seen: instanceSeen, inst: provider.Instance{ID: "b", State: provider.StateRunning, IP: "10.0.0.2"}},
		want: shown{ready: metav1.ConditionTrue, reason: egressv1.ReasonRunning, message: "serving at 10.0.0.2:3128",
			phase: egressv1.PhaseRunning, address: setAddress, ip: "10.0.0.2", endpoint: "10.0.0.2:3128"}},
	{name: "superseded backlog", status: provisionsA,
		o:    observation{seen: supersededBacklog, backlog: 16, next: "B"},
		want: falseFor(egressv1.ReasonProvisioning, "waiting for 16 superseded instances to be deleted before creating B", "")},
	{name: "superseded backlog while replacing", status: replacesAWithB,
		o:    observation{seen: supersededBacklog, backlog: 16, next: "C"},
		want: whileReplacing("waiting for 16 superseded instances to be deleted before creating C")},
	{name: "pool address: the old instance goes first", status: replacesAWithB, then: release,
		o:    observation{seen: addressReleasing, backlog: 1, next: "B"},
		want: falseFor(egressv1.ReasonProvisioning, "deleting 1 instance(s) on the Proxy's pool address before creating B on it: the address is never on two instances", "")},
	{name: "pool address not bound yet", status: nothingYet, o: observation{seen: addressPending, err: errPoolPending{"waiting for the pool"}},
		want: falseFor(egressv1.ReasonProvisioning, "waiting for the pool", egressv1.PhasePending)},

	// Provider failures, by class and by what serves.
	{name: "transient, nothing serving", status: provisionsA, o: observation{seen: failure, err: errTransient},
		want: falseFor(egressv1.ReasonBackendError, errTransient.Error(), egressv1.PhaseProvisioning)},
	{name: "transient while serving keeps Ready", status: servesA, o: observation{seen: failure, err: errTransient},
		want: shown{keep: true}},
	{name: "transient while replacing keeps Ready", status: replacesAWithB, o: observation{seen: failure, err: errTransient},
		want: shown{keep: true}},
	{name: "quota, nothing serving", status: nothingYet, o: observation{seen: failure, err: errQuota},
		want: falseFor(egressv1.ReasonQuotaExceeded, errQuota.Error(), egressv1.PhaseProvisioning)},
	{name: "quota while serving", status: servesA, o: observation{seen: failure, err: errQuota},
		want: falseFor(egressv1.ReasonQuotaExceeded, errQuota.Error(), "")},
	{name: "quota while replacing warns", status: replacesAWithB, o: observation{seen: failure, err: errQuota},
		want: warned(whileReplacing(errQuota.Error()), egressv1.ReasonQuotaExceeded, errQuota)},
	{name: "permanent, nothing serving", status: nothingYet, o: observation{seen: failure, err: errPermanent},
		want: falseFor(egressv1.ReasonPermanentFailure, errPermanent.Error(), egressv1.PhaseFailed)},
	{name: "permanent while serving", status: servesA, o: observation{seen: failure, err: errPermanent},
		want: falseFor(egressv1.ReasonPermanentFailure, errPermanent.Error(), "")},
	{name: "permanent while replacing warns", status: replacesAWithB, o: observation{seen: failure, err: errPermanent},
		want: warned(whileReplacing(errPermanent.Error()), egressv1.ReasonPermanentFailure, errPermanent)},

	// Configuration the Proxy waits on.
	{name: "provider not found", status: servesA, o: observation{seen: noProvider},
		want: shown{ready: metav1.ConditionFalse, reason: egressv1.ReasonProviderNotFound,
			message: `spec.provider "pool" names no entry in the operator's providers config`, phase: egressv1.PhasePending}},
	{name: "cloud-init Secret missing before any instance", status: nothingYet,
		o: observation{seen: secretUnresolved, err: &secretError{reason: egressv1.ReasonCloudInitSecretNotFound, msg: "no Secret"}},
		want: shown{ready: metav1.ConditionFalse, reason: egressv1.ReasonCloudInitSecretNotFound, message: "no Secret",
			phase: egressv1.PhasePending}},
	{name: "cloud-init Secret missing with an instance", status: servesA,
		o:    observation{seen: secretUnresolved, err: &secretError{reason: egressv1.ReasonCloudInitSecretNotFound, msg: "no Secret"}},
		want: shown{ready: metav1.ConditionFalse, reason: egressv1.ReasonCloudInitSecretNotFound, message: "no Secret"}},
	{name: "cloud-init Secret unreadable", status: nothingYet,
		o: observation{seen: secretUnresolved, err: &secretError{msg: "reading failed"}},
		want: shown{ready: metav1.ConditionFalse, reason: egressv1.ReasonBackendError, message: "reading failed",
			phase: egressv1.PhasePending}},

	{name: "clientAuth Secret missing before any instance", status: nothingYet,
		o: observation{seen: secretUnresolved, err: &secretError{reason: egressv1.ReasonClientAuthSecretNotFound, msg: "no Secret"}},
		want: shown{ready: metav1.ConditionFalse, reason: egressv1.ReasonClientAuthSecretNotFound, message: "no Secret",
			phase: egressv1.PhasePending}},
	{name: "clientAuth file invalid with an instance", status: servesA,
		o:    observation{seen: secretUnresolved, err: &secretError{reason: egressv1.ReasonClientAuthInvalid, msg: "line 2"}},
		want: shown{ready: metav1.ConditionFalse, reason: egressv1.ReasonClientAuthInvalid, message: "line 2"}},

	// Deletion.
	{name: "deleting", status: servesA, deleting: true, o: observation{seen: deletingInstance, id: "a"},
		want: deletingShows(egressv1.ReasonDeleting, "deleting instance a")},
	{name: "deleting with the provider gone", status: servesA, deleting: true, o: observation{seen: noProvider, id: "a"},
		want: deletingShows(egressv1.ReasonProviderNotFound, `cannot delete instance a: spec.provider "pool" names no entry in the providers config; add it back, or set the annotation `+
			egressv1.AnnotationForceRelease+`=true to abandon the instance`)},
	{name: "deleting, transient", status: replacesAWithB, deleting: true, o: observation{seen: failure, err: errTransient},
		want: deletingShows(egressv1.ReasonBackendError, "deleting the instance: "+errTransient.Error())},
	{name: "deleting, quota", status: servesA, deleting: true, o: observation{seen: failure, err: errQuota},
		want: deletingShows(egressv1.ReasonQuotaExceeded, "deleting the instance: "+errQuota.Error())},
	{name: "deleting, permanent", status: servesA, deleting: true, o: observation{seen: failure, err: errPermanent},
		want: deletingShows(egressv1.ReasonPermanentFailure, "deleting the instance: "+errPermanent.Error())},
	{name: "deleting, the pool address not released yet", status: nothingYet, deleting: true, o: observation{seen: addressPending, err: errPoolPending{"releasing 192.0.2.10"}},
		want: deletingShows(egressv1.ReasonDeleting, "releasing 192.0.2.10")},
}

// TestDeriveStatus: what each observation shows, with the transition the
// pass ran before it (lost, retiredGone, cutover) taken through the real
// state machine.
func TestDeriveStatus(t *testing.T) {
	for _, row := range statusTable {
		t.Run(row.name, func(t *testing.T) {
			px := &egressv1.Proxy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 1},
				Spec:       egressv1.ProxySpec{Provider: "pool"},
				Status:     *row.status.DeepCopy(),
			}
			if row.deleting {
				px.DeletionTimestamp = &metav1.Time{Time: time.Unix(1_800_000_000, 0)}
			}
			if row.then != nil {
				row.then(recordOf(&px.Status)).store(&px.Status)
			}
			if got := deriveStatus(row.o.of(px)); got != row.want {
				t.Errorf("deriveStatus:\n got  %+v\n want %+v", got, row.want)
			}
		})
	}
}

// TestStatusTableCoversDocs: every reason docs/api.md lists for Ready, with
// its Ready value, and every finding, has a row.
func TestStatusTableCoversDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### The `Ready` condition")
	if !ok {
		t.Fatal("docs/api.md has no section on the Ready condition")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	covered := map[string]bool{}
	findings := map[finding]bool{}
	for _, row := range statusTable {
		if !row.want.keep {
			covered[string(row.want.ready)+"/"+row.want.reason] = true
		}
		findings[row.o.seen] = true
	}
	documented := regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (True|False) \\|").FindAllStringSubmatch(section, -1)
	if len(documented) < 11 {
		t.Fatalf("found %d reasons in docs/api.md, want at least 11: the table's format changed?", len(documented))
	}
	for _, m := range documented {
		if !covered[m[2]+"/"+m[1]] {
			t.Errorf("reason %s (Ready %s) of docs/api.md: no row of the status table shows it", m[1], m[2])
		}
	}
	for f := noProvider; f <= addressPending; f++ {
		if !findings[f] {
			t.Errorf("finding %d: no row of the status table", f)
		}
	}
}

// TestKstatusCoversEveryReason: every reason docs/api.md lists for Ready
// is classified for kstatus, Running alone is neither Reconciling nor
// Stalled, and a reason nobody classified would read as Reconciling.
func TestKstatusCoversEveryReason(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "### The `Ready` condition")
	section, _, _ = strings.Cut(section, "\n### ")
	documented := regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (True|False) \\|").FindAllStringSubmatch(section, -1)
	stalled := map[string]bool{}
	for _, m := range documented {
		ready := metav1.ConditionStatus(m[2])
		r, s := progressOf(ready, m[1])
		switch {
		case m[1] == egressv1.ReasonRunning:
			if r || s {
				t.Errorf("Running: reconciling %v, stalled %v; want neither", r, s)
			}
		case r == s:
			t.Errorf("reason %s (Ready %s): reconciling %v, stalled %v; want exactly one", m[1], ready, r, s)
		}
		stalled[m[1]] = s
	}
	for _, reason := range []string{egressv1.ReasonPermanentFailure, egressv1.ReasonCloudInitFailed, egressv1.ReasonProviderNotFound} {
		if !stalled[reason] {
			t.Errorf("%s is not Stalled", reason)
		}
	}
	if r, s := progressOf(metav1.ConditionFalse, "SomethingNew"); !r || s {
		t.Errorf("an unclassified reason: reconciling %v, stalled %v", r, s)
	}
}

// TestSetProgress: the conditions follow Ready, with its generation, and
// go when Ready is True.
func TestSetProgress(t *testing.T) {
	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	setProgress(px, metav1.ConditionFalse, egressv1.ReasonProvisioning, "booting")
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != 3 || c.Message != "booting" {
		t.Fatalf("Reconciling while provisioning: %+v", c)
	}
	setProgress(px, metav1.ConditionFalse, egressv1.ReasonCloudInitFailed, "('scripts-user', ...)")
	if meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReconciling) != nil ||
		!meta.IsStatusConditionTrue(px.Status.Conditions, egressv1.ConditionStalled) {
		t.Fatalf("after a cloud-init failure: %+v", px.Status.Conditions)
	}
	setProgress(px, metav1.ConditionTrue, egressv1.ReasonRunning, "serving")
	if len(px.Status.Conditions) != 0 {
		t.Fatalf("Running left %+v", px.Status.Conditions)
	}
}
