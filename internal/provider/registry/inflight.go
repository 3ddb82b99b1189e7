package registry

import (
	"context"
	"net/netip"
	"sync"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// inflight counts the calls inside one entry's provider, so that a
// replaced or removed entry is closed only once they have ended, and
// closes the provider once.
type inflight struct {
	mu sync.Mutex
	n  int
	// idle is made by retire and closed when no call is left after it.
	idle     chan struct{}
	signaled bool
	closed   sync.Once
}

func (f *inflight) enter() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *inflight) exit() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	f.signalIfIdle()
}

// retire returns a channel closed once no call is inside; calls may still
// start (a caller holding the entry), and are counted until it closes.
func (f *inflight) retire() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	f.signalIfIdle()
	return f.idle
}

func (f *inflight) signalIfIdle() {
	if f.n == 0 && f.idle != nil && !f.signaled {
		close(f.idle)
		f.signaled = true
	}
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// counted is the registry's own layer over an entry's provider: it counts
// each call in flight.
type counted struct {
	inner provider.Provider
	calls *inflight
}

var _ provider.Provider = (*counted)(nil)

// Unwrap returns the provider under the count.
func (c *counted) Unwrap() provider.Provider { return c.inner }

func (c *counted) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.Create(ctx, req)
}

func (c *counted) Get(ctx context.Context, id string) (provider.Instance, error) {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.Get(ctx, id)
}

func (c *counted) Delete(ctx context.Context, id string) error {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.Delete(ctx, id)
}

func (c *counted) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.ListByTag(ctx)
}

// countedChecker counts each check in flight.
type countedChecker struct {
	inner provider.Checker
	calls *inflight
}

func (c *countedChecker) Check(ctx context.Context) provider.CheckResult {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.Check(ctx)
}

// countedSecondary counts each secondary call in flight.
type countedSecondary struct {
	inner provider.SecondaryLister
	calls *inflight
}

func (c *countedSecondary) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.ListSecondary(ctx)
}

func (c *countedSecondary) DeleteSecondary(ctx context.Context, id string) error {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.DeleteSecondary(ctx, id)
}

// countedOwner counts each owner listing in flight.
type countedOwner struct {
	inner provider.OwnerLister
	calls *inflight
}

func (c *countedOwner) ListOwnedInstances(ctx context.Context, uid string) ([]provider.Instance, error) {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.ListOwnedInstances(ctx, uid)
}

func (c *countedOwner) ListOwnedSecondaries(ctx context.Context, uid string) ([]provider.Secondary, error) {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.ListOwnedSecondaries(ctx, uid)
}

// countedUsers counts each users update in flight.
type countedUsers struct {
	inner provider.UsersUpdater
	calls *inflight
}

func (c *countedUsers) UpdateUsers(ctx context.Context, id string, users provider.Sensitive) error {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.UpdateUsers(ctx, id, users)
}

// countedPeers counts each group peers update in flight.
type countedPeers struct {
	inner provider.GroupPeersUpdater
	calls *inflight
}

func (c *countedPeers) UpdateGroupPeers(ctx context.Context, id string, self netip.Addr, peers []netip.Addr) error {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.UpdateGroupPeers(ctx, id, self, peers)
}

// countedMover counts each egress address move in flight.
type countedMover struct {
	inner provider.EgressAddressMover
	calls *inflight
}

func (c *countedMover) MoveEgressAddress(ctx context.Context, addr provider.EgressAddress, fromID, toID string) error {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.MoveEgressAddress(ctx, addr, fromID, toID)
}

// countedFronter counts each group front call in flight.
type countedFronter struct {
	inner provider.GroupFronter
	calls *inflight
}

func (c *countedFronter) FrontGroup(ctx context.Context, f provider.GroupFront) (string, error) {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.FrontGroup(ctx, f)
}

func (c *countedFronter) RemoveGroupFront(ctx context.Context, g provider.GroupRef) error {
	c.calls.enter()
	defer c.calls.exit()
	return c.inner.RemoveGroupFront(ctx, g)
}
