package fake

import (
	"context"
	"slices"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Move is one egress address move the fake made.
type Move struct {
	Address, From, To string
}

// Mover is the fake as an EgressAddressMover, for the reconciler's tests
// of the moves: it records who holds each address and nothing else (Get
// reports no address, so the fake itself is no mover, and the conformance
// suite holds it to the refusal of a provider that keeps none).
type Mover struct{ *Provider }

// MoveEgressAddress gives instance toID the address. An address already
// on toID is no move. NotFound when toID is not there.
func (m Mover) MoveEgressAddress(ctx context.Context, addr provider.EgressAddress, fromID, toID string) error {
	p := m.Provider
	if err := p.enter(ctx, provider.OpMoveEgressAddress); err != nil {
		return err
	}
	name, err := parseID(toID)
	if err != nil {
		return p.fail(provider.OpMoveEgressAddress, nil, err)
	}
	b := p.backend
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.instances[name]; !ok {
		return provider.Errorf(provider.ErrNotFound, "instance %q not found", name)
	}
	if b.addresses == nil {
		b.addresses = map[string]string{}
	}
	if b.addresses[addr.Name] == toID {
		return nil
	}
	b.addresses[addr.Name] = toID
	b.moves = append(b.moves, Move{Address: addr.Name, From: fromID, To: toID})
	return nil
}

// AddressHolder is the instance ID holding the address named name.
func (b *Backend) AddressHolder(name string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addresses[name]
}

// Moves are the egress address moves made, in order.
func (b *Backend) Moves() []Move {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.moves)
}
