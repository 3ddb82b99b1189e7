package libvirthost

import (
	"context"
	"encoding/json"
	"io"
	"net/netip"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// What the tests of the libvirt provider (kvm, kvm2) on the test host
// share: its config block, and a way to watch the calls a provider answers.

// ProviderHostName is the host's name in the providers' configs (and so in
// instance IDs: hosts/testhost/domains/<name>).
const ProviderHostName = "testhost"

// ImageKey is the catalogue key of the guest image.
const ImageKey = "debian-12"

// ProviderConfig is the kvm (or kvm2) block for this host: its SSH key and
// pinned known_hosts, the host on user-mode networking (socket is
// libvirtd's socket, or a Relay's in front of it), the guest image served
// at imageURL, and Squid allowed to reach SlirpHost (the namespace's
// loopback as the guest sees it), where the tests' origins listen. The
// domain type is left to detection.
func (h *Host) ProviderConfig(socket, imageURL string, g Guest) json.RawMessage {
	cfg := map[string]any{
		"sshKeyFile":     h.SSHKey,
		"knownHostsFile": h.SSHKnownHosts,
		"hosts": []map[string]any{{
			"name": ProviderHostName, "address": h.SSHAddr, "user": h.SSHUser,
			"socket": socket, "pool": h.Pool, "userNetworking": true,
		}},
		"images": map[string]any{
			ImageKey: map[string]any{"url": imageURL, "sha256": g.SHA256, "format": "qcow2"},
		},
		"allowedDestinations": []string{SlirpHost + "/32"},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		panic(err) // a map of strings and slices always marshals
	}
	return raw
}

// FullProvider is what the libvirt provider is: a Provider, a Checker, a
// SecondaryLister, a GroupPeersUpdater and an io.Closer. A wrapper that
// dropped one would change what the registry makes of the entry (without
// the GroupPeersUpdater a group's members are replaced for new peers).
type FullProvider interface {
	provider.Provider
	provider.Checker
	provider.SecondaryLister
	provider.GroupPeersUpdater
	io.Closer
}

// Hooks are told of every lifecycle call a provider answered, after it
// returned. Nil hooks are skipped. They run on the caller's goroutine.
type Hooks struct {
	Create func(req provider.CreateRequest, inst provider.Instance, err error)
	Get    func(id string, inst provider.Instance, err error)
	Delete func(id string, err error)
}

// Observe returns p with hooks told of its Create, Get and Delete calls;
// everything else, Check, the secondary calls and Close included, goes
// straight to p. provider.Unwrap reaches p.
func Observe(p FullProvider, h Hooks) FullProvider { return &observed{inner: p, hooks: h} }

type observed struct {
	inner FullProvider
	hooks Hooks
}

func (o *observed) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	inst, err := o.inner.Create(ctx, req)
	if o.hooks.Create != nil {
		o.hooks.Create(req, inst, err)
	}
	return inst, err
}

func (o *observed) Get(ctx context.Context, id string) (provider.Instance, error) {
	inst, err := o.inner.Get(ctx, id)
	if o.hooks.Get != nil {
		o.hooks.Get(id, inst, err)
	}
	return inst, err
}

func (o *observed) Delete(ctx context.Context, id string) error {
	err := o.inner.Delete(ctx, id)
	if o.hooks.Delete != nil {
		o.hooks.Delete(id, err)
	}
	return err
}

func (o *observed) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	return o.inner.ListByTag(ctx)
}

func (o *observed) Check(ctx context.Context) provider.CheckResult { return o.inner.Check(ctx) }

func (o *observed) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	return o.inner.ListSecondary(ctx)
}

func (o *observed) DeleteSecondary(ctx context.Context, id string) error {
	return o.inner.DeleteSecondary(ctx, id)
}

func (o *observed) UpdateGroupPeers(ctx context.Context, id string, self netip.Addr, peers []netip.Addr) error {
	return o.inner.UpdateGroupPeers(ctx, id, self, peers)
}

func (o *observed) Close() error { return o.inner.Close() }

// Unwrap is for provider.Unwrap.
func (o *observed) Unwrap() provider.Provider { return o.inner }
