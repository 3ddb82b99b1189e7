package fake_test

import (
	"net"
	"net/netip"
	"reflect"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
)

func docStatic() *provider.StaticAddress {
	return &provider.StaticAddress{Address: netip.MustParsePrefix("192.0.2.77/24"), Gateway: netip.MustParseAddr("192.0.2.1"),
		DNS: []netip.Addr{netip.MustParseAddr("192.0.2.53")}}
}

// An instance made with a static address has it as its address, however
// it comes to run: at once, after Provisioning Gets, after a held step,
// started again after a stop. The backend's record keeps what was asked.
func TestStaticAddressIsTheInstanceAddress(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(p *fake.Provider, req provider.CreateRequest) func()
	}{
		{"at once", func(*fake.Provider, provider.CreateRequest) func() { return func() {} }},
		{"after provisioning Gets", func(p *fake.Provider, _ provider.CreateRequest) func() {
			p.SetProvisioningGets(2)
			return func() {}
		}},
		{"after a held step", func(p *fake.Provider, req provider.CreateRequest) func() {
			hold := p.HoldCreate(req.Name)
			return func() {
				hold.Release(nil)
				awaitClosed(t, hold.Done(), "the held step ending")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFake(t)
			req := request("web", "uid-web")
			req.StaticAddress = docStatic()
			release := tc.setup(p, req)
			inst := mustCreate(t, p, req)
			release()
			var got provider.Instance
			for i := 0; i < 4 && got.State != provider.StateRunning; i++ {
				var err error
				if got, err = p.Get(t.Context(), inst.ID); err != nil {
					t.Fatal(err)
				}
			}
			if got.State != provider.StateRunning || got.IP != "192.0.2.77" {
				t.Fatalf("Get = %+v, want Running at the static address 192.0.2.77", got)
			}
			r, _ := p.Backend().Lookup(req.Name)
			if !reflect.DeepEqual(r.StaticAddress, req.StaticAddress) {
				t.Errorf("the record's static address %v, want %v", r.StaticAddress, req.StaticAddress)
			}

			p.SetState(req.Name, provider.StateStopped)
			if again := mustCreate(t, p, req); again.State == provider.StateRunning && again.IP != "192.0.2.77" {
				t.Errorf("started again at %q, want the static address", again.IP)
			}
		})
	}
	t.Run("without one, the pool's", func(t *testing.T) {
		p := newFake(t)
		inst := mustCreate(t, p, request("web", "uid-web"))
		if !pool.Contains(net.ParseIP(inst.IP)) {
			t.Errorf("IP %q outside %v", inst.IP, pool)
		}
	})
}

func TestStaticAddressRefused(t *testing.T) {
	p := newFake(t)
	req := request("web", "uid-web")
	req.StaticAddress = &provider.StaticAddress{Address: netip.MustParsePrefix("127.0.0.9/8")}
	_, err := p.Create(t.Context(), req)
	wantClass(t, "Create with a loopback static address", err, provider.ErrPermanent)
	if _, ok := p.Backend().Lookup(req.Name); ok {
		t.Error("a refused Create made the instance")
	}
}
