package gcp

import (
	"context"
	"errors"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Delete removes the instance, then its firewall rule. It returns early
// (profile delete-return: returns-early): the first call cancels the
// create step in flight (so none inserts what is being deleted), reads the
// instance and submits one delete operation, kept by name; the following
// calls read that operation instead of submitting another (the seeds
// submitted one per poll, and overlapping deletes draw 403
// rateLimitExceeded), report its failure with its class, and once the
// instance is gone delete the rule. The delete's request ID is derived from
// the instance, so a Delete after a restart meets the operation already
// running. What is already gone is fine; an instance under the name that is
// not this installation's is left alone.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if err := provider.CtxErr(ctx, p.name, provider.OpDelete); err != nil {
		return err
	}
	zone, name, err := parseID(id)
	if err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("zone", zone, "name", name)
	ctx = withOp(logr.NewContext(ctx, log), provider.OpDelete)
	ctx, cancel := context.WithTimeout(ctx, foregroundBound)
	defer cancel()
	unlock, err := p.names.Lock(ctx, name)
	if err != nil {
		return provider.Errorf(provider.ErrTransient, "waiting for another call on instance %s: %w", name, err)
	}
	defer unlock()
	if err := p.steps.Cancel(ctx, name); err != nil {
		return err
	}
	p.forgetInsert(name)
	api, err := p.client()
	if err != nil {
		return err
	}
	if d, ok := p.deleteInFlight(name); ok {
		op, err := api.GetZoneOperation(ctx, d.zone, d.op)
		if err != nil {
			return classify(err, call{what: "reading the delete operation of instance " + id})
		}
		if op.GetStatus() != computepb.Operation_DONE {
			log.V(1).Info("gcp delete still running; not submitted again", "operation", d.op)
			provider.Note(ctx, "deleted", "running")
			return nil
		}
		p.forgetDelete(name)
		if err := opError(op, "delete of instance "+id); err != nil {
			log.V(1).Info("gcp delete failed", "operation", d.op, "codes", opCodes(op))
			return reclassify(err, notFoundIsTransient(err), "deleting instance "+id)
		}
	}
	in, err := api.GetInstance(ctx, zone, name)
	if err != nil {
		err = classify(err, call{what: "reading instance " + id, target: p.instanceTarget(zone, name)})
		if errors.Is(err, provider.ErrNotFound) {
			provider.Note(ctx, "deleted", "gone")
			return p.removeRule(ctx, api, name)
		}
		return err
	}
	if m := provider.MarksFromLabels(in.GetLabels()); !m.Managed || m.Installation != p.opts.InstallationID {
		log.Info("gcp instance under the instance's name is not this installation's: left alone")
		return p.removeRule(ctx, api, name)
	}
	attempt := 0
	for {
		requestID := deleteRequestID(p.opts.InstallationID, p.cfg.Project, zone, name, in.GetId(), attempt)
		op, err := api.DeleteInstance(ctx, zone, name, requestID)
		switch {
		case err != nil && isNotFound(err):
			return p.removeRule(ctx, api, name)
		case err != nil && isBusy(err):
			// Another operation runs on it: its insert (a create step
			// cancelled after the insert was accepted), a stop, or a
			// delete from before a restart under another request ID.
			return provider.Errorf(provider.ErrTransient,
				"instance %s is busy with another operation (being created, stopped or deleted); Delete tries again: %s", id, errText(classify(err, call{what: "deleting"})))
		case err != nil:
			return classify(err, call{what: "deleting instance " + id})
		}
		if op.GetStatus() == computepb.Operation_DONE {
			// A replayed request ID: a delete of this instance that ended.
			if oerr := opError(op, "delete of instance "+id); oerr != nil && attempt < 3 {
				attempt++
				continue
			}
			return nil
		}
		p.trackDelete(name, deleteMemo{zone: zone, op: op.GetName()})
		log.V(1).Info("gcp delete submitted", "operation", op.GetName(), "requestId", requestID)
		provider.Note(ctx, "deleted", "submitted")
		return nil
	}
}
