// Package controller holds the Proxy reconciler (this file and its
// proxy_*.go siblings: its passes observe, proxy_status.go alone decides
// Ready and the phase, proxy_replace.go which instance serves); the garbage
// collector and the health loop are its subpackages gc and health.
package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// Finalizer holds a Proxy until its instance is gone from the backend.
const Finalizer = "egress.proxy-operator.dev/instance"

// Providers is what the reconciler needs of the registry.
type Providers interface {
	Get(name string) (*registry.Entry, error)
}

// ProxyReconciler takes each Proxy to a running instance on its provider and
// removes the instance with the Proxy.
type ProxyReconciler struct {
	Client client.Client
	// APIReader reads Secrets uncached, so the operator never holds every
	// Secret of the cluster in memory.
	APIReader client.Reader
	Providers Providers
	Recorder  events.EventRecorder
	// Scope is the Proxies this installation serves; the others are
	// invisible to it (proxy_scope.go).
	Scope Scope
	// TracerProvider makes each pass a span, the parent of the provider
	// calls' spans; nil means tracing is off.
	TracerProvider trace.TracerProvider

	// CallTimeout bounds one provider call, so a hung backend cannot hold a
	// worker forever. Blocking creates of VMs take minutes.
	CallTimeout time.Duration
	// RunningResync is how often a running instance is read again, to
	// notice one that vanished or stopped behind the operator's back.
	RunningResync time.Duration

	// ProgressEvery is how often, at most, a Proxy's status is written when
	// only the progress of its provisioning instance changed.
	ProgressEvery time.Duration

	transientBackoff workqueue.TypedRateLimiter[types.NamespacedName]
	quotaBackoff     workqueue.TypedRateLimiter[types.NamespacedName]
	deleteBackoff    workqueue.TypedRateLimiter[types.NamespacedName]
	progress         progressThrottle
	// sweeps shares the deletion passes' provider listings (sweep.go).
	sweeps sweepLists
	// heals bounds the autoheals in flight per entry (proxy_autoheal.go).
	heals healLimiter
	// lag keeps a pass off a cached copy its own last write replaced
	// (cachelag.go).
	lag cacheLag
}

// Defaults for the reconciler's knobs; main exposes them as flags.
const (
	// DefaultCallTimeout is the safety net against a backend that hangs
	// without answering: a conforming provider returns within
	// provider.CallBound (10 s), and a GC listing of a large backend within
	// a few pages.
	DefaultCallTimeout   = time.Minute
	DefaultRunningResync = 2 * time.Minute
	DefaultProgressEvery = 10 * time.Second
	// DeleteBackoffCap bounds the wait between two deletion passes of one
	// Proxy after Transient failures.
	DeleteBackoffCap = 30 * time.Second
)

func (r *ProxyReconciler) init() {
	if r.CallTimeout == 0 {
		r.CallTimeout = DefaultCallTimeout
	}
	if r.RunningResync == 0 {
		r.RunningResync = DefaultRunningResync
	}
	if r.ProgressEvery == 0 {
		r.ProgressEvery = DefaultProgressEvery
	}
	if r.transientBackoff == nil {
		r.transientBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](2*time.Second, 5*time.Minute)
	}
	if r.quotaBackoff == nil {
		// Quota rarely frees up within seconds; hammering the backend at a
		// quota limit is what users of other operators complain about.
		r.quotaBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](time.Minute, 30*time.Minute)
	}
	if r.deleteBackoff == nil {
		// A deletion pass succeeds only if all of its calls do (a listing,
		// Delete, the confirming Get), so under a flaky backend most
		// passes fail, and with the create path's 5-minute cap the
		// slowest of 200 deletions took 35 to 60 minutes (make drills,
		// chaos). Someone waits on a deletion (a namespace, a rollout);
		// 30 s keeps one Proxy to two passes a minute.
		r.deleteBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](2*time.Second, DeleteBackoffCap)
	}
}

// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxies/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=providerhealths,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile is one pass over one Proxy.
func (r *ProxyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	px := &egressv1.Proxy{}
	if err := r.Client.Get(ctx, req.NamespacedName, px); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			r.lag.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	return r.lag.pass(ctx, req.NamespacedName, px, func() (ctrl.Result, error) { return r.reconcileProxy(ctx, px) })
}

// reconcileProxy is one pass over px, read from the cache.
func (r *ProxyReconciler) reconcileProxy(ctx context.Context, px *egressv1.Proxy) (ctrl.Result, error) {
	if !r.Scope.Includes(px) {
		return ctrl.Result{}, nil // another installation's Proxy
	}
	ctx = telemetry.WithProxy(ctx, px.Namespace, px.Name, string(px.UID))
	if !px.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, px)
	}
	// The finalizer goes on before anything exists on a backend, so that
	// nothing can be created that the Proxy's deletion would not remove.
	// The update's own watch event brings the next pass, and r.lag keeps
	// any pass before it off the copy without the finalizer.
	if controllerutil.AddFinalizer(px, Finalizer) {
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, px))
	}
	before := px.DeepCopy()
	res := r.reconcileNormal(ctx, px)
	return res, r.writeStatus(ctx, before, px)
}

// reconcileNormal moves the Proxy one step towards a running instance and
// records what it saw in px.Status; it never writes to the API itself.
func (r *ProxyReconciler) reconcileNormal(ctx context.Context, px *egressv1.Proxy) ctrl.Result {
	log := logr.FromContextOrDiscard(ctx)
	// The first pass after a spec change of a Proxy that has an instance
	// sweeps for one that a crashed pass created and never recorded; until
	// a sweep succeeded, observedGeneration stays behind, so the next pass
	// sweeps again.
	prevObserved := px.Status.ObservedGeneration
	sweep, swept := px.Status.ProviderID != "" && prevObserved != px.Generation, false
	// A member whose peers its provider rewrites in place has seen its
	// spec once its instance has them (updateGroupPeers).
	peersPending := false
	defer func() {
		if (sweep && !swept) || peersPending {
			px.Status.ObservedGeneration = prevObserved
		}
	}()
	px.Status.ObservedGeneration = px.Generation

	entry, err := r.Providers.Get(px.Spec.Provider)
	if err != nil {
		// Re-evaluated when the providers config changes (a watch on the
		// registry), so no requeue here.
		r.report(px, observation{seen: noProvider})
		return ctrl.Result{}
	}
	log = log.WithValues("provider", entry.Name)
	ctx = logr.NewContext(ctx, log)

	cloudInit, err := r.cloudInit(ctx, px)
	if err != nil {
		r.report(px, observation{seen: secretUnresolved, err: err})
		return ctrl.Result{RequeueAfter: r.transientBackoff.When(key(px))}
	}
	users, err := r.clientAuth(ctx, px)
	if err != nil {
		r.report(px, observation{seen: secretUnresolved, err: err})
		return ctrl.Result{RequeueAfter: r.transientBackoff.When(key(px))}
	}
	req := createRequest(px, cloudInit, users, inPlaceOf(entry), poolShape(entry))
	if r.latched(ctx, px, entry, req.Name) {
		// A permanent failure is not retried until what it was seen under
		// changes; the status says what.
		return ctrl.Result{}
	}
	px.Status.PermanentFailure = nil

	inst, err := r.observe(ctx, entry, px)
	if err != nil {
		return r.failed(ctx, entry, px, req, err)
	}
	// A spec change that reshapes the instance gets a new instance under a
	// new name; the serving one keeps serving until the new one runs.
	observed := px.Status.ProviderID
	rec := reshape(recordOf(&px.Status), req.Name)
	if len(rec.superseded) > maxSuperseded {
		// Spec changes faster than the backend deletes: let it catch up
		// before making yet another instance.
		r.deleteSuperseded(ctx, entry, px)
		r.report(px, observation{seen: supersededBacklog, backlog: len(px.Status.SupersededProviderIDs), next: req.Name})
		return ctrl.Result{RequeueAfter: entry.PollInterval}
	}
	rec.store(&px.Status)
	r.deleteSuperseded(ctx, entry, px)

	if ea := px.Spec.EgressAddress; ea != nil && ea.Address != "" && entry.AddressPool() == nil {
		return r.failed(ctx, entry, px, req, provider.Errorf(provider.ErrPermanent,
			"spec.egressAddress.address: %s picks an address from the entry's addressPool, and providers config entry %s has none", ea.Address, entry.Name))
	}
	if entry.AddressPool() != nil {
		if px.Status.ProviderID == "" {
			// A new instance on the pool address: the one that holds it
			// goes first.
			if left := r.releaseForPool(ctx, entry, px); left > 0 {
				r.report(px, observation{seen: addressReleasing, backlog: left, next: req.Name})
				return ctrl.Result{RequeueAfter: entry.PollInterval}
			}
		}
		static, err := r.poolAddress(ctx, entry, px, px.Status.ProviderID == "")
		if p, ok := isPoolPending(err); ok {
			r.report(px, observation{seen: addressPending, err: p})
			return ctrl.Result{RequeueAfter: poolPendingPoll}
		}
		if err != nil {
			return r.failed(ctx, entry, px, req, err)
		}
		req.StaticAddress = static
	}
	if px.Spec.GroupAddress != nil {
		ga, err := memberGroupAddress(px, req.StaticAddress, entry.Name)
		if p, ok := isPoolPending(err); ok {
			// The group writes the address into the spec: that update
			// brings the next pass.
			r.report(px, observation{seen: addressPending, err: p})
			return ctrl.Result{RequeueAfter: entry.PollInterval}
		}
		if err != nil {
			return r.failed(ctx, entry, px, req, err)
		}
		req.GroupAddress = ga
		peersPending = entry.Peers != nil
	}

	switch {
	case px.Status.ProviderID == "":
		inst, err = r.create(ctx, entry, px, req)
	case px.Status.ProviderID != observed:
		// Reverted to the retiring instance: read it as current now.
		inst, err = r.get(ctx, entry, px.Status.ProviderID)
	}
	if err != nil {
		return r.failed(ctx, entry, px, req, err)
	}
	if sweep {
		// A pass that crashed after its Create left an instance that no
		// status records; the first pass after a spec change finds it.
		if err := r.supersedeUnrecorded(ctx, entry, px); err != nil {
			return r.failed(ctx, entry, px, req, err)
		}
		swept = true
	}

	switch inst.State {
	case provider.StateRunning:
		if !serves(inst) {
			break // a provider bug; wait like Provisioning
		}
		if err := r.updateUsers(ctx, entry, inst.ID, req.ClientAuth); err != nil {
			return r.failed(ctx, entry, px, req, err)
		}
		has, err := r.updateGroupPeers(ctx, entry, inst.ID, req)
		if err != nil {
			return r.failed(ctx, entry, px, req, err)
		}
		peersPending = !has
		if inst, err = r.holdEgressAddress(ctx, entry, px, inst); err != nil {
			return r.failed(ctx, entry, px, req, err)
		}
		r.running(px, inst)
		// The instance the new one replaced goes now, in the same pass.
		r.deleteSuperseded(ctx, entry, px)
		if len(px.Status.SupersededProviderIDs) > 0 || inst.Egress.Awaited() {
			// Superseded instances to retire, or the first answer of an
			// echo the operator asks itself (seconds away): soon, not at
			// the running resync.
			return ctrl.Result{RequeueAfter: entry.PollInterval}
		}
		return ctrl.Result{RequeueAfter: jitter(r.RunningResync)}
	case provider.StateStopped:
		// Create adopts and starts a stopped instance, and resumes an
		// unfinished one (a create a restart interrupted: Stopped with the
		// Progress it had reached).
		r.report(px, observation{seen: instanceSeen, inst: inst})
		started, err := r.create(ctx, entry, px, req)
		if err != nil {
			return r.failed(ctx, entry, px, req, err)
		}
		if serves(started) {
			if started, err = r.holdEgressAddress(ctx, entry, px, started); err != nil {
				return r.failed(ctx, entry, px, req, err)
			}
			r.running(px, started)
			return ctrl.Result{RequeueAfter: jitter(r.RunningResync)}
		}
		r.report(px, observation{seen: instanceStarted, inst: started, interrupted: inst.Progress != ""})
		return ctrl.Result{RequeueAfter: entry.PollInterval}
	case provider.StateTerminated:
		// Deleted first and created anew once Get says NotFound: creating
		// under the same name now would adopt the terminated instance.
		r.report(px, observation{seen: instanceSeen, inst: inst})
		if err := r.deleteInstance(ctx, entry, inst.ID); err != nil {
			return r.failed(ctx, entry, px, req, err)
		}
		return ctrl.Result{RequeueAfter: entry.PollInterval}
	}
	r.report(px, observation{seen: instanceSeen, inst: inst, fresh: px.Status.ProviderID != observed})
	if r.autoheal(ctx, entry, px, inst) {
		return ctrl.Result{Requeue: true} // the next pass replaces it
	}
	return ctrl.Result{RequeueAfter: entry.PollInterval}
}

// observe reads the recorded instances before anything is planned, so that
// the plan starts from the backend, not from a status a crash may have left
// stale: a current instance that runs is cut over to first (it serves now,
// and a spec change must retire it, not supersede it), a lost one is
// dropped, and a retiring instance that vanished no longer counts as
// serving. It returns current's observation (zero when none is recorded).
func (r *ProxyReconciler) observe(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy) (provider.Instance, error) {
	if id := px.Status.RetiringProviderID; id != "" {
		if _, err := r.get(ctx, entry, id); errors.Is(err, provider.ErrNotFound) {
			r.event(px, corev1.EventTypeWarning, egressv1.ReasonInstanceLost, "Replace",
				"instance %s, serving while it was replaced, is gone from provider %q", id, entry.Name)
			r.apply(px, retiredGone)
		}
	}
	id := px.Status.ProviderID
	if id == "" {
		return provider.Instance{}, nil
	}
	inst, err := r.get(ctx, entry, id)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		r.event(px, corev1.EventTypeWarning, egressv1.ReasonInstanceLost, "Create",
			"instance %s is gone from provider %q; creating it again", id, entry.Name)
		r.apply(px, lost)
		r.report(px, observation{seen: instanceLost, id: id})
		return provider.Instance{}, nil
	case err != nil:
		return provider.Instance{}, err
	}
	if serves(inst) && px.Status.RetiringProviderID != "" {
		if inst, err = r.holdEgressAddress(ctx, entry, px, inst); err != nil {
			return provider.Instance{}, err
		}
		r.running(px, inst)
	}
	return inst, nil
}

// supersedeUnrecorded lists the provider's instances and supersedes those
// that carry the Proxy's UID but that its status does not record.
func (r *ProxyReconciler) supersedeUnrecorded(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy) error {
	found, err := r.ownedUnrecorded(ctx, entry, px, px.Status.RecordedProviderIDs())
	for _, id := range found {
		r.apply(px, func(rec record) record { rec.superseded = supersede(rec.superseded, id); return rec })
	}
	return err
}

// maxSuperseded bounds status.supersededProviderIDs (the CRD's MaxItems
// leaves room for the one reshape adds).
const maxSuperseded = 15

// apply runs one transition of the replacement state machine on px.
func (r *ProxyReconciler) apply(px *egressv1.Proxy, f func(record) record) {
	f(recordOf(&px.Status)).store(&px.Status)
}

// running records a serving instance; the instance it replaced is
// superseded now.
func (r *ProxyReconciler) running(px *egressv1.Proxy, inst provider.Instance) {
	r.apply(px, cutover)
	r.report(px, observation{seen: instanceSeen, inst: inst})
	r.forget(key(px))
}

// updateUsers gives a running instance the Proxy's current clientAuth
// users when its provider rewrites them in place (a read when it has
// them); otherwise they are in the shape, and new users mean a new
// instance.
func (r *ProxyReconciler) updateUsers(ctx context.Context, entry *registry.Entry, id string, users provider.Sensitive) error {
	if entry.Users == nil || users.Len() == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	return entry.Users.UpdateUsers(ctx, id, users)
}

// jitter spreads d by up to a tenth either way, so that Proxies created
// together are not read again together, wave after wave.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}

// deleteSuperseded deletes the instances the Proxy no longer wants and
// drops those the backend no longer has. A failure is logged and retried
// on the next pass: nothing waits for these deletions.
func (r *ProxyReconciler) deleteSuperseded(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy) {
	for _, id := range slices.Clone(px.Status.SupersededProviderIDs) {
		err := r.deleteInstance(ctx, entry, id)
		if err == nil {
			_, err = r.get(ctx, entry, id)
		}
		switch {
		case errors.Is(err, provider.ErrNotFound):
			r.apply(px, func(rec record) record { return gone(rec, id) })
		case err != nil:
			logr.FromContextOrDiscard(ctx).Info("deleting a superseded instance failed; trying again next pass",
				"supersededProviderID", id, "error", err.Error())
		}
	}
}

// failed records a provider error by its class and says when to try again.
func (r *ProxyReconciler) failed(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, req provider.CreateRequest, err error) ctrl.Result {
	log := logr.FromContextOrDiscard(ctx)
	var res ctrl.Result
	switch provider.ClassOf(err) {
	case provider.ErrPermanent:
		log.Error(err, "permanent provider failure; not retrying until the spec, the provider's configuration or its health changes")
		px.Status.PermanentFailure = &egressv1.PermanentFailure{
			ObservedGeneration: px.Generation, InstanceName: req.Name, ProviderRevision: entry.Revision, Time: metav1.Now(),
		}
	case provider.ErrQuotaExceeded:
		res.RequeueAfter = r.quotaBackoff.When(key(px))
		log.Info("provider out of quota or capacity; backing off", "error", err.Error(), "retryIn", res.RequeueAfter)
	default:
		res.RequeueAfter = r.transientBackoff.When(key(px))
		log.Info("transient provider failure; backing off", "error", err.Error(), "retryIn", res.RequeueAfter)
	}
	r.report(px, observation{seen: failure, err: err})
	return res
}

// latched reports a Proxy whose last attempt failed permanently under what
// it still has: the same generation, instance name (shape and resolved
// cloud-init) and provider revision, with no turn of the provider's health
// to Healthy since. Everything it reads is in the API, so a restart or a
// new leader keeps the latch.
func (r *ProxyReconciler) latched(ctx context.Context, px *egressv1.Proxy, entry *registry.Entry, name string) bool {
	l := px.Status.PermanentFailure
	if l == nil || l.ObservedGeneration != px.Generation || l.InstanceName != name || l.ProviderRevision != entry.Revision {
		return false
	}
	return !r.healthySince(ctx, entry.Name, l.Time.Time)
}

// healthySince says whether the provider's ProviderHealth turned Healthy
// after t: an administrator fixed what the failure may have come from (an
// RBAC rule, a credential, a missing image).
func (r *ProxyReconciler) healthySince(ctx context.Context, providerName string, t time.Time) bool {
	ph := &egressv1.ProviderHealth{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: providerName}, ph); err != nil {
		return false
	}
	c := meta.FindStatusCondition(ph.Status.Conditions, egressv1.ConditionHealthy)
	return c != nil && c.Status == metav1.ConditionTrue && c.LastTransitionTime.After(t)
}

func (r *ProxyReconciler) create(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, req provider.CreateRequest) (provider.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	inst, err := entry.Provider.Create(ctx, req)
	if err != nil {
		return provider.Instance{}, err
	}
	if slices.Contains(px.Status.SupersededProviderIDs, inst.ID) {
		// The name was reverted to an instance that is being deleted: it
		// is made anew once gone, never adopted half-deleted.
		return provider.Instance{}, provider.Wrap(entry.Name, provider.OpCreate, provider.ErrTransient,
			fmt.Errorf("instance %s is still being deleted; it is created anew once gone", inst.ID))
	}
	px.Status.ProviderID = inst.ID
	px.Status.InstanceName = req.Name
	return inst, nil
}

func (r *ProxyReconciler) get(ctx context.Context, entry *registry.Entry, id string) (provider.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	return entry.Provider.Get(ctx, id)
}

func (r *ProxyReconciler) deleteInstance(ctx context.Context, entry *registry.Entry, id string) error {
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	return entry.Provider.Delete(ctx, id)
}

// cloudInit resolves the user-data: inline, from a Secret, or none. A
// Secret or key it cannot read gives a *secretError instead.
func (r *ProxyReconciler) cloudInit(ctx context.Context, px *egressv1.Proxy) (provider.Sensitive, error) {
	ref := px.Spec.CloudInitSecretRef
	if ref == nil {
		return provider.Sensitive(px.Spec.CloudInit), nil
	}
	data, err := r.secretData(ctx, px, "spec.cloudInitSecretRef", ref.Name, ref.Key, "user-data", egressv1.ReasonCloudInitSecretNotFound)
	return provider.Sensitive(data), err
}

// clientAuth resolves the htpasswd file of spec.clientAuth, checked as both
// proxies read it, or none. A Secret or key it cannot read, or a file that
// cannot be used, gives a *secretError naming the Secret and the line,
// never the file's content.
func (r *ProxyReconciler) clientAuth(ctx context.Context, px *egressv1.Proxy) (provider.Sensitive, error) {
	if px.Spec.ClientAuth == nil {
		return "", nil
	}
	ref := px.Spec.ClientAuth.SecretRef
	data, err := r.secretData(ctx, px, "spec.clientAuth.secretRef", ref.Name, ref.Key, "htpasswd", egressv1.ReasonClientAuthSecretNotFound)
	if err != nil {
		return "", err
	}
	if _, err := clientauth.Parse(data); err != nil {
		return "", &secretError{reason: egressv1.ReasonClientAuthInvalid,
			msg: fmt.Sprintf("spec.clientAuth.secretRef: Secret %q key %q: %v", ref.Name, orDefault(ref.Key, "htpasswd"), err)}
	}
	return provider.Sensitive(data), nil
}

// secretData reads key (defaultKey when empty) of the Secret name in the
// Proxy's namespace, the one way both Secret references are read. A Secret
// or key that does not exist is a *secretError with notFound as its
// reason; any other read failure one with no reason. Errors name field.
func (r *ProxyReconciler) secretData(ctx context.Context, px *egressv1.Proxy, field, name, key, defaultKey, notFound string) ([]byte, error) {
	key = orDefault(key, defaultKey)
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: px.Namespace, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &secretError{reason: notFound, msg: fmt.Sprintf("%s: Secret %q not found in namespace %q", field, name, px.Namespace)}
	case err != nil:
		return nil, &secretError{msg: fmt.Sprintf("%s: reading Secret %q: %v", field, name, err)}
	}
	data, ok := sec.Data[key]
	if !ok {
		return nil, &secretError{reason: notFound, msg: fmt.Sprintf("%s: Secret %q has no key %q", field, name, key)}
	}
	return data, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// writeStatus patches the status when, and only when, it changed: an idle
// fleet makes no writes.
func (r *ProxyReconciler) writeStatus(ctx context.Context, before, px *egressv1.Proxy) error {
	if equality.Semantic.DeepEqual(before.Status, px.Status) {
		return nil
	}
	// The patch carries the resourceVersion the pass read: a status
	// computed from a stale cache must not overwrite a newer one (it
	// would drop the ID of an instance a previous pass recorded).
	if err := r.Client.Status().Patch(ctx, px, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

func (r *ProxyReconciler) forget(k types.NamespacedName) {
	r.transientBackoff.Forget(k)
	r.quotaBackoff.Forget(k)
	r.deleteBackoff.Forget(k)
	r.progress.forget(k)
	r.heals.release(k)
}

func key(px *egressv1.Proxy) types.NamespacedName {
	return types.NamespacedName{Namespace: px.Namespace, Name: px.Name}
}
