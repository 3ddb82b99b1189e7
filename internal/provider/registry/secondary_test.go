package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// secondaryStub has secondary resources; its ListSecondary waits for
// release when held, and its DeleteSecondary fails unclassified.
type secondaryStub struct {
	stub
	held    bool
	entered chan struct{}
	release chan struct{}
}

func (s *secondaryStub) ListSecondary(context.Context) ([]provider.Secondary, error) {
	if s.held {
		close(s.entered)
		<-s.release
	}
	return []provider.Secondary{{ID: "s1", Kind: "volume"}}, nil
}

func (s *secondaryStub) DeleteSecondary(context.Context, string) error {
	return errors.New("disk busy")
}

// TestEntryCarriesSecondaryLister (issue 8, item 2): an entry's Secondary
// is set exactly when its provider is a SecondaryLister, its calls cross
// the method boundary (errors named and classified), the decorators see
// it, and a call inside it keeps a removed entry's provider open.
func TestEntryCarriesSecondaryLister(t *testing.T) {
	var built []*secondaryStub
	types := testTypes(new([]*stub))
	for name, held := range map[string]bool{"secondary": false, "held-secondary": true} {
		types[name] = descriptor.TypeOf(parseStub, func(name string, c stubConfig, _ provider.Options) (*secondaryStub, error) {
			s := &secondaryStub{stub: stub{name: name, size: c.Size}, held: held,
				entered: make(chan struct{}), release: make(chan struct{})}
			built = append(built, s)
			return s, nil
		}, 0)
	}
	var decorated []*Entry
	r := New(types, provider.Options{}, func(e *Entry) { decorated = append(decorated, e) })
	t.Cleanup(r.Close)
	if err := r.Apply(entries(t, r, "providers:\n- {name: p, type: plain}\n- {name: s, type: secondary}\n- {name: h, type: held-secondary}\n")); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Get("p")
	s, _ := r.Get("s")
	if p.Secondary != nil || s.Secondary == nil {
		t.Fatalf("Secondary: plain %v, secondary %v; want nil and set", p.Secondary, s.Secondary)
	}
	for _, e := range decorated {
		if e.Name == "s" && e.Secondary == nil {
			t.Error("the decorators saw the entry without its Secondary")
		}
	}
	if list, err := s.Secondary.ListSecondary(context.Background()); err != nil || len(list) != 1 {
		t.Errorf("ListSecondary = %+v, %v", list, err)
	}
	err := s.Secondary.DeleteSecondary(context.Background(), "s1")
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Provider != "s" || pe.Op != provider.OpDeleteSecondary || !errors.Is(err, provider.ErrTransient) {
		t.Errorf("DeleteSecondary error %#v: want a Transient *provider.Error naming s and %s", err, provider.OpDeleteSecondary)
	}

	h, _ := r.Get("h")
	var held *secondaryStub
	for _, b := range built {
		if b.name == "h" {
			held = b
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.Secondary.ListSecondary(context.Background())
		done <- err
	}()
	<-held.entered
	if err := r.Apply(entries(t, r, "providers:\n- {name: p, type: plain}\n")); err != nil {
		t.Fatal(err)
	}
	if held.closed.Load() {
		t.Fatal("the removed provider was closed while a ListSecondary was still inside it")
	}
	close(held.release)
	if err := <-done; err != nil {
		t.Fatalf("the in-flight ListSecondary failed: %v", err)
	}
	testenv.Eventually(t, "the removed provider closed once its call ended", held.closed.Load)
}
