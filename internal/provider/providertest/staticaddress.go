package providertest

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
)

// DocumentationStaticAddress is the static address the suite gives a
// double's instance: 192.0.2.77/24 via 192.0.2.1, resolver 192.0.2.53, in
// TEST-NET-1 (RFC 5737), where nothing answers and nothing is sent.
func DocumentationStaticAddress() *provider.StaticAddress {
	return &provider.StaticAddress{
		Address: netip.MustParsePrefix("192.0.2.77/24"),
		Gateway: netip.MustParseAddr("192.0.2.1"),
		DNS:     []netip.Addr{netip.MustParseAddr("192.0.2.53")},
	}
}

// StaticAddressFor is Harness.StaticAddress for a provider over a double:
// DocumentationStaticAddress when its profile says static-address: pool,
// nil (the case skips) otherwise.
func StaticAddressFor(p profile.Profile) *provider.StaticAddress {
	if slices.Contains(p.StaticAddress.Values, profile.StaticAddressPool) {
		return DocumentationStaticAddress()
	}
	return nil
}

// Rule: a provider whose profile says static-address: pool puts a
// request's static address on the instance, and Get reports exactly that
// address once the instance runs. Needs Harness.StaticAddress; skipped
// without it.
func testStaticAddressIsTheInstanceAddress(t *testing.T, h Harness) {
	if h.StaticAddress == nil {
		t.Skip("Harness.StaticAddress is nil: the provider's profile says static-address: none, or its backend's instances sit on no network the test can give an address on")
	}
	e := newEnv(t, h)
	req := e.request("static")
	static := *h.StaticAddress
	static.DNS = slices.Clone(h.StaticAddress.DNS)
	req.StaticAddress = &static
	inst := e.mustCreate(req)
	got, ok := e.waitRunning(inst.ID)
	if !ok {
		return
	}
	if want := static.Address.Addr().String(); got.IP != want {
		t.Errorf("Get(%q) of an instance created with static address %s reports address %q, want %s", inst.ID, static, got.IP, want)
	}
}
