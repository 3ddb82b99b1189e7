package telemetry_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// peersFake is the fake with the optional GroupPeersUpdater; it keeps
// what it was given so the test sees the call arrive whole.
type peersFake struct {
	*closingFake
	got *[]netip.Addr
}

func (u peersFake) UpdateGroupPeers(_ context.Context, _ string, _ netip.Addr, peers []netip.Addr) error {
	*u.got = peers
	return nil
}

// TestGroupPeersUpdateSpannedAndCounted: UpdateGroupPeers gets a span
// naming the member's instance and a count sample like every provider
// call, and the peers reach the provider as given.
func TestGroupPeersUpdateSpannedAndCounted(t *testing.T) {
	rec, tp := newRecorder()
	_, fp, _ := newEntry(t, tp)
	name := providerName(t) + "-peers"
	var got []netip.Addr
	e := decoratedEntry(t, tp, name, peersFake{fp, &got})
	if e.Peers == nil {
		t.Fatal("the entry lost its GroupPeersUpdater")
	}
	peers := []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")}
	before := len(rec.Ended())
	if err := e.Peers.UpdateGroupPeers(context.Background(), "fake/x", netip.MustParseAddr("192.0.2.10"), peers); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, peers) {
		t.Fatalf("the provider got %v, want %v", got, peers)
	}
	spans := rec.Ended()[before:]
	if len(spans) != 1 {
		t.Fatalf("spans %v, want the update", spanNames(spans))
	}
	wantAttrs(t, spanNamed(t, spans, "provider.update_group_peers"), map[string]string{
		"provider.name": name, "provider.instance.id": "fake/x", "error.class": "none",
	})
	if n := testutil.ToFloat64(telemetry.ProviderCalls.WithLabelValues(name, "fake", provider.OpUpdateGroupPeers, "none")); n != 1 {
		t.Errorf("calls{%s,none} = %v, want 1", provider.OpUpdateGroupPeers, n)
	}
}
