package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Errors are classified once, where they arise: every API call's error goes
// through classify with what the call was for (its target, so that a 404
// means "this instance is gone" only when it names this instance), and
// every finished operation through opError. The method boundary only adds
// the provider name and the operation.

// call describes one API call for its error's class and message.
type call struct {
	// what leads the message: "reading instance zones/z/instances/n".
	what string
	// target is the resource path a 404 must name to mean NotFound
	// ("projects/p/zones/z/instances/n"); empty: a 404 is never NotFound
	// (an insert's 404 names an image or a network that is missing).
	target string
}

// apiError is a classified API error: what was done, and the API's
// answer without its HTML or JSON body.
type apiError struct {
	what   string
	code   int
	reason string
	msg    string
	err    error
}

func (e *apiError) Error() string {
	switch {
	case e.code == 0:
		return fmt.Sprintf("%s: %v", e.what, e.err)
	case e.reason == "":
		return fmt.Sprintf("%s: HTTP %d: %s", e.what, e.code, e.msg)
	}
	return fmt.Sprintf("%s: HTTP %d %s: %s", e.what, e.code, e.reason, e.msg)
}

func (e *apiError) Unwrap() error { return e.err }

// Reasons of the API's errors[] items the provider acts on. The compute
// API fills googleapi.Error.Errors; apierror.APIError.Reason() is empty for
// its answers (the fake's TestLabelErrorDetailsAndApierrorReason), so the
// reasons are read there.
const (
	reasonNotFound          = "notFound"
	reasonAlreadyExists     = "alreadyExists"
	reasonQuotaExceeded     = "quotaExceeded"
	reasonRateLimitExceeded = "rateLimitExceeded"
	reasonUserRateLimit     = "userRateLimitExceeded"
	reasonResourceNotReady  = "resourceNotReady"
)

// classify gives an API call's error its class. nil stays nil; an error
// already classified (a credential failure) keeps its class.
func classify(err error, c call) error {
	if err == nil {
		return nil
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return &provider.Error{Class: provider.ClassOf(err), Err: &wrapped{what: c.what, err: err}}
	}
	class, e := classOf(err, c)
	return &provider.Error{Class: class, Err: e}
}

// classOf is classify's decision, with the message it goes with.
func classOf(err error, c call) (error, *apiError) {
	e := &apiError{what: c.what, err: err}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return provider.ErrTransient, e
	}
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) {
		// No answer from the API: a refused connection, DNS, TLS.
		return provider.ErrTransient, e
	}
	e.code, e.msg = gerr.Code, gerr.Message
	if len(gerr.Errors) > 0 {
		e.reason = gerr.Errors[0].Reason
		if e.msg == "" {
			e.msg = gerr.Errors[0].Message
		}
	}
	switch {
	case gerr.Code == http.StatusNotFound && len(gerr.Errors) == 0 && gerr.Message == "":
		// The front end's HTML page: no API serves the path, so the
		// endpoint is wrong. Never "instance gone".
		e.msg = "the endpoint answers 404 without an API error for this path: check the entry's endpoint"
		return provider.ErrPermanent, e
	case gerr.Code == http.StatusNotFound:
		if c.target != "" && namesTarget(e.msg, c.target) {
			return provider.ErrNotFound, e
		}
		// A 404 for something else: the project, the zone, the image.
		return provider.ErrPermanent, e
	case gerr.Code == http.StatusTooManyRequests, hasReason(gerr, reasonQuotaExceeded, reasonRateLimitExceeded, reasonUserRateLimit):
		return provider.ErrQuotaExceeded, e
	case gerr.Code == http.StatusUnauthorized:
		// Credentials rotate (the key file is re-read): latching a Proxy
		// on a 401 would outlive the cause.
		return provider.ErrTransient, e
	case gerr.Code == http.StatusBadRequest && hasReason(gerr, reasonResourceNotReady):
		// Another operation runs on the resource (trap: a 400 is not
		// always permanent).
		return provider.ErrTransient, e
	case gerr.Code == http.StatusConflict, gerr.Code == http.StatusPreconditionFailed:
		// Someone else changed it first (a name taken meanwhile, a
		// label fingerprint gone stale): read again and retry.
		return provider.ErrTransient, e
	case gerr.Code == http.StatusForbidden, gerr.Code >= 400 && gerr.Code < 500:
		// IAM, a disabled API, a refused request body: the same request is
		// refused again until somebody changes the entry or the project.
		return provider.ErrPermanent, e
	}
	return provider.ErrTransient, e
}

// namesTarget says whether a 404's message is about target. The API names
// the resource it did not find ("The resource 'projects/p/zones/z/
// instances/n' was not found"); a message naming no resource path is taken
// to be about the call's own target.
func namesTarget(msg, target string) bool {
	if !strings.Contains(msg, "projects/") {
		return true
	}
	return strings.Contains(msg, target+"'") || strings.HasSuffix(msg, target)
}

func hasReason(gerr *googleapi.Error, reasons ...string) bool {
	for _, it := range gerr.Errors {
		if slices.Contains(reasons, it.Reason) {
			return true
		}
	}
	return false
}

// isNotFound, isAlreadyExists and isNotReady test a raw API error (before
// classify) for what the caller handles itself.
func isNotFound(err error) bool {
	var gerr *googleapi.Error
	return errors.As(err, &gerr) && gerr.Code == http.StatusNotFound && hasReason(gerr, reasonNotFound)
}

func isAlreadyExists(err error) bool {
	var gerr *googleapi.Error
	return errors.As(err, &gerr) && gerr.Code == http.StatusConflict
}

// isBusy is the answer to a call on a resource another operation runs on:
// 400 resourceNotReady, or for a second delete 403 rateLimitExceeded (the
// fake's trap 4, karpenter-provider-gcp#242).
func isBusy(err error) bool {
	var gerr *googleapi.Error
	return errors.As(err, &gerr) && hasReason(gerr, reasonResourceNotReady, reasonRateLimitExceeded)
}

// Operation error codes (Operation.error.errors[].code) by class. Capacity
// and quota codes are the karpenter-provider-gcp set plus the rate codes;
// the permanent ones are a bad request that the same request repeats.
var (
	opQuotaCodes = []string{
		"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "QUOTA_EXCEEDED",
		"IP_SPACE_EXHAUSTED", "RESOURCE_OPERATION_RATE_EXCEEDED", "RATE_LIMIT_EXCEEDED",
		"REGION_RESOURCE_POOL_EXHAUSTED",
	}
	opPermanentCodes = []string{
		"RESOURCE_NOT_FOUND", "UNSUPPORTED_OPERATION", "INVALID_USAGE", "INVALID_FIELD_VALUE", "BAD_REQUEST",
		"PERMISSIONS_ERROR", "RESOURCE_ALREADY_EXISTS", "CONDITION_NOT_MET", "NOT_FOUND", "FORBIDDEN",
	}
	opTransientCodes = []string{
		"RESOURCE_NOT_READY", "INTERNAL_ERROR", "SERVICE_UNAVAILABLE", "OPERATION_CANCELED_BY_USER", "TIMEOUT",
	}
)

// opError is the failure of a finished operation, classified, or nil. It
// reads Operation.error itself: the SDK's Operation.Wait returns nil for an
// operation that has only error and no httpErrorStatusCode (the recipe's
// trap), so neither field alone is trusted.
func opError(op *computepb.Operation, what string) error {
	if op == nil || op.GetStatus() != computepb.Operation_DONE {
		return nil
	}
	items := op.GetError().GetErrors()
	status := op.GetHttpErrorStatusCode()
	if len(items) == 0 && status == 0 {
		return nil
	}
	var codes, parts []string
	for _, it := range items {
		codes = append(codes, it.GetCode())
		parts = append(parts, it.GetCode()+": "+strings.TrimSpace(it.GetMessage()))
	}
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("HTTP %d %s", status, op.GetHttpErrorMessage()))
	}
	class := opClass(codes, status)
	return provider.Errorf(class, "%s failed: %s (operation %s)", what, strings.Join(parts, "; "), op.GetName())
}

// opClass decides an operation error's class: its codes first (a quota
// answer comes with httpErrorStatusCode 403, which alone would read as
// forbidden), then the HTTP status, then the contract's default.
func opClass(codes []string, status int32) error {
	for _, set := range []struct {
		codes []string
		class error
	}{{opQuotaCodes, provider.ErrQuotaExceeded}, {opPermanentCodes, provider.ErrPermanent}, {opTransientCodes, provider.ErrTransient}} {
		for _, c := range codes {
			if slices.Contains(set.codes, c) {
				return set.class
			}
		}
	}
	switch {
	case status == http.StatusTooManyRequests:
		return provider.ErrQuotaExceeded
	case status >= 500:
		return provider.ErrTransient
	case status >= 400:
		return provider.ErrPermanent
	}
	return provider.ErrTransient
}

// opCodes lists an operation's error codes, for notes and log lines.
func opCodes(op *computepb.Operation) string {
	var codes []string
	for _, it := range op.GetError().GetErrors() {
		codes = append(codes, it.GetCode())
	}
	return strings.Join(codes, ",")
}

// reclassify gives err another class, keeping its text; for a NotFound from
// a step that must not make the reconciler think the instance is gone.
func reclassify(err, class error, why string) error {
	if err == nil {
		return nil
	}
	return provider.Errorf(class, "%s: %s", why, errText(err))
}

// wrapped prefixes an already classified error with what was being done,
// keeping its chain (a credentialError, for the Checker).
type wrapped struct {
	what string
	err  error
}

func (w *wrapped) Error() string { return w.what + ": " + errText(w.err) }
func (w *wrapped) Unwrap() error { return w.err }

// errText is an error's text without the provider's own prefix.
func errText(err error) string {
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Err != nil {
		return pe.Err.Error()
	}
	return err.Error()
}
