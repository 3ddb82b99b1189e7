package lvtest

import (
	"encoding/json"
	"net/netip"
	"os/exec"
	"testing"

	libvirtrpc "github.com/digitalocean/go-libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
)

// BridgeAddress gives the namespace's bridge an address for the test.
func BridgeAddress(t *testing.T, bridge string, p netip.Prefix) {
	t.Helper()
	if out, err := exec.Command("ip", "addr", "add", p.String(), "dev", bridge).CombinedOutput(); err != nil {
		t.Fatalf("ip addr add %s dev %s: %v: %s", p, bridge, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "addr", "del", p.String(), "dev", bridge).CombinedOutput(); err != nil {
			t.Errorf("ip addr del %s dev %s: %v: %s", p, bridge, err, out)
		}
	})
	if err := libvirthost.Contained(); err != nil {
		t.Fatalf("with %s on %s: %v", p, bridge, err)
	}
}

// OnBridge is the provider block with the host's NICs on the bridge
// instead of user-mode networking, and Squid allowed to reach the
// namespace's side of the bridge (the origin).
func OnBridge(t *testing.T, block []byte, bridge string, gateway netip.Addr) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(block, &cfg); err != nil {
		t.Fatal(err)
	}
	hosts := cfg["hosts"].([]any)
	host := hosts[0].(map[string]any)
	delete(host, "userNetworking")
	host["bridge"] = bridge
	cfg["allowedDestinations"] = []string{gateway.String() + "/32"}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Nth is the n-th address of an IPv4 prefix.
func Nth(p netip.Prefix, n byte) netip.Addr {
	b := p.Addr().As4()
	b[3] += n
	return netip.AddrFrom4(b)
}

// OnTheBridge is what a test of guests on the host's bridge starts from:
// the host, its guest image, a connection, the storage pool, and the
// namespace's side of the bridge (the first address of
// libvirthost.BridgeNet, given to the bridge for the test), where the
// echo and the origin listen.
type OnTheBridge struct {
	Host    *libvirthost.Host
	Guest   libvirthost.Guest
	L       *libvirtrpc.Libvirt
	Pool    libvirtrpc.StoragePool
	Gateway netip.Addr
}

// StartOnTheBridge requires the host and its guest and sets the bridge up.
func StartOnTheBridge(t *testing.T) OnTheBridge {
	t.Helper()
	h := libvirthost.Require(t)
	b := OnTheBridge{Host: h, Guest: h.RequireGuest(t), L: h.Connect(t), Gateway: Nth(libvirthost.BridgeNet, 1)}
	var err error
	if b.Pool, err = b.L.StoragePoolLookupByName(h.Pool); err != nil {
		t.Fatal(err)
	}
	BridgeAddress(t, h.Bridge, netip.PrefixFrom(b.Gateway, libvirthost.BridgeNet.Bits()))
	return b
}
