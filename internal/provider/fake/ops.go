package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// enter is every call's prologue, in the order a real provider meets
// trouble: it is counted, it may hang in the backend (Block) until released
// or ctx ends, an ended ctx is Transient, then chaos (SetChaos: its delay
// and failure), then a scripted failure.
func (p *Provider) enter(ctx context.Context, op string) error {
	p.mu.Lock()
	p.calls[op]++
	g := p.gates[op]
	p.mu.Unlock()
	if err := p.crashedErr(op); err != nil {
		return err
	}
	if g != nil {
		select {
		case <-g.ch:
		case <-ctx.Done():
		}
	}
	if err := provider.CtxErr(ctx, p.name, op); err != nil {
		return err
	}
	if err := p.applyChaos(ctx, op); err != nil {
		return err
	}
	return p.scripted(op)
}

// scripted pops the next FailNext error of op, else its SetError one.
func (p *Provider) scripted(op string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.persistent[op]
	if q := p.queued[op]; len(q) > 0 {
		err, p.queued[op] = q[0], q[1:]
	}
	if err == nil {
		return nil
	}
	return p.fail(op, provider.ClassOf(err), fmt.Errorf("fake: scripted failure: %w", err))
}

// fail classifies err at the provider's boundary with its configured name.
func (p *Provider) fail(op string, class, err error) error {
	return provider.Wrap(p.name, op, class, err)
}

func (p *Provider) log(ctx context.Context) logr.Logger {
	return logr.FromContextOrDiscard(ctx).WithName("fake").WithValues("provider", p.name)
}

// Create makes the instance named req.Name or adopts ours (see
// provider.CheckAdoption); an adopted instance whose UID mark is empty gets
// req.UID written, and a Stopped one is started. Requests with an invalid
// name or no UID are Permanent, so reconciler bugs surface here rather than
// on a real backend; a full address pool is QuotaExceeded.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	p.mu.Lock()
	p.createRequests = append(p.createRequests, req)
	p.mu.Unlock()
	log := p.log(ctx).WithValues("name", req.Name)
	if err := p.enter(ctx, provider.OpCreate); err != nil {
		log.V(1).Info("fake create failed", "error", err.Error())
		return provider.Instance{}, err
	}
	if errs := validation.IsDNS1035Label(req.Name); len(errs) > 0 {
		return provider.Instance{}, p.fail(provider.OpCreate, provider.ErrPermanent,
			fmt.Errorf("invalid instance name %q: %s", req.Name, strings.Join(errs, "; ")))
	}
	if req.UID == "" {
		return provider.Instance{}, p.fail(provider.OpCreate, provider.ErrPermanent, errors.New("request has no UID"))
	}
	if a := req.StaticAddress; a != nil && (!a.Address.IsValid() || !a.Address.Addr().IsGlobalUnicast()) {
		return provider.Instance{}, p.fail(provider.OpCreate, provider.ErrPermanent,
			fmt.Errorf("staticAddress.address %s: not a unicast address with a prefix length", a.Address))
	}

	unlock, err := p.lockName(ctx, provider.OpCreate, req.Name)
	if err != nil {
		return provider.Instance{}, err
	}
	defer unlock()
	if inst, done, err := p.createInFlight(req); done {
		return inst, err
	}

	p.mu.Lock()
	startGets := p.provisioningGets
	p.mu.Unlock()
	hold := p.takeHold(req)
	inst, adopted, pending, err := p.backend.create(req, p.installation, startGets, hold != nil)
	if hold != nil && (err != nil || !pending) {
		p.rearm(hold) // no step to hold
	}
	if err != nil {
		log.V(1).Info("fake create refused", "error", err.Error())
		return provider.Instance{}, p.fail(provider.OpCreate, nil, err)
	}
	if pending {
		log.V(1).Info("fake create step started", "adopted", adopted, "cloudInitBytes", req.CloudInit.Len())
		return p.startHeld(ctx, req, startGets, hold)
	}
	log.V(1).Info("fake instance ensured", "adopted", adopted, "state", inst.State, "cloudInitBytes", req.CloudInit.Len())
	return inst, nil
}

// create is Create's backend half, atomic under the backend's lock. held
// says a HoldCreate waits for this Create: a new instance is then made
// unfinished, and pending says a step must finish it; without a hold an
// unfinished instance is finished at once.
func (b *Backend) create(req provider.CreateRequest, installation string, startGets int, held bool) (inst provider.Instance, adopted, pending bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if in, ok := b.instances[req.Name]; ok {
		verdict := provider.RefuseUnmarked
		if in.Marks != nil {
			verdict = provider.CheckAdoption(*in.Marks, installation, req.UID)
		}
		if err := provider.AdoptionError(verdict, req.Name); err != nil {
			return provider.Instance{}, false, false, err
		}
		if in.Deleting {
			return provider.Instance{}, false, false, provider.Errorf(provider.ErrTransient, "instance %q is being deleted", req.Name)
		}
		if in.Marks.UID == "" {
			in.Marks.UID = req.UID
		}
		if in.createPending {
			if held {
				return in.view(), true, true, nil
			}
			// Resumed with nothing slow left: finished now.
			in.createPending = false
			in.start(startGets)
			return in.view(), true, false, nil
		}
		if in.State == provider.StateStopped {
			in.start(startGets)
		}
		return in.view(), true, false, nil
	}
	ip, ok := b.addressLocked(req.StaticAddress)
	if !ok {
		return provider.Instance{}, false, false, provider.Errorf(provider.ErrQuotaExceeded, "no free address in %s/24", ipPool)
	}
	in := &instance{Record: Record{
		Name:          req.Name,
		Marks:         &provider.Marks{Managed: true, UID: req.UID, Installation: installation},
		IP:            ip,
		StaticAddress: copyStaticAddress(req.StaticAddress),
		CreatedAt:     b.now(),
		Serving:       b.createdServing,
	}}
	if held {
		in.State, in.createPending = provider.StateProvisioning, true
		b.instances[req.Name] = in
		return in.view(), false, true, nil
	}
	in.start(startGets)
	b.instances[req.Name] = in
	return in.view(), false, false, nil
}

// start begins a (re)start: Running at once, or after n Gets of
// Provisioning.
func (in *instance) start(n int) {
	if n == 0 {
		in.State, in.starting, in.pendingGets = provider.StateRunning, false, 0
		return
	}
	in.State, in.starting, in.pendingGets = provider.StateProvisioning, true, n
}

// Get reads the instance; one that is gone, or no longer ours, is NotFound.
// Each Get advances the scripted countdowns (SetProvisioningGets,
// SetDeleteReturnsEarly).
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	log := p.log(ctx).WithValues("id", id)
	if err := p.enter(ctx, provider.OpGet); err != nil {
		log.V(1).Info("fake get failed", "error", err.Error())
		return provider.Instance{}, err
	}
	name, err := parseID(id)
	if err != nil {
		return provider.Instance{}, p.fail(provider.OpGet, nil, err)
	}
	if inst, done, err := p.getInFlight(name); done {
		return inst, err
	}
	inst, err := p.backend.get(name, p.installation)
	if err != nil {
		return provider.Instance{}, p.fail(provider.OpGet, nil, err)
	}
	log.V(1).Info("fake instance read", "state", inst.State)
	return inst, nil
}

func (b *Backend) get(name, installation string) (provider.Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[name]
	if !ok || !in.ours(installation) {
		return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "instance %q not found", name)
	}
	switch {
	case in.Deleting && in.deletingGets == 0:
		delete(b.instances, name)
		return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "instance %q not found", name)
	case in.Deleting:
		in.deletingGets--
	case in.starting && in.pendingGets == 0:
		in.State, in.starting = provider.StateRunning, false
	case in.starting:
		in.pendingGets--
	}
	return in.view(), nil
}

// Delete removes our instance; one that is gone, or not ours, is left alone
// and the call succeeds (ours is gone either way). With
// SetDeleteReturnsEarly it only starts the removal.
func (p *Provider) Delete(ctx context.Context, id string) error {
	log := p.log(ctx).WithValues("id", id)
	if err := p.enter(ctx, provider.OpDelete); err != nil {
		log.V(1).Info("fake delete failed", "error", err.Error())
		return err
	}
	name, err := parseID(id)
	if err != nil {
		return p.fail(provider.OpDelete, nil, err)
	}
	unlock, err := p.lockName(ctx, provider.OpDelete, name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := p.cancelInFlight(ctx, name); err != nil {
		return err
	}
	p.mu.Lock()
	early := p.deletingGets
	p.mu.Unlock()
	outcome := p.backend.delete(name, p.installation, early)
	p.backend.deleteSecondariesOf(name, p.installation)
	log.V(1).Info("fake delete", "outcome", outcome)
	return nil
}

// delete is Delete's backend half; it says what it did, for the log.
func (b *Backend) delete(name, installation string, deletingGets int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[name]
	switch {
	case !ok:
		return "already gone"
	case !in.ours(installation):
		return "not ours, left alone"
	case in.Deleting:
		return "already deleting"
	case deletingGets > 0:
		in.Deleting, in.deletingGets = true, deletingGets
		in.State, in.starting = provider.StateTerminated, false
		return "deleting"
	default:
		delete(b.instances, name)
		return "deleted"
	}
}

// ListByTag returns this installation's marked instances, deleting ones
// included (the backend still holds them), sorted by name, with ID, UID
// and CreatedAt only, as the contract allows.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	log := p.log(ctx)
	if err := p.enter(ctx, provider.OpList); err != nil {
		log.V(1).Info("fake list failed", "error", err.Error())
		return nil, err
	}
	var out []provider.Instance
	for _, r := range p.backend.Records() {
		if r.Marks != nil && r.Marks.Managed && r.Marks.Installation == p.installation {
			out = append(out, provider.Instance{ID: ID(r.Name), UID: r.Marks.UID, CreatedAt: r.CreatedAt})
		}
	}
	log.V(1).Info("fake instances listed", "count", len(out))
	return out, nil
}

// Check reports SetCheckResult's result; a held call whose ctx ended is a
// Timeout and a scripted failure an APIError, never Healthy.
func (p *Provider) Check(ctx context.Context) provider.CheckResult {
	if err := p.enter(ctx, provider.OpCheck); err != nil {
		reason := provider.ReasonAPIError
		if ctx.Err() != nil {
			reason = provider.ReasonTimeout
		}
		return provider.CheckResult{Healthy: false, Reason: reason, Message: err.Error(), Target: "fake", Address: "in-memory"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.checkResult
	r.Details = maps.Clone(r.Details)
	return r
}
