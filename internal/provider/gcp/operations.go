package gcp

import (
	"context"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Operations are waited for with operations.wait, which the API answers
// when the operation is DONE or after up to two minutes: one call per
// operation as a rule, instead of the SDK's Operation.Wait polling every
// second or more (and returning nil for an operation that failed with
// error alone). A wait answered early and not DONE is repeated after a
// pause that grows, so a server that returns at once is not hammered.
const (
	waitPauseMin = time.Second
	waitPauseMax = 15 * time.Second
)

// waitZoneOp waits until op (a zonal operation) is DONE and returns it as
// it ended; the caller reads its error with opError.
func waitZoneOp(ctx context.Context, api computeAPI, zone string, op *computepb.Operation, what string) (*computepb.Operation, error) {
	return waitOp(ctx, op, what, func(ctx context.Context) (*computepb.Operation, error) {
		return api.WaitZoneOperation(ctx, zone, op.GetName())
	})
}

// waitGlobalOp is waitZoneOp for a global operation (firewall rules).
func waitGlobalOp(ctx context.Context, api computeAPI, op *computepb.Operation, what string) (*computepb.Operation, error) {
	return waitOp(ctx, op, what, func(ctx context.Context) (*computepb.Operation, error) {
		return api.WaitGlobalOperation(ctx, op.GetName())
	})
}

// waitRegionOp is waitZoneOp for a regional operation (addresses).
func waitRegionOp(ctx context.Context, api computeAPI, region string, op *computepb.Operation, what string) (*computepb.Operation, error) {
	return waitOp(ctx, op, what, func(ctx context.Context) (*computepb.Operation, error) {
		return api.WaitRegionOperation(ctx, region, op.GetName())
	})
}

func waitOp(ctx context.Context, op *computepb.Operation, what string, wait func(context.Context) (*computepb.Operation, error)) (*computepb.Operation, error) {
	pause := waitPauseMin
	for op.GetStatus() != computepb.Operation_DONE {
		start := time.Now()
		next, err := wait(ctx)
		if err != nil {
			return nil, classify(err, call{what: "waiting for operation " + op.GetName() + " (" + what + ")"})
		}
		op = next
		if op.GetStatus() == computepb.Operation_DONE {
			break
		}
		if time.Since(start) < pause {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, provider.Errorf(provider.ErrTransient, "waiting for operation %s (%s): %w", op.GetName(), what, ctx.Err())
			case <-t.C:
			}
			pause = min(2*pause, waitPauseMax)
		}
	}
	return op, nil
}
