package provider_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// bareSecondary is bare with secondary resources: a volume without its VM
// and one whose VM runs.
type bareSecondary struct {
	bare
	deleted []string
}

func (b *bareSecondary) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	if err := b.fail[provider.OpListSecondary]; err != nil {
		return []provider.Secondary{{ID: "half-read"}}, err
	}
	provider.Note(ctx, "pools", 2)
	marks := provider.Marks{Managed: true, UID: "u1", Installation: "i1"}
	return []provider.Secondary{
		{ID: "vol/a-overlay", Kind: "volume", Marks: marks, Instance: "a", InstanceGone: true, CreatedAt: time.Unix(1, 0)},
		{ID: "vol/b-overlay", Kind: "volume", Marks: marks, Instance: "b"},
	}, nil
}

func (b *bareSecondary) DeleteSecondary(_ context.Context, id string) error {
	b.deleted = append(b.deleted, id)
	return b.fail[provider.OpDeleteSecondary]
}

type bareCheckingSecondary struct {
	bareSecondary
	bareChecker
}

// Resolve the embedded bare twice over: the methods are bareSecondary's.
func (b *bareCheckingSecondary) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	return b.bareSecondary.Create(ctx, req)
}
func (b *bareCheckingSecondary) Get(ctx context.Context, id string) (provider.Instance, error) {
	return b.bareSecondary.Get(ctx, id)
}
func (b *bareCheckingSecondary) Delete(ctx context.Context, id string) error {
	return b.bareSecondary.Delete(ctx, id)
}
func (b *bareCheckingSecondary) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	return b.bareSecondary.ListByTag(ctx)
}

// TestBoundarySecondaryLister (issue 8, item 2): the secondary calls cross
// the same boundary as the lifecycle calls: one outcome line each, errors
// named and classified, the result dropped on failure; the boundary is a
// SecondaryLister exactly when the provider is, with or without Check.
func TestBoundarySecondaryLister(t *testing.T) {
	const name, typ = "eu-pool", "vmtype"
	var logs testenv.LogLines
	ctx := logs.Context(2)

	if provider.WithBoundary(name, typ, &bare{}).Secondary != nil {
		t.Error("the boundary of a provider without secondaries has a SecondaryLister")
	}
	if provider.WithBoundary(name, typ, &bareChecker{}).Secondary != nil {
		t.Error("the boundary of a Checker without secondaries has a SecondaryLister")
	}
	inner := &bareSecondary{}
	p := provider.WithBoundary(name, typ, inner)
	if p.Checker != nil {
		t.Error("the boundary of a SecondaryLister without Check has a Checker")
	}
	sl := p.Secondary
	if sl == nil {
		t.Fatal("the boundary of a SecondaryLister has no SecondaryLister")
	}
	both := provider.WithBoundary(name, typ, &bareCheckingSecondary{})
	if both.Secondary == nil {
		t.Error("the boundary of a checking SecondaryLister has no SecondaryLister")
	}
	if both.Checker == nil {
		t.Error("the boundary of a checking SecondaryLister has no Checker")
	}
	if provider.Unwrap(p.Provider) != provider.Provider(inner) {
		t.Error("Unwrap does not return the wrapped SecondaryLister")
	}

	list, err := sl.ListSecondary(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListSecondary = %+v, %v", list, err)
	}
	if err := sl.DeleteSecondary(ctx, "vol/a-overlay"); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{
		{`"msg"="list_secondary done"`, `"secondaries"=2`, `"pools"=2`},
		{`"msg"="delete_secondary done"`, `"id"="vol/a-overlay"`},
	} {
		got := logs.Find(append(want, `"provider"="`+name+`"`, `"level"=1`)...)
		if len(got) != 1 || !strings.HasPrefix(got[0], typ+" ") {
			t.Errorf("want one V(1) line from logger %q with %v, got %q\nall:\n%s", typ, want, got, logs.String())
		}
	}

	failing := provider.WithBoundary(name, typ, &bareSecondary{bare: bare{fail: map[string]error{
		provider.OpListSecondary:   errors.New("connection reset"),
		provider.OpDeleteSecondary: provider.Errorf(provider.ErrPermanent, "forbidden"),
	}}}).Secondary
	list, listErr := failing.ListSecondary(ctx)
	if list != nil {
		t.Errorf("a failed ListSecondary returned %+v, want nil", list)
	}
	delErr := failing.DeleteSecondary(ctx, "vol/x")
	for _, c := range []struct {
		op    string
		err   error
		class error
	}{
		{provider.OpListSecondary, listErr, provider.ErrTransient},
		{provider.OpDeleteSecondary, delErr, provider.ErrPermanent},
	} {
		var pe *provider.Error
		if !errors.As(c.err, &pe) || pe.Provider != name || pe.Op != c.op {
			t.Errorf("%s error %#v: want a *provider.Error naming %q and %q", c.op, c.err, name, c.op)
			continue
		}
		if provider.ClassOf(c.err) != c.class {
			t.Errorf("%s error %v has class %s, want %s", c.op, c.err, provider.ClassName(c.err), provider.ClassName(c.class))
		}
		if line := logs.Find(`"msg"="`+c.op+` failed"`, `"class"="`+provider.ClassName(c.class)+`"`, `"level"=1`); len(line) != 1 {
			t.Errorf("want one V(1) %q line with class %s, got %q", c.op+" failed", provider.ClassName(c.class), line)
		}
	}
}
