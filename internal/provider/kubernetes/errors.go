package kubernetes

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Errors are classified where they arise (classify at each API call,
// provider.Errorf where the provider knows the class) and the method
// boundary (provider.WithBoundary) only adds the provider name and the
// operation, so a class is decided once.

// quotaMessage is what the ResourceQuota admission plugin says when a
// request would exceed a quota ("exceeded quota: <name>, requested: ...").
// An RBAC refusal is the same 403 with reason Forbidden, but says "User ...
// cannot <verb> resource ...", so the message is the part of the status
// that tells the two apart.
const quotaMessage = "exceeded quota"

// isQuota reports whether err is the API server refusing a request because
// a ResourceQuota in the namespace is used up.
func isQuota(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	s := st.Status()
	return s.Reason == metav1.StatusReasonForbidden && strings.Contains(s.Message, quotaMessage)
}

// serviceIPAllocation and rangeFull are in what kube-apiserver answers (a
// 500 InternalError) when no ClusterIP is left: "Internal error occurred:
// failed to allocate a serviceIP for Service \"x\": range is full". A
// full range is a capacity answer: a retry soon gets the same, and each
// retry re-created the instance's other objects.
const (
	serviceIPAllocation = "failed to allocate a serviceIP"
	rangeFull           = "range is full"
)

func isServiceRangeFull(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	s := st.Status()
	return s.Reason == metav1.StatusReasonInternalError && strings.Contains(s.Message, serviceIPAllocation) &&
		strings.Contains(s.Message, rangeFull)
}

// classify gives an API error its class; what describes the call
// ("creating pod ns/name") and leads the message.
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	class := classOf(err)
	return &provider.Error{Class: class, Err: wrapMsg(what, err)}
}

func classOf(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return provider.ErrTransient
	case apierrors.IsNotFound(err):
		return provider.ErrNotFound
	case isQuota(err), isServiceRangeFull(err):
		return provider.ErrQuotaExceeded
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err),
		apierrors.IsConflict(err):
		return provider.ErrTransient
	case apierrors.IsUnauthorized(err):
		// Credentials rotate (projected service account tokens, a
		// refreshed kubeconfig): latching a Proxy on a 401 would outlive
		// the cause, so this is retried.
		return provider.ErrTransient
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err),
		apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err),
		apierrors.IsAlreadyExists(err), apierrors.IsGone(err):
		// RBAC, admission (Pod Security included) or validation refusals:
		// the same request is refused again until someone changes the
		// cluster or the entry.
		return provider.ErrPermanent
	}
	// Anything else (a 5xx without a known reason, a refused connection)
	// is the contract's default.
	return provider.ErrTransient
}

type msgErr struct {
	what string
	err  error
}

func (e *msgErr) Error() string { return e.what + ": " + e.err.Error() }
func (e *msgErr) Unwrap() error { return e.err }

func wrapMsg(what string, err error) error { return &msgErr{what: what, err: err} }
