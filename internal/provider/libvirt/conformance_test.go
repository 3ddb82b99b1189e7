package libvirt

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// conformanceName is the configured name of the suite's providers.
const conformanceName = "kvm-fake"

// TestConformance runs the contract suite against the provider over the
// fake host (fake_test.go): a fresh host, image server and provider per
// case, guests that boot from their seed when their domain starts (so a
// static address in the seed is what the guest agent reports). The real
// libvirtd runs the same suite in test/libvirt/conformance.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Name: conformanceName,
		Type: TypeKVM2,
		New:  newConformanceBackend,
		Request: func(_ *testing.T, proxyName, uid string) provider.CreateRequest {
			return provider.CreateRequest{Port: 3128, AllowedSourceRanges: []string{"10.1.0.0/16"}}
		},
		StaticAddress: providertest.StaticAddressFor(Profile()),
	})
}

// conformanceBackend is the suite's hand on the fake host.
type conformanceBackend struct {
	h *fakeHost
	p *Provider
}

var (
	_ providertest.Backend   = (*conformanceBackend)(nil)
	_ providertest.Inspector = (*conformanceBackend)(nil)
	_ providertest.Stopper   = (*conformanceBackend)(nil)

	_ providertest.SecondaryPlanter = (*conformanceBackend)(nil)
)

func newConformanceBackend(t *testing.T, installation string) (provider.Provider, providertest.Backend) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	h.bootOnStart = true
	cfg := Config{SSHKeyFile: "/etc/k", KnownHostsFile: "/etc/kh", DiskSizeGiB: 1,
		Images: map[string]Image{"debian-12": {URL: srv.URL + "/debian-12.qcow2", SHA256: testImageSHA()}},
		Hosts:  []Host{{Name: h.name, Address: "192.0.2.1", User: "virt", Bridge: "br0"}}}
	p, err := New(conformanceName, cfg, provider.Options{InstallationID: installation})
	if err != nil {
		t.Fatal(err)
	}
	p.table = newHostTable(fakeHosts{h.name: h}.connect)
	p.http = srv.Client()
	t.Cleanup(func() { _ = p.Close() })
	return p, &conformanceBackend{h: h, p: p}
}

// settle waits until no create step runs, so that a fault armed next meets
// the call the suite makes next, not a step's.
func (b *conformanceBackend) settle(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, "the create steps end", func() bool { return b.p.steps.Len() == 0 })
}

// rpcOf is the call through which op first asks the host something: the
// domain's lookup by name (Create, Get, Delete), the listing (ListByTag);
// for a Get that must find nothing, the read of the marks (a lookup that
// finds no domain is an interrupted create while volumes are there).
func rpcOf(op string, class error) string {
	switch {
	case op == provider.OpList:
		return "ConnectListAllDomains"
	case op == provider.OpGet && errors.Is(class, provider.ErrNotFound):
		return "DomainGetMetadata"
	}
	return "DomainLookupByName"
}

// injected is the libvirt error a host answers that the provider must
// classify as class (the codes and texts of errors.go).
func injected(class error) error {
	switch {
	case errors.Is(class, provider.ErrNotFound):
		return lvErr(libvirt.ErrNoDomain, "Domain not found: no domain with matching name")
	case errors.Is(class, provider.ErrPermanent):
		return lvErr(libvirt.ErrAccessDenied, "access denied")
	case errors.Is(class, provider.ErrQuotaExceeded):
		return lvErr(libvirt.ErrInternalError, "cannot allocate: No space left on device")
	}
	return lvErr(libvirt.ErrOperationFailed, "operation failed: the host is busy")
}

func (b *conformanceBackend) FailNext(t *testing.T, op string, class error) {
	b.settle(t)
	b.h.failNext(rpcOf(op, class), injected(class))
}

// Block holds op's first call, or every new connection for Check (which
// dials afresh).
func (b *conformanceBackend) Block(t *testing.T, op string) func() {
	b.settle(t)
	if op == provider.OpCheck {
		g := newFakeGate()
		b.h.mu.Lock()
		b.h.dialGate = g
		b.h.mu.Unlock()
		return g.open
	}
	return b.h.hold(rpcOf(op, nil)).open
}

func (b *conformanceBackend) name(t *testing.T, id string) string {
	t.Helper()
	_, name, err := parseID(id)
	if err != nil {
		t.Fatalf("%q: %v", id, err)
	}
	return name
}

// Vanish removes the domain and its volumes, as a human with virsh
// would, once its create step ended.
func (b *conformanceBackend) Vanish(t *testing.T, id string) {
	b.settle(t)
	name := b.name(t, id)
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	delete(b.h.domains, name)
	for _, pool := range b.h.pools {
		for v := range pool.vols {
			if strings.HasPrefix(v, name+"_") {
				delete(pool.vols, v)
			}
		}
	}
}

// Plant defines a domain named name, shut off, with no NIC or disk,
// carrying marks in the provider's metadata element (or none).
func (b *conformanceBackend) Plant(t *testing.T, name string, marks *provider.Marks) {
	md := ""
	if marks != nil {
		x, err := buildMetadata(*marks, time.Now(), "", "", false)
		if err != nil {
			t.Fatal(err)
		}
		md = "<metadata>" + x + "</metadata>"
	}
	x := fmt.Sprintf("<domain type='qemu'><name>%s</name>%s</domain>", name, md)
	meta, err := fakeMetadataOf(x)
	if err != nil {
		t.Fatal(err)
	}
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	b.h.domains[name] = &fakeDomain{dom: libvirt.Domain{Name: name, ID: -1}, xml: x, state: libvirt.DomainShutoff,
		metadata: meta, ifaces: map[libvirt.DomainInterfaceAddressesSource][]libvirt.DomainInterface{}}
}

func (b *conformanceBackend) Inspect(t *testing.T, name string) (*provider.Marks, bool) {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	d, ok := b.h.domains[name]
	if !ok {
		return nil, false
	}
	raw, ok := d.metadata[metadataURI]
	if !ok {
		return nil, true
	}
	md, err := parseMetadata(raw)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	return &md.Marks, true
}

// Stop shuts the domain off; its guest loses its address until it boots
// again.
func (b *conformanceBackend) Stop(t *testing.T, id string) {
	b.settle(t)
	name := b.name(t, id)
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	d, ok := b.h.domains[name]
	if !ok {
		t.Fatalf("Stop(%q): no domain", id)
	}
	d.state = libvirt.DomainShutoff
	d.ifaces = map[libvirt.DomainInterfaceAddressesSource][]libvirt.DomainInterface{}
}

// PlantSecondary makes a small volume named as the provider names an
// instance's overlay for marks' installation and UID (volumes carry their
// marks in their names), once the instance's create step ended (it makes
// that overlay itself, which is then left as it is).
func (b *conformanceBackend) PlantSecondary(t *testing.T, instance string, marks provider.Marks) {
	b.settle(t)
	name := overlayName(instance, marks.Installation, marks.UID)
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	pool := b.h.pools[DefaultPool]
	if _, ok := pool.vols[name]; ok {
		return
	}
	v := libvirt.StorageVol{Pool: DefaultPool, Name: name, Key: "/var/lib/libvirt/images/" + name}
	pool.vols[name] = &fakeVol{vol: v, capacity: 1 << 20,
		xml: fmt.Sprintf("<volume><name>%s</name><capacity unit='bytes'>%d</capacity><target><format type='qcow2'/></target></volume>", name, 1<<20)}
}
