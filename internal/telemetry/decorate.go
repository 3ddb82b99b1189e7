package telemetry

import (
	"context"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// Span attribute keys. Dashboards and queries depend on them: renaming one
// is a breaking change.
const (
	AttrProviderName   = attribute.Key("provider.name")
	AttrProviderType   = attribute.Key("provider.type")
	AttrProxyNS        = attribute.Key("proxy.namespace")
	AttrProxyName      = attribute.Key("proxy.name")
	AttrProxyUID       = attribute.Key("proxy.uid")
	AttrInstanceID     = attribute.Key("provider.instance.id")
	AttrInstanceName   = attribute.Key("provider.instance.name")
	AttrInstanceState  = attribute.Key("provider.instance.state")
	AttrInstanceCount  = attribute.Key("provider.instance.count")
	AttrSecondaryID    = attribute.Key("provider.secondary.id")
	AttrSecondaryCount = attribute.Key("provider.secondary.count")
	AttrCheckHealthy   = attribute.Key("provider.check.healthy")
	AttrCheckReason    = attribute.Key("provider.check.reason")
	AttrErrorClass     = attribute.Key("error.class")
)

// spanName is the span name of provider operation op (provider.OpCreate
// and the others): "provider.create" and so on. Dashboards and queries
// depend on these names, as on the attribute keys.
func spanName(op string) string { return "provider." + op }

// proxyKey carries the Proxy a provider call is made for.
type proxyKey struct{}

type proxyID struct{ namespace, name, uid string }

// WithProxy returns ctx naming the Proxy that the provider calls made with
// it serve, so that their spans carry it. The provider interface has no
// room for it (Get and Delete take only an ID), hence ctx. The span ctx
// carries (the reconcile's root) gets the UID too: a Proxy's traces are
// found by it, across a delete and a re-create under the same name.
func WithProxy(ctx context.Context, namespace, name, uid string) context.Context {
	if uid != "" {
		trace.SpanFromContext(ctx).SetAttributes(AttrProxyUID.String(uid))
	}
	return context.WithValue(ctx, proxyKey{}, proxyID{namespace, name, uid})
}

// withUID returns ctx naming a Proxy by uid unless ctx names one already.
func withUID(ctx context.Context, uid string) context.Context {
	p := proxyFrom(ctx)
	if p.uid != "" {
		return ctx
	}
	p.uid = uid
	return context.WithValue(ctx, proxyKey{}, p)
}

func proxyFrom(ctx context.Context) proxyID {
	p, _ := ctx.Value(proxyKey{}).(proxyID)
	return p
}

// Decorate returns the registry decorator that gives every call of an
// entry's Provider, Checker, Secondary, Owned and Users one span (a child of the
// span in ctx, with the span's IDs in ctx's logger) and one count and duration sample in
// ProviderCalls and ProviderCallDuration. With a no-op tp (tracing off)
// only the metrics are recorded.
//
// The registry takes the entry's io.Closer from the undecorated provider
// before decorators run, so closing keeps working; code that needs the
// undecorated provider (tests reaching a fake's knobs) calls Unwrap. The
// registry applies the decorators over its method boundary
// (provider.WithBoundary), so the provider's outcome lines carry the span's
// IDs.
func Decorate(tp trace.TracerProvider) registry.Decorator {
	tr := tracerOf(tp)
	return func(e *registry.Entry) {
		m := &meter{name: e.Name, typ: e.Type, tracer: tr}
		e.Provider = &tracedProvider{inner: e.Provider, m: m}
		if e.Checker != nil {
			e.Checker = &tracedChecker{inner: e.Checker, m: m}
		}
		if e.Secondary != nil {
			e.Secondary = &tracedSecondary{inner: e.Secondary, m: m}
		}
		if e.Owned != nil {
			e.Owned = &tracedOwner{inner: e.Owned, m: m}
		}
		if e.Users != nil {
			e.Users = &tracedUsers{inner: e.Users, m: m}
		}
		if e.Mover != nil {
			e.Mover = &tracedMover{inner: e.Mover, m: m}
		}
		if e.Fronter != nil {
			e.Fronter = &tracedFronter{inner: e.Fronter, m: m}
		}
		if e.Peers != nil {
			e.Peers = &tracedPeers{inner: e.Peers, m: m}
		}
	}
}

// Unwrap returns the provider under the decorators and the registry's
// layers (provider.Unwrap), or p itself.
func Unwrap(p provider.Provider) provider.Provider { return provider.Unwrap(p) }

// meter holds one entry's identity and spans and counts its calls.
type meter struct {
	name, typ string
	tracer    trace.Tracer // nil when tracing is off
}

// call is one provider call in flight.
type call struct {
	op    string
	start time.Time
	span  trace.Span // nil when tracing is off
}

// begin starts the call's span and clock. Attributes are only built when
// tracing is on, so tracing off allocates nothing here. req is set for
// Create, id for Get and Delete.
func (m *meter) begin(ctx context.Context, op, id string, req *provider.CreateRequest) (context.Context, call) {
	c := call{op: op, start: time.Now()}
	if m.tracer == nil {
		return ctx, c
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, AttrProviderName.String(m.name), AttrProviderType.String(m.typ))
	px := proxyFrom(ctx)
	if req != nil {
		// A Create names its Proxy itself; ctx may not.
		px.namespace = orElse(px.namespace, req.Namespace)
		px.name = orElse(px.name, req.ProxyName)
		px.uid = orElse(px.uid, req.UID)
		attrs = append(attrs, AttrInstanceName.String(req.Name))
	}
	if px.namespace != "" {
		attrs = append(attrs, AttrProxyNS.String(px.namespace))
	}
	if px.name != "" {
		attrs = append(attrs, AttrProxyName.String(px.name))
	}
	if px.uid != "" {
		attrs = append(attrs, AttrProxyUID.String(px.uid))
	}
	if id != "" {
		attrs = append(attrs, AttrInstanceID.String(id))
	}
	ctx, c.span = m.tracer.Start(ctx, spanName(op), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return withLogIDs(ctx, c.span.SpanContext()), c
}

// orElse returns a unless it is empty.
func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// end records the call's outcome. class is provider.ClassName of the error
// (or ErrorClassUnhealthy); msg is the span status message when failed.
func (m *meter) end(c call, class string, failed bool, msg string) {
	ProviderCalls.WithLabelValues(m.name, m.typ, c.op, class).Inc()
	ProviderCallDuration.WithLabelValues(m.name, m.typ, c.op, class).Observe(time.Since(c.start).Seconds())
	if c.span == nil {
		return
	}
	c.span.SetAttributes(AttrErrorClass.String(class))
	if failed {
		c.span.SetStatus(codes.Error, msg)
	}
	c.span.End()
}

func (m *meter) endErr(c call, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	m.end(c, provider.ClassName(err), err != nil, msg)
}

// tracedProvider is a Provider with spans and metrics around each call.
type tracedProvider struct {
	inner provider.Provider
	m     *meter
}

var _ provider.Provider = (*tracedProvider)(nil)

// Unwrap returns the provider under the decorator.
func (p *tracedProvider) Unwrap() provider.Provider { return p.inner }

func (p *tracedProvider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	ctx, c := p.m.begin(ctx, provider.OpCreate, "", &req)
	inst, err := p.inner.Create(ctx, req)
	if c.span != nil && err == nil {
		c.span.SetAttributes(AttrInstanceID.String(inst.ID), AttrInstanceState.String(string(inst.State)))
	}
	p.m.endErr(c, err)
	return inst, err
}

func (p *tracedProvider) Get(ctx context.Context, id string) (provider.Instance, error) {
	ctx, c := p.m.begin(ctx, provider.OpGet, id, nil)
	inst, err := p.inner.Get(ctx, id)
	if c.span != nil && err == nil {
		c.span.SetAttributes(AttrInstanceState.String(string(inst.State)))
	}
	p.m.endErr(c, err)
	return inst, err
}

func (p *tracedProvider) Delete(ctx context.Context, id string) error {
	ctx, c := p.m.begin(ctx, provider.OpDelete, id, nil)
	err := p.inner.Delete(ctx, id)
	p.m.endErr(c, err)
	return err
}

func (p *tracedProvider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	ctx, c := p.m.begin(ctx, provider.OpList, "", nil)
	out, err := p.inner.ListByTag(ctx)
	if c.span != nil && err == nil {
		c.span.SetAttributes(AttrInstanceCount.Int(len(out)))
	}
	p.m.endErr(c, err)
	return out, err
}

// tracedChecker is a Checker with a span and metrics around each check.
type tracedChecker struct {
	inner provider.Checker
	m     *meter
}

func (k *tracedChecker) Check(ctx context.Context) provider.CheckResult {
	ctx, c := k.m.begin(ctx, provider.OpCheck, "", nil)
	r := k.inner.Check(ctx)
	if c.span != nil {
		c.span.SetAttributes(AttrCheckHealthy.Bool(r.Healthy), AttrCheckReason.String(r.Reason))
	}
	if r.Healthy {
		k.m.end(c, provider.ClassName(nil), false, "")
	} else {
		k.m.end(c, ErrorClassUnhealthy, true, r.Reason+": "+r.Message)
	}
	return r
}

// tracedSecondary is a SecondaryLister with a span and metrics around each
// call.
type tracedSecondary struct {
	inner provider.SecondaryLister
	m     *meter
}

func (s *tracedSecondary) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	ctx, c := s.m.begin(ctx, provider.OpListSecondary, "", nil)
	out, err := s.inner.ListSecondary(ctx)
	if c.span != nil && err == nil {
		c.span.SetAttributes(AttrSecondaryCount.Int(len(out)))
	}
	s.m.endErr(c, err)
	return out, err
}

func (s *tracedSecondary) DeleteSecondary(ctx context.Context, id string) error {
	ctx, c := s.m.begin(ctx, provider.OpDeleteSecondary, "", nil)
	if c.span != nil {
		c.span.SetAttributes(AttrSecondaryID.String(id))
	}
	err := s.inner.DeleteSecondary(ctx, id)
	s.m.endErr(c, err)
	return err
}

// tracedOwner is an OwnerLister with a span and metrics around each call;
// its spans carry the Proxy's UID, which is the call's argument.
type tracedOwner struct {
	inner provider.OwnerLister
	m     *meter
}

func (o *tracedOwner) ListOwnedInstances(ctx context.Context, uid string) ([]provider.Instance, error) {
	ctx, c := o.m.begin(withUID(ctx, uid), provider.OpListOwnedInstances, "", nil)
	out, err := o.inner.ListOwnedInstances(ctx, uid)
	if c.span != nil && err == nil {
		c.span.SetAttributes(AttrInstanceCount.Int(len(out)))
	}
	o.m.endErr(c, err)
	return out, err
}

func (o *tracedOwner) ListOwnedSecondaries(ctx context.Context, uid string) ([]provider.Secondary, error) {
	ctx, c := o.m.begin(withUID(ctx, uid), provider.OpListOwnedSecondaries, "", nil)
	out, err := o.inner.ListOwnedSecondaries(ctx, uid)
	if c.span != nil && err == nil {
		c.span.SetAttributes(AttrSecondaryCount.Int(len(out)))
	}
	o.m.endErr(c, err)
	return out, err
}

// tracedUsers is a UsersUpdater with a span and metrics around each call;
// the span names the instance, never the users.
type tracedUsers struct {
	inner provider.UsersUpdater
	m     *meter
}

func (u *tracedUsers) UpdateUsers(ctx context.Context, id string, users provider.Sensitive) error {
	ctx, c := u.m.begin(ctx, provider.OpUpdateUsers, id, nil)
	err := u.inner.UpdateUsers(ctx, id, users)
	u.m.endErr(c, err)
	return err
}

// tracedPeers is a GroupPeersUpdater with a span and metrics around each
// call, naming the member's instance.
type tracedPeers struct {
	inner provider.GroupPeersUpdater
	m     *meter
}

func (t *tracedPeers) UpdateGroupPeers(ctx context.Context, id string, self netip.Addr, peers []netip.Addr) error {
	ctx, c := t.m.begin(ctx, provider.OpUpdateGroupPeers, id, nil)
	err := t.inner.UpdateGroupPeers(ctx, id, self, peers)
	t.m.endErr(c, err)
	return err
}

// tracedMover is an EgressAddressMover with a span and metrics around each
// call, naming the instance it moves the address to.
type tracedMover struct {
	inner provider.EgressAddressMover
	m     *meter
}

func (t *tracedMover) MoveEgressAddress(ctx context.Context, addr provider.EgressAddress, fromID, toID string) error {
	ctx, c := t.m.begin(ctx, provider.OpMoveEgressAddress, toID, nil)
	err := t.inner.MoveEgressAddress(ctx, addr, fromID, toID)
	t.m.endErr(c, err)
	return err
}

// tracedFronter is a GroupFronter with a span and metrics around each
// call; no instance is its key (the boundary's log line names the group).
type tracedFronter struct {
	inner provider.GroupFronter
	m     *meter
}

func (t *tracedFronter) FrontGroup(ctx context.Context, f provider.GroupFront) (string, error) {
	ctx, c := t.m.begin(ctx, provider.OpFrontGroup, "", nil)
	endpoint, err := t.inner.FrontGroup(ctx, f)
	t.m.endErr(c, err)
	return endpoint, err
}

func (t *tracedFronter) RemoveGroupFront(ctx context.Context, g provider.GroupRef) error {
	ctx, c := t.m.begin(ctx, provider.OpRemoveGroupFront, "", nil)
	err := t.inner.RemoveGroupFront(ctx, g)
	t.m.endErr(c, err)
	return err
}
