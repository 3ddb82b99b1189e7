package gcp

import (
	"context"
	"errors"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Progress of a delete step.
const progressDeleting = "delete operation running"

// foregroundRuleWait is how long Delete's foreground waits for a rule's
// delete operation (the rest is the collector's, should it not end).
const foregroundRuleWait = 2 * time.Second

// foregroundInsertWait is how long Delete's foreground waits for the insert
// of the create step it cancelled (meetInsert); the rest of
// foregroundBound is the delete's.
const foregroundInsertWait = 5 * time.Second

// Delete removes the instance, then its firewall rule. It returns early
// (profile delete-return: returns-early): it cancels the create step in
// flight (so none inserts what is being deleted), waits for an insert the
// cancelled step had sent (meetInsert), reads the instance, submits
// one delete operation and follows it in the background (the
// delete step), which deletes the rule once the instance is gone. While
// that step runs, Delete submits nothing more (the earlier providers submitted a
// delete on every poll, and overlapping deletes draw 403
// rateLimitExceeded); a delete that failed is the next Delete's error, with
// its class, once. The delete's request ID is derived from the instance,
// so a Delete after a restart meets the operation already running instead
// of starting a second. What is already gone is fine (its rule is deleted
// then); an instance under the name that is not this installation's is left
// alone.
func (p *Provider) Delete(ctx context.Context, id string) error {
	zone, name, err := parseID(id)
	if err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("zone", zone, "name", name)
	ctx = httpobserve.WithOp(logr.NewContext(ctx, log), provider.OpDelete)
	fg, cancel := context.WithTimeout(ctx, foregroundBound)
	defer cancel()
	unlock, err := p.names.Lock(fg, name)
	if err != nil {
		return provider.Errorf(provider.ErrTransient, "waiting for another call on instance %s: %w", name, err)
	}
	defer unlock()
	if err := p.steps.Cancel(fg, name); err != nil {
		return err
	}
	p.forgetInsert(name)
	sent, inserting := p.sentInserts.Get(name)
	p.sentInserts.Remove(name)
	switch st := p.deleting.Poll(name); {
	case st.Err != nil:
		return st.Err
	case st.Running:
		log.V(1).Info("gcp delete still running; not submitted again")
		provider.Note(ctx, "deleted", "running")
		return nil
	}
	api, err := p.client()
	if err != nil {
		return err
	}
	if inserting {
		// Before the read: the API may have accepted the insert and not
		// show the instance yet, and a Delete that read "not found" then
		// would leave it running for good.
		p.meetInsert(fg, api, zone, name, sent)
	}
	in, err := api.GetInstance(fg, zone, name)
	if err != nil {
		err = classify(err, call{what: "reading instance " + id, target: p.instanceTarget(zone, name)})
		if errors.Is(err, provider.ErrNotFound) {
			provider.Note(ctx, "deleted", "gone")
			return p.removeRule(fg, api, name, foregroundRuleWait)
		}
		return err
	}
	if m := provider.MarksFromLabels(in.GetLabels()); !m.Managed || m.Installation != p.opts.InstallationID {
		log.Info("gcp instance under the instance's name is not this installation's: left alone")
		return p.removeRule(fg, api, name, foregroundRuleWait)
	}
	op, err := p.submitDelete(fg, api, zone, name, in.GetId())
	if err != nil || op == nil {
		return err
	}
	log.V(1).Info("gcp delete submitted", "operation", op.GetName())
	provider.Note(ctx, "deleted", "submitted")
	_, err = p.deleting.Start(ctx, name, progressDeleting, func(ctx context.Context, _ func(string)) error {
		return p.deleteStep(httpobserve.WithOp(ctx, httpobserve.OpDeleteStep), api, zone, name, op)
	})
	return err
}

// meetInsert waits, at most foregroundInsertWait, for the insert that the
// create step this Delete cancelled had sent: the API may have accepted it
// (its answer lost to the cancellation, or its operation not followed to
// the end), and refuses to delete an instance its insert is still making
// (400 resourceNotReady), which would leave a Proxy deleted right after
// its creation waiting out the reconciler's backoff. The insert sent again
// under its request ID is answered with its operation; it inserts nothing
// new, as the instance exists (409: the instance is another insert's, and
// there is nothing to wait for). An insert not met is the next Delete's to
// meet, and this one goes on: a delete that meets it running is Transient.
func (p *Provider) meetInsert(ctx context.Context, api computeAPI, zone, name string, sent sentInsert) {
	what := "insert of instance " + formatID(zone, name)
	op, err := api.InsertInstance(ctx, zone, sent.body, sent.requestID)
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, foregroundInsertWait)
		defer cancel()
		op, err = waitZoneOp(wctx, api, zone, op, what)
	}
	log := logr.FromContextOrDiscard(ctx)
	switch {
	case err == nil:
		log.V(1).Info("gcp insert of the cancelled create step met and ended", "operation", op.GetName())
	case !isAlreadyExists(err):
		p.sentInserts.Add(name, sent)
		log.V(1).Info("gcp insert of the cancelled create step not met", "error", errText(err))
	}
}

// submitDelete submits the instance's delete under its request ID; nil
// operation and nil error mean the instance is gone already. A replayed
// request ID whose operation failed moves to the next attempt.
func (p *Provider) submitDelete(ctx context.Context, api computeAPI, zone, name string, instanceID uint64) (*computepb.Operation, error) {
	id := formatID(zone, name)
	for attempt := 0; ; attempt++ {
		requestID := deleteRequestID(p.opts.InstallationID, p.cfg.Project, zone, name, instanceID, attempt)
		op, err := api.DeleteInstance(ctx, zone, name, requestID)
		switch {
		case err != nil && isNotFound(err):
			return nil, p.removeRule(ctx, api, name, foregroundRuleWait)
		case err != nil && isBusy(err):
			// Another operation runs on it: its insert (a create step
			// cancelled after the insert was accepted), a stop, or a
			// delete from before a restart under another request ID.
			return nil, provider.Errorf(provider.ErrTransient,
				"instance %s is busy with another operation (being created, stopped or deleted); Delete tries again: %s", id, errText(classify(err, call{what: "deleting"})))
		case err != nil:
			return nil, classify(err, call{what: "deleting instance " + id})
		}
		if op.GetStatus() != computepb.Operation_DONE {
			return op, nil
		}
		// A replayed request ID: a delete of this instance that ended.
		if opError(op, "delete") == nil || attempt >= 3 {
			return op, nil
		}
	}
}

// deleteStep follows the delete operation to its end and then deletes the
// instance's firewall rule: the rule goes after the instance. A failed
// delete is the next Delete's error; the rule stays with its instance.
func (p *Provider) deleteStep(ctx context.Context, api computeAPI, zone, name string, op *computepb.Operation) error {
	what := "delete of instance " + formatID(zone, name)
	op, err := waitZoneOp(ctx, api, zone, op, what)
	if err != nil {
		return reclassify(err, notFoundIsTransient(err), "following the "+what)
	}
	if err := opError(op, what); err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("gcp delete failed", "operation", op.GetName(), "codes", opCodes(op))
		return reclassify(err, notFoundIsTransient(err), "deleting instance "+name)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("gcp instance deleted", "operation", op.GetName())
	return p.removeRule(ctx, api, name, 0)
}
