package provider

import (
	"context"
	"net/netip"
	"sync"

	"github.com/go-logr/logr"
)

// Bounded is a provider behind the method boundary, one wrapper for each
// interface it implements: Checker, Secondary, Owned and Users are nil
// when the provider is not one. The pieces stay apart, as registry.Entry keeps them,
// so that nobody asserts an optional interface on Provider and no wrapper
// exists for a combination of them.
type Bounded struct {
	Provider  Provider
	Checker   Checker
	Secondary SecondaryLister
	Owned     OwnerLister
	Users     UsersUpdater
	Mover     EgressAddressMover
	Fronter   GroupFronter
	Peers     GroupPeersUpdater
}

// WithBoundary puts p behind the one method boundary every provider call
// crosses, so that no provider repeats it. Around each call it
//
//   - gives the call a ctx whose logger is ctx's own (the reconcile's values,
//     the span's IDs), named after providerType and tagged provider=<name>
//     and the call's key (name for Create, id for Get, Delete and
//     DeleteSecondary and UpdateUsers, uid for the OwnerLister's calls): the provider logs
//     its own detail with logr.FromContextOrDiscard(ctx);
//   - ends a lifecycle or owner call whose ctx has already ended before it
//     reaches the provider, with ctx's error (Transient), as every provider
//     did first thing;
//   - wraps the error with the configured name and the operation (Wrap keeps
//     a class decided at the source; an unclassified error is Transient),
//     and returns the zero Instance with it;
//   - writes one V(1) outcome line, "<op> done" with the Instance's ID,
//     State and IP and whatever the provider noted with Note, or
//     "<op> failed" with the notes, the class and the error.
//
// Unwrap reaches p from the result's Provider. The registry applies it to
// every entry it builds (under the telemetry decorators, so outcome lines
// carry the span's IDs), and the conformance suite to every provider it
// tests, so both exercise the same path.
func WithBoundary(name, providerType string, p Provider) Bounded {
	at := configured{name: name, typ: providerType}
	_, moves := p.(EgressAddressMover)
	b := Bounded{Provider: &boundary{configured: at, inner: p, keepsEgressAddress: moves}}
	if c, ok := p.(Checker); ok {
		b.Checker = checkBoundary{configured: at, inner: c}
	}
	if s, ok := p.(SecondaryLister); ok {
		b.Secondary = secondaryBoundary{configured: at, inner: s}
	}
	if o, ok := p.(OwnerLister); ok {
		b.Owned = ownerBoundary{configured: at, inner: o}
	}
	if u, ok := p.(UsersUpdater); ok {
		b.Users = usersBoundary{configured: at, inner: u}
	}
	if m, ok := p.(EgressAddressMover); ok {
		b.Mover = moverBoundary{configured: at, inner: m}
	}
	if f, ok := p.(GroupFronter); ok {
		b.Fronter = fronterBoundary{configured: at, inner: f}
	}
	if u, ok := p.(GroupPeersUpdater); ok {
		b.Peers = peersBoundary{configured: at, inner: u}
	}
	return b
}

// Note adds key/value pairs to the outcome line of the provider call that
// ctx belongs to (for example "outcome", "adopted"). Outside a boundary it
// does nothing. Values are logged: never note a secret.
func Note(ctx context.Context, kv ...any) {
	if n, ok := ctx.Value(notesKey{}).(*notes); ok {
		n.add(kv)
	}
}

// Unwrap returns the provider under every layer that wraps one (the
// boundary, the registry's and telemetry's decorators): each layer names
// what it wraps with an Unwrap() Provider method. Tests use it to reach a
// double's knobs.
func Unwrap(p Provider) Provider {
	for {
		u, ok := p.(interface{ Unwrap() Provider })
		if !ok {
			return p
		}
		p = u.Unwrap()
	}
}

type notesKey struct{}

// notes are the values a provider noted during one call; a provider may
// note from its own goroutines.
type notes struct {
	mu sync.Mutex
	kv []any
}

func (n *notes) add(kv []any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kv = append(n.kv, kv...)
}

func (n *notes) values() []any {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]any(nil), n.kv...)
}

// configured is the entry a boundary's calls are made for: its name and
// type name their loggers and errors.
type configured struct{ name, typ string }

// The boundary's wrappers, one per interface.
type (
	boundary struct {
		configured
		inner Provider
		// keepsEgressAddress: the provider is an EgressAddressMover, so
		// it may be asked for an egress address.
		keepsEgressAddress bool
	}
	checkBoundary struct {
		configured
		inner Checker
	}
	secondaryBoundary struct {
		configured
		inner SecondaryLister
	}
	ownerBoundary struct {
		configured
		inner OwnerLister
	}
	usersBoundary struct {
		configured
		inner UsersUpdater
	}
	moverBoundary struct {
		configured
		inner EgressAddressMover
	}
	fronterBoundary struct {
		configured
		inner GroupFronter
	}
	peersBoundary struct {
		configured
		inner GroupPeersUpdater
	}
)

var (
	_ Provider           = (*boundary)(nil)
	_ Checker            = checkBoundary{}
	_ SecondaryLister    = secondaryBoundary{}
	_ OwnerLister        = ownerBoundary{}
	_ UsersUpdater       = usersBoundary{}
	_ EgressAddressMover = moverBoundary{}
	_ GroupFronter       = fronterBoundary{}
	_ GroupPeersUpdater  = peersBoundary{}
)

// Unwrap returns the provider behind the boundary.
func (b *boundary) Unwrap() Provider { return b.inner }

// call is one provider call crossing the boundary.
type call struct {
	name, op string
	log      logr.Logger
	notes    *notes
}

// begin opens a call of op; kv are the call's key values, on every line.
func (at configured) begin(ctx context.Context, op string, kv ...any) (context.Context, *call) {
	log := logr.FromContextOrDiscard(ctx).WithName(at.typ).WithValues(append([]any{"provider", at.name}, kv...)...)
	c := &call{name: at.name, op: op, log: log, notes: &notes{}}
	return context.WithValue(logr.NewContext(ctx, log), notesKey{}, c.notes), c
}

// enter is begin for a call that returns an error: when ctx has already
// ended, the call ends here with ctx's error, which Wrap names and classes
// Transient, and the provider is not reached.
func (at configured) enter(ctx context.Context, op string, kv ...any) (context.Context, *call, error) {
	ctx, c := at.begin(ctx, op, kv...)
	if err := ctx.Err(); err != nil {
		return ctx, c, c.end(err)
	}
	return ctx, c, nil
}

// end names and classifies err and writes the outcome line; kv are the
// result's values, logged on success.
func (c *call) end(err error, kv ...any) error {
	err = Wrap(c.name, c.op, nil, err)
	v := c.log.V(1)
	if !v.Enabled() {
		return err
	}
	if err != nil {
		v.Info(c.op+" failed", append(c.notes.values(), "class", ClassName(err), "error", err.Error())...)
		return err
	}
	v.Info(c.op+" done", append(kv, c.notes.values()...)...)
	return nil
}

// instanceValues are what an outcome line says about inst; empty fields
// are left out.
func instanceValues(inst Instance, withID bool) []any {
	kv := make([]any, 0, 8)
	if withID {
		kv = append(kv, "id", inst.ID)
	}
	kv = append(kv, "state", inst.State)
	if inst.IP != "" {
		kv = append(kv, "ip", inst.IP)
	}
	if inst.Host != "" {
		kv = append(kv, "host", inst.Host)
	}
	return kv
}

func (b *boundary) Create(ctx context.Context, req CreateRequest) (Instance, error) {
	ctx, c, err := b.enter(ctx, OpCreate, "name", req.Name)
	if err != nil {
		return Instance{}, err
	}
	if req.EgressAddress != nil && !b.keepsEgressAddress {
		// Said once here, for every provider that has no way to keep one,
		// rather than by each ignoring the field.
		return Instance{}, c.end(Errorf(ErrPermanent, "spec.egressAddress: provider type %s keeps no egress address across instances yet (docs/api.md, \"A stable egress address\")", b.typ))
	}
	inst, err := b.inner.Create(ctx, req)
	if err != nil {
		return Instance{}, c.end(err)
	}
	return inst, c.end(nil, instanceValues(inst, true)...)
}

func (b *boundary) Get(ctx context.Context, id string) (Instance, error) {
	ctx, c, err := b.enter(ctx, OpGet, "id", id)
	if err != nil {
		return Instance{}, err
	}
	inst, err := b.inner.Get(ctx, id)
	if err != nil {
		return Instance{}, c.end(err)
	}
	return inst, c.end(nil, instanceValues(inst, false)...)
}

func (b *boundary) Delete(ctx context.Context, id string) error {
	ctx, c, err := b.enter(ctx, OpDelete, "id", id)
	if err != nil {
		return err
	}
	return c.end(b.inner.Delete(ctx, id))
}

func (b *boundary) ListByTag(ctx context.Context) ([]Instance, error) {
	ctx, c, err := b.enter(ctx, OpList)
	if err != nil {
		return nil, err
	}
	list, err := b.inner.ListByTag(ctx)
	if err != nil {
		return nil, c.end(err)
	}
	return list, c.end(nil, "instances", len(list))
}

// Check has no error to wrap: its outcome line carries the result, and a
// provider reports an ended ctx in the result's reason itself.
func (k checkBoundary) Check(ctx context.Context) CheckResult {
	ctx, c := k.begin(ctx, OpCheck)
	res := k.inner.Check(ctx)
	if v := c.log.V(1); v.Enabled() {
		kv := []any{"healthy", res.Healthy, "reason", res.Reason, "message", res.Message}
		if len(res.Details) > 0 {
			kv = append(kv, "details", res.Details)
		}
		v.Info("check done", append(kv, c.notes.values()...)...)
	}
	return res
}

// The secondary calls are not ended at the boundary when their ctx has
// ended: libvirt's then name another operation (list, delete), which
// ending them here would rename. Each provider checks ctx in them.
func (s secondaryBoundary) ListSecondary(ctx context.Context) ([]Secondary, error) {
	ctx, c := s.begin(ctx, OpListSecondary)
	list, err := s.inner.ListSecondary(ctx)
	if err != nil {
		return nil, c.end(err)
	}
	return list, c.end(nil, "secondaries", len(list))
}

func (s secondaryBoundary) DeleteSecondary(ctx context.Context, id string) error {
	ctx, c := s.begin(ctx, OpDeleteSecondary, "id", id)
	return c.end(s.inner.DeleteSecondary(ctx, id))
}

func (o ownerBoundary) ListOwnedInstances(ctx context.Context, uid string) ([]Instance, error) {
	ctx, c, err := o.enter(ctx, OpListOwnedInstances, "uid", uid)
	if err != nil {
		return nil, err
	}
	list, err := o.inner.ListOwnedInstances(ctx, uid)
	if err != nil {
		return nil, c.end(err)
	}
	return list, c.end(nil, "instances", len(list))
}

func (o ownerBoundary) ListOwnedSecondaries(ctx context.Context, uid string) ([]Secondary, error) {
	ctx, c, err := o.enter(ctx, OpListOwnedSecondaries, "uid", uid)
	if err != nil {
		return nil, err
	}
	list, err := o.inner.ListOwnedSecondaries(ctx, uid)
	if err != nil {
		return nil, c.end(err)
	}
	return list, c.end(nil, "secondaries", len(list))
}

func (u usersBoundary) UpdateUsers(ctx context.Context, id string, users Sensitive) error {
	ctx, c, err := u.enter(ctx, OpUpdateUsers, "id", id)
	if err != nil {
		return err
	}
	return c.end(u.inner.UpdateUsers(ctx, id, users))
}

func (u peersBoundary) UpdateGroupPeers(ctx context.Context, id string, self netip.Addr, peers []netip.Addr) error {
	ctx, c, err := u.enter(ctx, OpUpdateGroupPeers, "id", id, "peers", len(peers))
	if err != nil {
		return err
	}
	return c.end(u.inner.UpdateGroupPeers(ctx, id, self, peers))
}

func (m moverBoundary) MoveEgressAddress(ctx context.Context, addr EgressAddress, fromID, toID string) error {
	ctx, c, err := m.enter(ctx, OpMoveEgressAddress, "id", toID, "from", fromID, "address", addr.Name)
	if err != nil {
		return err
	}
	return c.end(m.inner.MoveEgressAddress(ctx, addr, fromID, toID))
}

func (f fronterBoundary) FrontGroup(ctx context.Context, front GroupFront) (string, error) {
	ctx, c, err := f.enter(ctx, OpFrontGroup, "group", front.Group.Namespace+"/"+front.Group.Name)
	if err != nil {
		return "", err
	}
	endpoint, err := f.inner.FrontGroup(ctx, front)
	if err = c.end(err, "endpoint", endpoint); err != nil {
		return "", err
	}
	return endpoint, nil
}

func (f fronterBoundary) RemoveGroupFront(ctx context.Context, g GroupRef) error {
	ctx, c, err := f.enter(ctx, OpRemoveGroupFront, "group", g.Namespace+"/"+g.Name)
	if err != nil {
		return err
	}
	return c.end(f.inner.RemoveGroupFront(ctx, g))
}
