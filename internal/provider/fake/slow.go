package fake

import (
	"context"
	"fmt"
	"sync"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/inflight"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/keyedlock"
)

// The slow mode: a Create whose backend step is slow, as a VM provider's
// image download or clone task is, run the way the contract asks of one
// (docs/provider-contract.md §5) and on the same leaves a VM provider uses:
// Create and Delete of one name are serialised by a keyedlock.Locks, and
// the held step runs in an inflight.Table. While the step is held the
// instance exists in the backend unfinished (ListByTag lists it), Create
// and Get report it Provisioning with the step's progress, and a failure
// of the step is the next Create's or Get's error. An unfinished instance
// that no step is advancing (its step failed, or its provider crashed)
// reads Stopped, so the reconciler calls Create, which resumes it. Delete
// cancels the step and waits for it before it removes anything; the step
// ensures the instance (makes it when missing), so a step that outlived a
// Delete would re-create it, as a real one would.

// defaultHoldProgress is what a held step reports until the test says
// otherwise.
const defaultHoldProgress = "fake: create step held"

// interruptedProgress is the detail of an unfinished instance that no step
// is advancing.
const interruptedProgress = "create interrupted: Create resumes it"

// slowMode is a Provider's slow-create state. The zero value is ready.
type slowMode struct {
	names keyedlock.Locks

	mu      sync.Mutex
	steps   *inflight.Table
	armed   []*CreateHold
	live    map[*CreateHold]string // held steps in flight, by instance name
	crashed bool
}

// table returns the steps table, made on first use.
func (s *slowMode) table() *inflight.Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.steps == nil {
		s.steps = inflight.New(provider.OpCreate)
	}
	return s.steps
}

// CreateHold is one held create step: the test drives it with Progress
// and Release, and waits for it with Started and Done.
type CreateHold struct {
	match func(provider.CreateRequest) bool

	mu       sync.Mutex
	detail   string
	report   func(string)
	result   error
	released chan struct{}
	started  chan struct{}
	done     chan struct{}
	once     struct{ release, start, end sync.Once }
}

func newHold(match func(provider.CreateRequest) bool) *CreateHold {
	return &CreateHold{
		match: match, detail: defaultHoldProgress,
		released: make(chan struct{}), started: make(chan struct{}), done: make(chan struct{}),
	}
}

// HoldCreate makes the slow step of the next Create of the instance named
// name hang until the hold is released: that Create makes the instance
// unfinished (or takes over an unfinished one), starts the step in the
// background and returns at once, Provisioning with the hold's progress.
// The hold is taken by one Create only; a Create of an instance that needs
// no step (it is finished) leaves it armed. Reset releases every hold.
func (p *Provider) HoldCreate(name string) *CreateHold {
	return p.HoldCreateWhere(func(req provider.CreateRequest) bool { return req.Name == name })
}

// HoldCreateWhere is HoldCreate for the first Create whose request match
// accepts, for tests that know the Proxy but not yet its instance name
// (match on req.ProxyName).
func (p *Provider) HoldCreateWhere(match func(provider.CreateRequest) bool) *CreateHold {
	h := newHold(match)
	p.slow.mu.Lock()
	defer p.slow.mu.Unlock()
	p.slow.armed = append(p.slow.armed, h)
	return h
}

// Progress sets what the held step reports; Get shows it from then on.
func (h *CreateHold) Progress(detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.detail = detail
	if h.report != nil {
		h.report(detail)
	}
}

// Release ends the hold: nil lets the step finish the instance (Running,
// or Provisioning for SetProvisioningGets more Gets), an error makes the
// step fail with the error's class (a bare provider.ErrQuotaExceeded counts
// as classed; anything else is Transient), as FailNext does. Only the first
// call counts.
func (h *CreateHold) Release(err error) {
	h.once.release.Do(func() {
		h.mu.Lock()
		h.result = err
		h.mu.Unlock()
		close(h.released)
	})
}

// Started is closed once a Create took the hold and its step began.
func (h *CreateHold) Started() <-chan struct{} { return h.started }

// Done is closed once the held step ended: released, failed, or cancelled
// (by Delete or Crash).
func (h *CreateHold) Done() <-chan struct{} { return h.done }

// Crash stops the provider as a killed operator process stops: every step
// in flight ends where it is (the backend keeps the unfinished instance),
// armed holds are forgotten, and every call from then on is Transient. A
// test then builds a fresh Provider over the same Backend, as a restarted
// operator would.
func (p *Provider) Crash() {
	p.slow.mu.Lock()
	p.slow.crashed = true
	p.slow.armed = nil
	p.slow.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), inflight.StopBound)
	defer cancel()
	_ = p.slow.table().Close(ctx) // the held steps all honour their ctx
	p.endHolds(func(string) bool { return true })
}

// crashedErr is what every call of a crashed provider returns.
func (p *Provider) crashedErr(op string) error {
	p.slow.mu.Lock()
	defer p.slow.mu.Unlock()
	if !p.slow.crashed {
		return nil
	}
	return p.fail(op, provider.ErrTransient, fmt.Errorf("fake: provider crashed"))
}

// releaseHolds releases every hold, armed or in flight, for Reset.
func (p *Provider) releaseHolds() {
	p.slow.mu.Lock()
	holds := append([]*CreateHold(nil), p.slow.armed...)
	for h := range p.slow.live {
		holds = append(holds, h) // their Done closes when the table shows the result
	}
	p.slow.armed = nil
	p.slow.mu.Unlock()
	for _, h := range holds {
		h.Release(nil)
	}
}

// takeHold disarms and returns the first hold that matches req, if any.
func (p *Provider) takeHold(req provider.CreateRequest) *CreateHold {
	p.slow.mu.Lock()
	defer p.slow.mu.Unlock()
	for i, h := range p.slow.armed {
		if h.match(req) {
			p.slow.armed = append(p.slow.armed[:i:i], p.slow.armed[i+1:]...)
			return h
		}
	}
	return nil
}

// rearm puts back a hold that a Create took but did not need.
func (p *Provider) rearm(h *CreateHold) {
	p.slow.mu.Lock()
	defer p.slow.mu.Unlock()
	p.slow.armed = append([]*CreateHold{h}, p.slow.armed...)
}

// lockName takes name's lock for Create or Delete; an ended ctx is
// Transient.
func (p *Provider) lockName(ctx context.Context, op, name string) (func(), error) {
	unlock, err := p.slow.names.Lock(ctx, name)
	if err != nil {
		return nil, p.fail(op, provider.ErrTransient, err)
	}
	return unlock, nil
}

// createInFlight is the start of Create under the name's lock: a step in
// flight for the name is joined (Provisioning with its progress), a step
// that failed is this Create's error; done is false when neither.
func (p *Provider) createInFlight(req provider.CreateRequest) (provider.Instance, bool, error) {
	st := p.slow.table().Poll(req.Name)
	switch {
	case st.Err != nil:
		return provider.Instance{}, true, p.fail(provider.OpCreate, nil, st.Err)
	case st.Running:
		return p.provisioning(req.Name, st.Progress), true, nil
	}
	return provider.Instance{}, false, nil
}

// getInFlight is Get's view of the table: the running step's progress, or
// its failure, handed over once; done is false when neither.
func (p *Provider) getInFlight(name string) (provider.Instance, bool, error) {
	st := p.slow.table().Poll(name)
	switch {
	case st.Err != nil:
		return provider.Instance{}, true, p.fail(provider.OpGet, nil, st.Err)
	case st.Running:
		return p.provisioning(name, st.Progress), true, nil
	}
	return provider.Instance{}, false, nil
}

// provisioning is the instance named name as reported while its step
// runs: what the backend holds, Provisioning, with progress. An instance
// removed behind the step's back is still reported: the step makes it.
func (p *Provider) provisioning(name, progress string) provider.Instance {
	inst := provider.Instance{ID: ID(name)}
	if r, ok := p.backend.Lookup(name); ok && r.Marks != nil {
		inst.UID, inst.CreatedAt = r.Marks.UID, r.CreatedAt
	}
	inst.State, inst.Progress = provider.StateProvisioning, progress
	return inst
}

// startHeld starts the held step of req's instance, which the backend now
// holds unfinished, and reports it Provisioning.
func (p *Provider) startHeld(ctx context.Context, req provider.CreateRequest, startGets int, h *CreateHold) (provider.Instance, error) {
	p.slow.mu.Lock()
	if p.slow.live == nil {
		p.slow.live = map[*CreateHold]string{}
	}
	p.slow.live[h] = req.Name
	p.slow.mu.Unlock()
	st, err := p.slow.table().Start(ctx, req.Name, h.progress(), func(ctx context.Context, report func(string)) error {
		return p.runHeld(ctx, req, startGets, h, report)
	})
	switch {
	case err != nil:
		p.endHold(h)
		return provider.Instance{}, p.fail(provider.OpCreate, nil, err)
	case st.Err != nil:
		p.endHold(h)
		return provider.Instance{}, p.fail(provider.OpCreate, nil, st.Err)
	}
	// Done once the table shows the step's result, not merely once the
	// step returned, so a test that waits for it sees what a Get would.
	go func() { <-st.Done; p.endHold(h) }()
	return p.provisioning(req.Name, st.Progress), nil
}

// endHold forgets a hold whose step has ended and closes its Done.
func (p *Provider) endHold(h *CreateHold) {
	p.slow.mu.Lock()
	delete(p.slow.live, h)
	p.slow.mu.Unlock()
	h.once.end.Do(func() { close(h.done) })
}

// runHeld is the held step: it waits for Release (or its ctx), then
// ensures the instance is finished, as an idempotent real step would.
func (p *Provider) runHeld(ctx context.Context, req provider.CreateRequest, startGets int, h *CreateHold, report func(string)) error {
	h.mu.Lock()
	// What Progress said before the step began counts too; under h.mu, so
	// a later Progress is never overwritten by an earlier detail.
	h.report = report
	report(h.detail)
	h.mu.Unlock()
	h.once.start.Do(func() { close(h.started) })
	select {
	case <-h.released:
	case <-ctx.Done():
		return ctx.Err()
	}
	h.mu.Lock()
	result := h.result
	h.mu.Unlock()
	if result != nil {
		return provider.Errorf(provider.ClassOf(result), "fake: held create step failed: %w", result)
	}
	return p.backend.finishCreate(req, p.installation, startGets)
}

func (h *CreateHold) progress() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.detail
}

// cancelInFlight is Delete's first act under the name's lock: the create
// step of the name is cancelled and has stopped before anything is
// removed.
func (p *Provider) cancelInFlight(ctx context.Context, name string) error {
	if err := p.slow.table().Cancel(ctx, name); err != nil {
		return p.fail(provider.OpDelete, nil, err)
	}
	p.endHolds(func(n string) bool { return n == name })
	return nil
}

// endHolds ends, at once, the live holds of the names match accepts, whose
// steps the table has stopped: their Done is closed by the time Delete or
// Crash returns.
func (p *Provider) endHolds(match func(name string) bool) {
	p.slow.mu.Lock()
	var ended []*CreateHold
	for h, name := range p.slow.live {
		if match(name) {
			ended = append(ended, h)
		}
	}
	p.slow.mu.Unlock()
	for _, h := range ended {
		p.endHold(h)
	}
}

// finishCreate is the held step's backend half: it ensures the instance
// exists, ours, and finished (making it again when it vanished), atomic
// under the backend's lock.
func (b *Backend) finishCreate(req provider.CreateRequest, installation string, startGets int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[req.Name]
	if !ok {
		ip, free := b.addressLocked(req.StaticAddress)
		if !free {
			return provider.Errorf(provider.ErrQuotaExceeded, "no free address in %s/24", ipPool)
		}
		in = &instance{Record: Record{
			Name:          req.Name,
			Marks:         &provider.Marks{Managed: true, UID: req.UID, Installation: installation},
			IP:            ip,
			StaticAddress: copyStaticAddress(req.StaticAddress),
			CreatedAt:     b.now(),
		}}
		b.instances[req.Name] = in
		in.start(startGets)
		return nil
	}
	verdict := provider.RefuseUnmarked
	if in.Marks != nil {
		verdict = provider.CheckAdoption(*in.Marks, installation, req.UID)
	}
	if err := provider.AdoptionError(verdict, req.Name); err != nil {
		return err
	}
	if in.Deleting {
		return provider.Errorf(provider.ErrTransient, "instance %q is being deleted", req.Name)
	}
	if in.createPending {
		in.createPending = false
		if in.IP == "" {
			in.IP, _ = b.addressLocked(in.StaticAddress)
		}
		in.start(startGets)
	}
	return nil
}
