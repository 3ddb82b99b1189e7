package fake

import (
	"context"
	"fmt"
	"slices"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Fronter is the fake as a GroupFronter, for the group controller's tests
// of fronts: it records each group's front and what was removed, and
// gives a front the endpoint "front-<group name>.<namespace>:<port>".
// The fake itself is no GroupFronter, so that groups on it keep the
// holder's endpoint as on every provider without fronts.
type Fronter struct{ *Provider }

// FrontGroup records f as the group's front.
func (f Fronter) FrontGroup(ctx context.Context, front provider.GroupFront) (string, error) {
	p := f.Provider
	if err := p.enter(ctx, provider.OpFrontGroup); err != nil {
		return "", err
	}
	if front.Group.UID == "" || front.Port <= 0 {
		return "", p.fail(provider.OpFrontGroup, provider.ErrPermanent, fmt.Errorf("a front needs the group's UID and a port, got %+v", front))
	}
	b := p.backend
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fronts == nil {
		b.fronts = map[string]provider.GroupFront{}
	}
	b.fronts[front.Group.UID] = front
	return fmt.Sprintf("front-%s.%s:%d", front.Group.Name, front.Group.Namespace, front.Port), nil
}

// RemoveGroupFront forgets the group's front; one never made is removed.
func (f Fronter) RemoveGroupFront(ctx context.Context, g provider.GroupRef) error {
	p := f.Provider
	if err := p.enter(ctx, provider.OpRemoveGroupFront); err != nil {
		return err
	}
	b := p.backend
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.fronts, g.UID)
	b.frontsRemoved = append(b.frontsRemoved, g)
	return nil
}

// Front is the front of the group with UID uid, and whether there is one.
func (b *Backend) Front(uid string) (provider.GroupFront, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.fronts[uid]
	return f, ok
}

// FrontsRemoved are the groups whose front was removed, in order.
func (b *Backend) FrontsRemoved() []provider.GroupRef {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.frontsRemoved)
}
