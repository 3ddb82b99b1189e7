package provider

import (
	"context"
	"errors"
	"fmt"
)

// The error classes. Every error a provider returns is an *Error whose class
// is one of these, so that the reconciler decides on the class alone. Test
// with errors.Is(err, provider.ErrNotFound).
var (
	// ErrNotFound: the instance does not exist (or is not ours).
	ErrNotFound = errors.New("not found")
	// ErrTransient: try again later; the default for anything unclassified.
	ErrTransient = errors.New("transient")
	// ErrPermanent: retrying the same request cannot succeed.
	ErrPermanent = errors.New("permanent")
	// ErrQuotaExceeded: the backend is out of capacity or quota; retrying
	// later may succeed, but not soon.
	ErrQuotaExceeded = errors.New("quota exceeded")
)

// Operation names, as used in errors, spans and metrics.
const (
	OpCreate = "create"
	OpGet    = "get"
	OpDelete = "delete"
	OpList   = "list"
	OpCheck  = "check"
	// The SecondaryLister's calls.
	OpListSecondary   = "list_secondary"
	OpDeleteSecondary = "delete_secondary"
)

// Error is the one error type providers return. It names the configured
// provider (not its type), the operation and the class.
type Error struct {
	Provider string
	Op       string
	Class    error
	Err      error
}

func (e *Error) Error() string {
	msg := "<nil>"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Provider == "" && e.Op == "" {
		// Not yet through the boundary (a provider's own log line, a
		// step's result): the message alone, not `provider "": : ...`.
		return msg
	}
	return fmt.Sprintf("provider %q: %s: %s", e.Provider, e.Op, msg)
}

// Unwrap exposes both the class and the cause, so that errors.Is matches the
// class and errors.As reaches the backend's own error.
func (e *Error) Unwrap() []error { return []error{e.Class, e.Err} }

// Wrap classifies err once, at the source. An err that already carries a
// class keeps it (the innermost classification wins) but gains the provider
// and operation when it had none; a nil err stays nil.
func Wrap(providerName, op string, class error, err error) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		if pe.Provider != "" && pe.Op != "" {
			return err
		}
		cp := *pe
		if cp.Provider == "" {
			cp.Provider = providerName
		}
		if cp.Op == "" {
			cp.Op = op
		}
		return &cp
	}
	if class == nil {
		class = ClassOf(err)
	}
	return &Error{Provider: providerName, Op: op, Class: class, Err: err}
}

// Errorf makes a classified error without a provider name; Wrap adds it at
// the provider's boundary.
func Errorf(class error, format string, args ...any) error {
	return &Error{Class: class, Err: fmt.Errorf(format, args...)}
}

// ClassOf returns the class of err: one of the four sentinels. Unknown errors
// and context errors are Transient.
func ClassOf(err error) error {
	for _, c := range []error{ErrNotFound, ErrPermanent, ErrQuotaExceeded, ErrTransient} {
		if errors.Is(err, c) {
			return c
		}
	}
	return ErrTransient
}

// ClassName is the class as a short label for metrics, spans and logs:
// "none" for a nil error.
func ClassName(err error) string {
	if err == nil {
		return "none"
	}
	switch ClassOf(err) {
	case ErrNotFound:
		return "NotFound"
	case ErrPermanent:
		return "Permanent"
	case ErrQuotaExceeded:
		return "QuotaExceeded"
	default:
		return "Transient"
	}
}

// CtxErr reports ctx's error as a Transient error of op, so that every
// provider ends a cancelled call the same way. The method boundary ends a
// lifecycle or owner call whose ctx ended before it began; a provider
// calls CtxErr where it meets the end of ctx itself (between steps, in
// Check, in the secondary calls).
func CtxErr(ctx context.Context, providerName, op string) error {
	if err := ctx.Err(); err != nil {
		return &Error{Provider: providerName, Op: op, Class: ErrTransient, Err: err}
	}
	return nil
}
