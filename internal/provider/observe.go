package provider

import (
	"context"

	"github.com/go-logr/logr"
)

// Logger is the logger every provider logs with: the ctx's (so lines carry
// the reconcile's values and the trace IDs), named after the provider type
// and tagged with the configured name.
func Logger(ctx context.Context, providerType, name string) logr.Logger {
	return logr.FromContextOrDiscard(ctx).WithName(providerType).WithValues("provider", name)
}

// LogOutcome writes the one V(1) line that ends operation op, with the
// error's class when it failed.
func LogOutcome(log logr.Logger, op string, err error, kv ...any) {
	if err != nil {
		log.V(1).Info(op+" failed", append(kv, "class", ClassName(err), "error", err.Error())...)
		return
	}
	log.V(1).Info(op+" done", kv...)
}
