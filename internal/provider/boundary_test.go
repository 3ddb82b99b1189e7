package provider_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// bare is a provider written with no logging and no wrapping at all: it
// returns plain or source-classified errors and notes one value, as a new
// provider would before anyone reviewed it.
type bare struct{ fail map[string]error }

func (b *bare) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if err := b.fail[provider.OpCreate]; err != nil {
		return provider.Instance{ID: "half-made"}, err
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("inner detail")
	provider.Note(ctx, "outcome", "adopted")
	return provider.Instance{ID: "vm/" + req.Name, State: provider.StateRunning, IP: "192.0.2.7"}, nil
}

func (b *bare) Get(_ context.Context, id string) (provider.Instance, error) {
	if err := b.fail[provider.OpGet]; err != nil {
		return provider.Instance{}, err
	}
	return provider.Instance{ID: id, State: provider.StateProvisioning}, nil
}

func (b *bare) Delete(context.Context, string) error { return b.fail[provider.OpDelete] }

func (b *bare) ListByTag(context.Context) ([]provider.Instance, error) {
	if err := b.fail[provider.OpList]; err != nil {
		return nil, err
	}
	return []provider.Instance{{ID: "a"}, {ID: "b"}}, nil
}

type bareChecker struct{ bare }

func (bareChecker) Check(ctx context.Context) provider.CheckResult {
	provider.Note(ctx, "probe", "tcp")
	return provider.CheckResult{Healthy: false, Reason: provider.ReasonDegraded, Message: "1 of 2 down",
		Details: map[string]string{"free": "3"}}
}

// TestBoundaryGivesABareProviderOutcomeLinesAndNamedErrors: item 11, "one
// method boundary for all providers". A provider with no logging and no
// wrapping of its own gets, through the boundary, one V(1) outcome line
// per call (named after its type, tagged with the configured name, with
// the instance's values and what it noted), a logger in ctx for its own
// lines, and errors that name the configured provider and the operation
// and keep the class decided at the source.
func TestBoundaryGivesABareProviderOutcomeLinesAndNamedErrors(t *testing.T) {
	const name, typ = "eu-pool", "vmtype"
	var logs testenv.LogLines
	ctx := logs.Context(2)
	p := provider.WithBoundary(name, typ, &bare{}).Provider

	inst, err := p.Create(ctx, provider.CreateRequest{Name: "proxy-ns-web-1", CloudInit: provider.Sensitive("SECRET-user-data")})
	if err != nil || inst.ID != "vm/proxy-ns-web-1" {
		t.Fatalf("Create = %+v, %v", inst, err)
	}
	if _, err := p.Get(ctx, "vm/x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "vm/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ListByTag(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{
		{`"msg"="create done"`, `"name"="proxy-ns-web-1"`, `"id"="vm/proxy-ns-web-1"`, `"state"="Running"`, `"ip"="192.0.2.7"`, `"outcome"="adopted"`},
		{`"msg"="get done"`, `"id"="vm/x"`, `"state"="Provisioning"`},
		{`"msg"="delete done"`, `"id"="vm/x"`},
		{`"msg"="list done"`, `"instances"=2`},
		{`"msg"="inner detail"`, `"name"="proxy-ns-web-1"`, `"level"=2`},
	} {
		got := logs.Find(append(want, `"provider"="`+name+`"`)...)
		if len(got) != 1 || !strings.HasPrefix(got[0], typ+" ") {
			t.Errorf("want one line from logger %q with %v, got %q\nall:\n%s", typ, want, got, logs.String())
		}
	}
	for _, l := range logs.Find(`done"`) {
		if !strings.Contains(l, `"level"=1`) {
			t.Errorf("outcome line not at V(1): %s", l)
		}
	}
	if strings.Contains(logs.String(), "SECRET") {
		t.Errorf("the request's cloud-init reached a log line:\n%s", logs.String())
	}

	// Errors: a plain one becomes Transient, a classified one keeps its
	// class; both name the configured provider and the operation.
	quota := provider.Errorf(provider.ErrQuotaExceeded, "no address left")
	failing := provider.WithBoundary(name, typ, &bare{fail: map[string]error{
		provider.OpCreate: quota,
		provider.OpGet:    errors.New("connection reset"),
		provider.OpDelete: provider.Errorf(provider.ErrPermanent, "forbidden"),
		provider.OpList:   provider.Errorf(provider.ErrNotFound, "no such project"),
	}}).Provider
	inst, err = failing.Create(ctx, provider.CreateRequest{Name: "n"})
	if inst != (provider.Instance{}) {
		t.Errorf("a failed Create returned %+v, want the zero Instance", inst)
	}
	_, getErr := failing.Get(ctx, "vm/x")
	delErr := failing.Delete(ctx, "vm/x")
	_, listErr := failing.ListByTag(ctx)
	for _, c := range []struct {
		op    string
		err   error
		class error
	}{
		{provider.OpCreate, err, provider.ErrQuotaExceeded},
		{provider.OpGet, getErr, provider.ErrTransient},
		{provider.OpDelete, delErr, provider.ErrPermanent},
		{provider.OpList, listErr, provider.ErrNotFound},
	} {
		var pe *provider.Error
		if !errors.As(c.err, &pe) || pe.Provider != name || pe.Op != c.op {
			t.Errorf("%s error %#v: want a *provider.Error naming %q and %q", c.op, c.err, name, c.op)
			continue
		}
		if !errors.Is(c.err, c.class) {
			t.Errorf("%s error %v has class %s, want %s", c.op, c.err, provider.ClassName(c.err), provider.ClassName(c.class))
		}
		line := logs.Find(`"msg"="`+c.op+` failed"`, `"provider"="`+name+`"`, `"class"="`+provider.ClassName(c.class)+`"`)
		if len(line) != 1 || !strings.Contains(line[0], `"level"=1`) {
			t.Errorf("want one V(1) %q line with class %s, got %q", c.op+" failed", provider.ClassName(c.class), line)
		}
	}
	if !strings.Contains(err.Error(), `provider "eu-pool": create: no address left`) {
		t.Errorf("error text %q", err)
	}

	// Check: the result's values and the notes on one line; the boundary
	// has a Checker exactly when the provider is one.
	if provider.WithBoundary(name, typ, &bare{}).Checker != nil {
		t.Error("the boundary of a provider without Check has a Checker")
	}
	c := provider.WithBoundary(name, typ, &bareChecker{}).Checker
	if c == nil {
		t.Fatal("the boundary of a Checker has no Checker")
	}
	if res := c.Check(ctx); res.Reason != provider.ReasonDegraded {
		t.Errorf("Check = %+v", res)
	}
	if got := logs.Find(`"msg"="check done"`, `"provider"="`+name+`"`, `"healthy"=false`, `"reason"="Degraded"`,
		`"message"="1 of 2 down"`, `"free"="3"`, `"probe"="tcp"`, `"level"=1`); len(got) != 1 {
		t.Errorf("want one check line, got %q\nall:\n%s", got, logs.String())
	}

	// Unwrap reaches the provider itself (tests reach their doubles' knobs).
	inner := &bare{}
	if provider.Unwrap(provider.WithBoundary(name, typ, inner).Provider) != provider.Provider(inner) {
		t.Error("Unwrap does not return the wrapped provider")
	}
	// A Note outside any boundary is harmless.
	provider.Note(context.Background(), "k", "v")
}

// At V(0) the boundary writes nothing.
func TestBoundaryQuietAtV0(t *testing.T) {
	var logs testenv.LogLines
	p := provider.WithBoundary("n", "t", &bare{}).Provider
	if _, err := p.Create(logs.Context(0), provider.CreateRequest{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if s := logs.String(); s != "" {
		t.Errorf("V(0) logged %q", s)
	}
}

// reached records which calls reached it; it is every optional interface.
type reached struct {
	bare
	calls []string
}

func (r *reached) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	r.calls = append(r.calls, provider.OpCreate)
	return r.bare.Create(ctx, req)
}

func (r *reached) Get(ctx context.Context, id string) (provider.Instance, error) {
	r.calls = append(r.calls, provider.OpGet)
	return r.bare.Get(ctx, id)
}

func (r *reached) Delete(ctx context.Context, id string) error {
	r.calls = append(r.calls, provider.OpDelete)
	return r.bare.Delete(ctx, id)
}

func (r *reached) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	r.calls = append(r.calls, provider.OpList)
	return r.bare.ListByTag(ctx)
}

func (r *reached) Check(context.Context) provider.CheckResult {
	r.calls = append(r.calls, provider.OpCheck)
	return provider.CheckResult{Reason: provider.ReasonTimeout}
}

func (r *reached) ListSecondary(context.Context) ([]provider.Secondary, error) {
	r.calls = append(r.calls, provider.OpListSecondary)
	return nil, nil
}

func (r *reached) DeleteSecondary(context.Context, string) error {
	r.calls = append(r.calls, provider.OpDeleteSecondary)
	return nil
}

func (r *reached) ListOwnedInstances(context.Context, string) ([]provider.Instance, error) {
	r.calls = append(r.calls, provider.OpListOwnedInstances)
	return nil, nil
}

func (r *reached) ListOwnedSecondaries(context.Context, string) ([]provider.Secondary, error) {
	r.calls = append(r.calls, provider.OpListOwnedSecondaries)
	return nil, nil
}

func (r *reached) UpdateUsers(context.Context, string, provider.Sensitive) error {
	r.calls = append(r.calls, provider.OpUpdateUsers)
	return nil
}

func (r *reached) UpdateGroupPeers(context.Context, string, netip.Addr, []netip.Addr) error {
	r.calls = append(r.calls, provider.OpUpdateGroupPeers)
	return nil
}

// TestBoundaryEndsACallWhoseCtxHasEnded (issue 20): a lifecycle or owner
// call whose ctx has already ended ends at the boundary, as every provider
// ended it first thing: a Transient *provider.Error naming the configured
// provider and the operation, wrapping ctx's error, one failed outcome
// line, and the provider not reached. Check reports an ended ctx in its
// result, and the secondary calls check their ctx in the provider, so
// both still reach it.
func TestBoundaryEndsACallWhoseCtxHasEnded(t *testing.T) {
	const name, typ = "eu-pool", "vmtype"
	var logs testenv.LogLines
	inner := &reached{}
	b := provider.WithBoundary(name, typ, inner)
	for _, ended := range []struct {
		why  string
		ctx  func() context.Context
		want error
	}{
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(logs.Context(1))
			cancel()
			return ctx
		}, context.Canceled},
		{"past its deadline", func() context.Context {
			ctx, cancel := context.WithDeadline(logs.Context(1), time.Unix(1, 0))
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
	} {
		ctx := ended.ctx()
		for _, c := range []struct {
			op   string
			call func() error
		}{
			{provider.OpCreate, func() error { _, err := b.Provider.Create(ctx, provider.CreateRequest{Name: "n"}); return err }},
			{provider.OpGet, func() error { _, err := b.Provider.Get(ctx, "vm/x"); return err }},
			{provider.OpDelete, func() error { return b.Provider.Delete(ctx, "vm/x") }},
			{provider.OpList, func() error { _, err := b.Provider.ListByTag(ctx); return err }},
			{provider.OpListOwnedInstances, func() error { _, err := b.Owned.ListOwnedInstances(ctx, "u1"); return err }},
			{provider.OpListOwnedSecondaries, func() error { _, err := b.Owned.ListOwnedSecondaries(ctx, "u1"); return err }},
			{provider.OpUpdateUsers, func() error { return b.Users.UpdateUsers(ctx, "vm/x", provider.Sensitive("alice:$2y$\n")) }},
			{provider.OpUpdateGroupPeers, func() error {
				return b.Peers.UpdateGroupPeers(ctx, "vm/x", netip.MustParseAddr("192.0.2.10"), nil)
			}},
		} {
			err := c.call()
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Provider != name || pe.Op != c.op {
				t.Errorf("%s with a ctx %s: error %#v, want a *provider.Error naming %q and %q", c.op, ended.why, err, name, c.op)
				continue
			}
			if !errors.Is(err, provider.ErrTransient) || !errors.Is(err, ended.want) {
				t.Errorf("%s with a ctx %s: error %v (%s), want Transient wrapping %v", c.op, ended.why, err, provider.ClassName(err), ended.want)
			}
		}
		if got := logs.Find(`"msg"="create failed"`, `"class"="Transient"`, `"error"="provider \"eu-pool\": create: `+ended.want.Error()+`"`); len(got) != 1 {
			t.Errorf("want one create failed line for the ctx %s, got %q\nall:\n%s", ended.why, got, logs.String())
		}
	}
	if len(inner.calls) != 0 {
		t.Errorf("calls with an ended ctx reached the provider: %v", inner.calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.Checker.Check(ctx)
	_, _ = b.Secondary.ListSecondary(ctx)
	_ = b.Secondary.DeleteSecondary(ctx, "vol/x")
	if want := []string{provider.OpCheck, provider.OpListSecondary, provider.OpDeleteSecondary}; !slices.Equal(inner.calls, want) {
		t.Errorf("with an ended ctx, the provider got %v, want %v", inner.calls, want)
	}
}

// bareMover is a bare provider that moves an egress address.
type bareMover struct {
	bare
	moves []string
}

func (m *bareMover) MoveEgressAddress(_ context.Context, addr provider.EgressAddress, from, to string) error {
	m.moves = append(m.moves, addr.Name+":"+from+">"+to)
	return nil
}

// TestBoundaryRefusesAnEgressAddressOfAProviderThatKeepsNone: a request
// with spec.egressAddress reaches only a provider that can keep the address
// (an EgressAddressMover); any other gets a Permanent error naming the
// field, said once here instead of each provider ignoring it.
func TestBoundaryRefusesAnEgressAddressOfAProviderThatKeepsNone(t *testing.T) {
	req := provider.CreateRequest{Name: "proxy-a", EgressAddress: &provider.EgressAddress{Name: "proxy-ip-a", Reserve: true}}
	b := provider.WithBoundary("lab", "kvm", &bare{})
	if b.Mover != nil {
		t.Fatal("a provider without MoveEgressAddress got a Mover")
	}
	_, err := b.Provider.Create(context.Background(), req)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "spec.egressAddress: provider type kvm keeps no egress address") {
		t.Errorf("Create with an egress address on kvm: %v, want Permanent naming spec.egressAddress", err)
	}
	if _, err := b.Provider.Create(context.Background(), provider.CreateRequest{Name: "proxy-a"}); err != nil {
		t.Errorf("Create without one: %v", err)
	}

	m := &bareMover{}
	mb := provider.WithBoundary("gce", "gcp", m)
	if _, err := mb.Provider.Create(context.Background(), req); err != nil {
		t.Errorf("Create with an egress address on a mover: %v", err)
	}
	if err := mb.Mover.MoveEgressAddress(context.Background(), *req.EgressAddress, "a", "b"); err != nil || !slices.Equal(m.moves, []string{"proxy-ip-a:a>b"}) {
		t.Errorf("MoveEgressAddress through the boundary: %v, moves %q", err, m.moves)
	}
}

func TestEgressAddressName(t *testing.T) {
	a := provider.EgressAddressName("team-a", "partner.api", "uid-1")
	if !strings.HasPrefix(a, "proxy-ip-team-a-partner-api-") || len(a) > provider.MaxInstanceNameLen {
		t.Errorf("EgressAddressName = %q", a)
	}
	if a == provider.EgressAddressName("team-a", "partner.api", "uid-2") {
		t.Error("two Proxies of the same name (another UID) share an address name")
	}
	long := provider.EgressAddressName(strings.Repeat("n", 63), strings.Repeat("p", 253), "uid-1")
	if len(long) > provider.MaxInstanceNameLen || strings.Contains(long, "--") {
		t.Errorf("EgressAddressName of a long Proxy = %q (%d)", long, len(long))
	}
}
