// Package controller holds the operator's controllers: the Proxy reconciler
// (this file and its siblings), and later the garbage collector and the
// health loop.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
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

	transientBackoff workqueue.TypedRateLimiter[types.NamespacedName]
	quotaBackoff     workqueue.TypedRateLimiter[types.NamespacedName]

	// latches remembers the provider revision each permanent failure was
	// seen under: a changed provider configuration releases the latch.
	// Kept in memory: after a restart every latched Proxy is tried once.
	latchMu sync.Mutex
	latches map[types.NamespacedName]string
}

// Defaults for the reconciler's knobs; main exposes them as flags.
const (
	DefaultCallTimeout   = 15 * time.Minute
	DefaultRunningResync = 2 * time.Minute
)

func (r *ProxyReconciler) init() {
	if r.CallTimeout == 0 {
		r.CallTimeout = DefaultCallTimeout
	}
	if r.RunningResync == 0 {
		r.RunningResync = DefaultRunningResync
	}
	if r.transientBackoff == nil {
		r.transientBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](2*time.Second, 5*time.Minute)
	}
	if r.quotaBackoff == nil {
		// Quota rarely frees up within seconds; hammering the backend at a
		// quota limit is what users of other operators complain about.
		r.quotaBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](time.Minute, 30*time.Minute)
	}
}

// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=egress.proxy-operator.dev,resources=proxies/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile is one pass over one Proxy.
func (r *ProxyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	px := &egressv1.Proxy{}
	if err := r.Client.Get(ctx, req.NamespacedName, px); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !r.Scope.Includes(px) {
		return ctrl.Result{}, nil // another installation's Proxy
	}
	ctx = telemetry.WithProxy(ctx, px.Namespace, px.Name, string(px.UID))
	if !px.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, px)
	}
	// The finalizer goes on before anything exists on a backend, so that
	// nothing can be created that the Proxy's deletion would not remove.
	// The update's own watch event brings the next pass, which then reads a
	// cache that has caught up: no Create from a stale status.
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
	px.Status.ObservedGeneration = px.Generation

	entry, err := r.Providers.Get(px.Spec.Provider)
	if err != nil {
		// Re-evaluated when the providers config changes (a watch on the
		// registry), so no requeue here.
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonProviderNotFound,
			fmt.Sprintf("spec.provider %q names no entry in the operator's providers config", px.Spec.Provider))
		px.Status.Phase = egressv1.PhasePending
		return ctrl.Result{}
	}
	if r.latched(px, entry) {
		// A permanent failure is not retried until the spec or the
		// provider's configuration changes.
		return ctrl.Result{}
	}
	log = log.WithValues("provider", entry.Name)
	ctx = logr.NewContext(ctx, log)

	cloudInit, reason, msg := r.cloudInit(ctx, px)
	if reason != "" {
		r.setReady(px, metav1.ConditionFalse, reason, msg)
		if px.Status.ProviderID == "" {
			px.Status.Phase = egressv1.PhasePending
		}
		return ctrl.Result{RequeueAfter: r.transientBackoff.When(key(px))}
	}
	req := createRequest(px, cloudInit)

	// A spec change that reshapes the instance gets a new instance under a
	// new name; the old one keeps serving until the new one runs.
	if px.Status.ProviderID != "" && px.Status.InstanceName != req.Name {
		if px.Status.RetiringProviderID == "" {
			px.Status.RetiringProviderID = px.Status.ProviderID
		} else if err := r.deleteInstance(ctx, entry, px.Status.ProviderID); err != nil {
			// The unfinished replacement is itself replaced; the GC collects
			// it if this delete does not get through.
			return r.failed(ctx, entry, px, err)
		}
		px.Status.ProviderID, px.Status.InstanceName = "", ""
	}

	var inst provider.Instance
	if px.Status.ProviderID == "" {
		if inst, err = r.create(ctx, entry, px, req); err != nil {
			return r.failed(ctx, entry, px, err)
		}
	} else {
		inst, err = r.get(ctx, entry, px.Status.ProviderID)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			r.event(px, corev1.EventTypeWarning, egressv1.ReasonInstanceLost, "Create",
				"instance %s is gone from provider %q; creating it again", px.Status.ProviderID, entry.Name)
			px.Status.ProviderID, px.Status.IP, px.Status.Endpoint = "", "", ""
			if inst, err = r.create(ctx, entry, px, req); err != nil {
				return r.failed(ctx, entry, px, err)
			}
		case err != nil:
			return r.failed(ctx, entry, px, err)
		}
	}

	switch inst.State {
	case provider.StateRunning:
		if inst.IP == "" {
			break // a provider bug; wait like Provisioning
		}
		return r.running(ctx, entry, px, inst)
	case provider.StateStopped:
		// Create adopts and starts a stopped instance.
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonInstanceStopped,
			fmt.Sprintf("instance %s stopped; starting it again", inst.ID))
		if _, err := r.create(ctx, entry, px, req); err != nil {
			return r.failed(ctx, entry, px, err)
		}
		return ctrl.Result{RequeueAfter: entry.PollInterval}
	case provider.StateTerminated:
		// Deleted first and created anew once Get says NotFound: creating
		// under the same name now would adopt the terminated instance.
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonInstanceStopped,
			fmt.Sprintf("instance %s terminated; deleting it to create it anew", inst.ID))
		if err := r.deleteInstance(ctx, entry, inst.ID); err != nil {
			return r.failed(ctx, entry, px, err)
		}
		return ctrl.Result{RequeueAfter: entry.PollInterval}
	}
	r.provisioning(px, inst)
	return ctrl.Result{RequeueAfter: entry.PollInterval}
}

// running records a serving instance, then retires the one it replaced.
func (r *ProxyReconciler) running(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, inst provider.Instance) ctrl.Result {
	px.Status.IP = inst.IP
	host := inst.Host
	if host == "" {
		host = inst.IP
	}
	px.Status.Endpoint = net.JoinHostPort(host, strconv.Itoa(int(createPort(px))))
	px.Status.Phase = egressv1.PhaseRunning
	r.setReady(px, metav1.ConditionTrue, egressv1.ReasonRunning, "serving at "+px.Status.Endpoint)
	r.forget(key(px))

	if old := px.Status.RetiringProviderID; old != "" {
		err := r.deleteInstance(ctx, entry, old)
		if err == nil {
			_, err = r.get(ctx, entry, old)
		}
		switch {
		case errors.Is(err, provider.ErrNotFound):
			px.Status.RetiringProviderID = ""
		case err != nil:
			logr.FromContextOrDiscard(ctx).Error(err, "retiring the replaced instance", "retiringProviderID", old)
			return ctrl.Result{RequeueAfter: r.transientBackoff.When(key(px))}
		default:
			return ctrl.Result{RequeueAfter: entry.PollInterval}
		}
	}
	return ctrl.Result{RequeueAfter: r.RunningResync}
}

// provisioning records an instance that exists but does not serve yet.
func (r *ProxyReconciler) provisioning(px *egressv1.Proxy, inst provider.Instance) {
	if px.Status.RetiringProviderID != "" {
		// The old instance still serves at the recorded endpoint.
		r.setReady(px, metav1.ConditionTrue, egressv1.ReasonReplacing,
			fmt.Sprintf("serving at %s while instance %s replaces %s", px.Status.Endpoint, inst.ID, px.Status.RetiringProviderID))
		return
	}
	px.Status.Phase = egressv1.PhaseProvisioning
	px.Status.IP, px.Status.Endpoint = "", ""
	r.setReady(px, metav1.ConditionFalse, egressv1.ReasonProvisioning,
		fmt.Sprintf("instance %s is %s", inst.ID, describeState(inst.State)))
}

func describeState(s provider.State) string {
	if s == "" || s == provider.StateRunning {
		return "starting (no address yet)"
	}
	return string(s)
}

// failed records a provider error by its class and says when to try again.
func (r *ProxyReconciler) failed(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, err error) ctrl.Result {
	log := logr.FromContextOrDiscard(ctx)
	if px.Status.Phase == "" || px.Status.Phase == egressv1.PhasePending {
		px.Status.Phase = egressv1.PhaseProvisioning
	}
	switch provider.ClassOf(err) {
	case provider.ErrPermanent:
		log.Error(err, "permanent provider failure; not retrying until the spec or the provider's configuration changes")
		px.Status.Phase = egressv1.PhaseFailed
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonPermanentFailure, err.Error())
		r.latch(px, entry)
		return ctrl.Result{}
	case provider.ErrQuotaExceeded:
		wait := r.quotaBackoff.When(key(px))
		log.Info("provider out of quota or capacity; backing off", "error", err.Error(), "retryIn", wait)
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonQuotaExceeded, err.Error())
		return ctrl.Result{RequeueAfter: wait}
	default:
		wait := r.transientBackoff.When(key(px))
		log.Info("transient provider failure; backing off", "error", err.Error(), "retryIn", wait)
		if px.Status.RetiringProviderID != "" || meta.IsStatusConditionTrue(px.Status.Conditions, egressv1.ConditionReady) {
			// A running Proxy whose backend hiccups still serves; keep Ready
			// as it is and let the next read tell.
			return ctrl.Result{RequeueAfter: wait}
		}
		r.setReady(px, metav1.ConditionFalse, egressv1.ReasonBackendError, err.Error())
		return ctrl.Result{RequeueAfter: wait}
	}
}

// latched reports a Proxy whose last attempt failed permanently for the
// generation it still has, under the provider configuration it still has.
func (r *ProxyReconciler) latched(px *egressv1.Proxy, entry *registry.Entry) bool {
	c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady)
	if c == nil || c.Reason != egressv1.ReasonPermanentFailure || c.ObservedGeneration != px.Generation {
		return false
	}
	r.latchMu.Lock()
	defer r.latchMu.Unlock()
	rev, ok := r.latches[key(px)]
	return ok && rev == entry.Revision
}

func (r *ProxyReconciler) latch(px *egressv1.Proxy, entry *registry.Entry) {
	r.latchMu.Lock()
	defer r.latchMu.Unlock()
	if r.latches == nil {
		r.latches = map[types.NamespacedName]string{}
	}
	r.latches[key(px)] = entry.Revision
}

func (r *ProxyReconciler) create(ctx context.Context, entry *registry.Entry, px *egressv1.Proxy, req provider.CreateRequest) (provider.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	inst, err := entry.Provider.Create(ctx, req)
	if err != nil {
		return provider.Instance{}, err
	}
	if px.Status.ProviderID != inst.ID {
		r.event(px, corev1.EventTypeNormal, "InstanceCreated", "Create",
			"instance %s on provider %q", inst.ID, entry.Name)
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
// missing Secret or key gives a reason and a message instead.
func (r *ProxyReconciler) cloudInit(ctx context.Context, px *egressv1.Proxy) (provider.Sensitive, string, string) {
	ref := px.Spec.CloudInitSecretRef
	if ref == nil {
		return provider.Sensitive(px.Spec.CloudInit), "", ""
	}
	keyName := ref.Key
	if keyName == "" {
		keyName = "user-data"
	}
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: px.Namespace, Name: ref.Name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return "", egressv1.ReasonCloudInitSecretNotFound,
			fmt.Sprintf("spec.cloudInitSecretRef: Secret %q not found in namespace %q", ref.Name, px.Namespace)
	case err != nil:
		return "", egressv1.ReasonBackendError, fmt.Sprintf("spec.cloudInitSecretRef: reading Secret %q: %v", ref.Name, err)
	}
	data, ok := sec.Data[keyName]
	if !ok {
		return "", egressv1.ReasonCloudInitSecretNotFound,
			fmt.Sprintf("spec.cloudInitSecretRef: Secret %q has no key %q", ref.Name, keyName)
	}
	return provider.Sensitive(data), "", ""
}

func createPort(px *egressv1.Proxy) int32 {
	if px.Spec.Port == 0 {
		return defaultPort
	}
	return px.Spec.Port
}

// setReady sets the Ready condition and emits an event when its reason
// changes: events follow transitions, not reconciles.
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
	if prev.Reason == reason && prev.Status == status {
		return
	}
	typ := corev1.EventTypeNormal
	if status == metav1.ConditionFalse && reason != egressv1.ReasonProvisioning && reason != egressv1.ReasonDeleting {
		typ = corev1.EventTypeWarning
	}
	r.event(px, typ, reason, "Reconcile", "%s", msg)
}

func (r *ProxyReconciler) event(px *egressv1.Proxy, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(px, nil, typ, reason, action, note, args...)
	}
}

// writeStatus patches the status when, and only when, it changed: an idle
// fleet makes no writes.
func (r *ProxyReconciler) writeStatus(ctx context.Context, before, px *egressv1.Proxy) error {
	if equality.Semantic.DeepEqual(before.Status, px.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, px, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

func (r *ProxyReconciler) forget(k types.NamespacedName) {
	r.transientBackoff.Forget(k)
	r.quotaBackoff.Forget(k)
	r.latchMu.Lock()
	delete(r.latches, k)
	r.latchMu.Unlock()
}

func key(px *egressv1.Proxy) types.NamespacedName {
	return types.NamespacedName{Namespace: px.Namespace, Name: px.Name}
}
