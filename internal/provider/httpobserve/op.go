package httpobserve

import "context"

// The operation a request serves rides on its ctx, for the providers' wire
// logs and their tests' fault seams: the lifecycle ops (provider.Op*) for
// what a caller waits for, and these for the background steps, so that a
// fault meant for a call's own request is not taken by a step running
// meanwhile.
const (
	OpCreateStep = "create.step"
	OpDeleteStep = "delete.step"
)

type opKey struct{}

// WithOp records the provider operation the requests made with ctx serve.
func WithOp(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

// OpOf is the operation WithOp recorded, "" if none.
func OpOf(ctx context.Context) string {
	op, _ := ctx.Value(opKey{}).(string)
	return op
}
