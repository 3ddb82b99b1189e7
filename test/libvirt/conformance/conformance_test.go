// Package conformance runs the provider contract's conformance suite
// (internal/provider/providertest) against the real libvirtd of the test
// host (hack/libvirt), through the real provider (internal/provider/libvirt):
// SSH with the pinned host key, the direct-streamlocal channel, libvirtd
// 9.0, QEMU under emulation, the real Debian guest booted from the
// provider's own seed.
//
// The suite's fault knobs act on the real wire: every case's provider
// reaches libvirtd through a libvirthost.Relay of its own, which answers a
// call with the libvirt error a failing host sends (FailNext) or holds calls
// before they reach libvirtd (Block, and HoldCreate on the seed upload of
// the create step). Vanish, Plant, Stop, Inspect and PlantSecondary act on
// libvirtd directly, as a human with virsh would.
//
// It runs only inside the host's namespace: `make test-libvirt` (or
// `go test -exec hack/libvirt/run.sh ./test/libvirt/conformance`); without
// a host it skips (internal/testenv/libvirthost).
//
// Network: everything this test reaches is on the namespace's loopback
// (sshd, the image server); the guests reach nothing (the namespace has no
// route out).
package conformance

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	libvirtrpc "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
)

const (
	// providerName is the configured name the suite's providers carry.
	providerName = "kvm-conformance"
	// pollTimeout bounds every wait for a guest: it boots under emulation
	// in about a minute on an idle machine, several when the cases' guests
	// share its two cores.
	pollTimeout = 12 * time.Minute
	// squidPort is the request's port.
	squidPort = 3128
	// imageCachePrefix starts the image cache's volumes, which stay in the
	// pool by design (one download per host).
	imageCachePrefix = "egress-proxy-image_"
	// instancePrefix starts the names of the suite's instances and so of
	// their volumes: provider.InstanceName of namespace "conformance".
	instancePrefix = "proxy-conformance-"
	// The provider's marks element (internal/provider/libvirt/metadata.go:
	// a stored format, the same for kvm and kvm2).
	metadataURI = "https://egress.proxy-operator.dev/libvirt/instance/v1"
)

// skipped says what the real host cannot offer and what the suite does
// without it; logged at the start, so the log of a run says it.
const skipped = `on the real host: Hold.Done is nil (the relay sees the wire, not the provider's step, so it cannot say when a held step ended): ` +
	`BackgroundResultReachesNextCall/fails/*/next_create skip, and DeleteCancelsInFlightCreate does not check that Delete returned after the step stopped (it still checks that nothing comes back once the hold is let go); ` +
	`Hold.Progress is nil (the step's progress is the provider's own text, not a scripted one); every other case and knob runs on the real libvirtd`

func TestConformance(t *testing.T) {
	h := libvirthost.Require(t)
	guest := h.RequireGuest(t)
	l := h.Connect(t)
	pool, err := l.StoragePoolLookupByName(h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	imageURL, downloads := libvirthost.ImageServer(t, guest)
	s := &suite{
		host: h, guest: guest, imageURL: imageURL, l: l, pool: pool,
		touched: map[string]bool{}, parallel: map[*testing.T]bool{},
	}
	before := libvirthost.VolumeNames(t, l, pool)
	// Registered first, so it runs last: after every case and its cleanup.
	t.Cleanup(func() { s.expectNothingLeft(t, before) })

	s.warmImageCache(t)
	t.Logf("image downloads so far: %d (the cache volume stays in pool %s for the cases)", downloads.Load(), h.Pool)
	t.Log(skipped)
	providertest.Run(t, providertest.Harness{
		Name: providerName,
		Type: libvirt.TypeKVM,
		New:  s.newBackend,
		Request: func(_ *testing.T, proxyName, uid string) provider.CreateRequest {
			return provider.CreateRequest{
				ProxyName: proxyName, UID: uid, Port: squidPort,
				AllowedSourceRanges: []string{libvirthost.SlirpHost + "/32"},
			}
		},
		PollTimeout: pollTimeout,
	})
}

// suite is what every case shares: the host, the image server, the test's
// own connection to libvirtd.
type suite struct {
	host     *libvirthost.Host
	guest    libvirthost.Guest
	imageURL string
	l        *libvirtrpc.Libvirt
	pool     libvirtrpc.StoragePool

	mu       sync.Mutex
	touched  map[string]bool // every domain name a case made or planted
	parallel map[*testing.T]bool
}

func (s *suite) touch(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touched[name] = true
}

// runParallel makes the case (or subtest) t parallel, once: the cases wait
// for guests booting under emulation, and each has its own installation and
// relay, so they cannot see each other. go test's -parallel (GOMAXPROCS, 2
// here) bounds how many run at once, about what two cores boot.
func (s *suite) runParallel(t *testing.T) {
	s.mu.Lock()
	done := s.parallel[t]
	s.parallel[t] = true
	s.mu.Unlock()
	if !done {
		t.Parallel()
	}
}

// newProvider builds the real provider for installation, reaching the
// host through socket.
func (s *suite) newProvider(t *testing.T, installation, socket string) libvirthost.FullProvider {
	t.Helper()
	cfg, errs := libvirt.Parse(s.host.ProviderConfig(socket, s.imageURL, s.guest), nil)
	if len(errs) > 0 {
		t.Fatalf("the test host's provider config: %v", errs.ToAggregate())
	}
	p, err := libvirt.New(providerName, cfg, provider.Options{InstallationID: installation})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// warmImageCache has a provider of its own create and delete one instance,
// so that the image is in the pool's cache before the cases run in
// parallel: otherwise several first Creates would download it at once.
func (s *suite) warmImageCache(t *testing.T) {
	t.Helper()
	start := time.Now()
	installation := "conformance-warm-" + randHex(t)
	p := s.newProvider(t, installation, s.host.Socket)
	defer func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the warm-up provider: %v", err)
		}
	}()
	req := provider.CreateRequest{Namespace: "conformance", ProxyName: "warm", UID: "uid-" + randHex(t), Port: squidPort,
		AllowedSourceRanges: []string{libvirthost.SlirpHost + "/32"}}
	req.Name = provider.InstanceName(req.Namespace, req.ProxyName, req.UID, "")
	s.touch(req.Name)
	// Should a step below fail the test, nothing of the warm-up stays.
	t.Cleanup(func() {
		s.removeDomain(t, req.Name)
		s.removeVolumes(t, func(v string) bool { return strings.HasPrefix(v, req.Name+"_") })
	})
	ctx := context.Background()
	inst, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("warming the image cache: Create: %v", err)
	}
	settle(t, p, inst.ID)
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatalf("warming the image cache: Delete: %v", err)
	}
	t.Logf("image cache warm after %.1fs (instance %s created up to its start, then deleted)", time.Since(start).Seconds(), req.Name)
}

// settle waits until the create step of the instance id has ended: until
// Get answers from the backend (no Progress) instead of from the step in
// flight. A step that failed fails the case: nothing the suite asks for
// makes a plain create fail on a healthy host.
func settle(t *testing.T, p provider.Provider, id string) {
	t.Helper()
	ctx := context.Background()
	last := ""
	testenv.EventuallyNilWithin(t, pollTimeout, "the create step of "+id+" ending", func() error {
		cctx, cancel := context.WithTimeout(ctx, provider.CallBound)
		defer cancel()
		inst, err := p.Get(cctx, id)
		if err != nil {
			t.Fatalf("the create step of %s: Get: %v", id, err)
		}
		if inst.State == provider.StateProvisioning && inst.Progress != "" {
			if inst.Progress != last {
				t.Logf("create step of %s: %s", id, inst.Progress)
				last = inst.Progress
			}
			return fmt.Errorf("still in its create step: %s", inst.Progress)
		}
		return nil
	})
}

// expectNothingLeft is the last word of the suite: the pool holds no
// volume of the suite's instances (all named proxy-conformance-...; the
// other libvirt tests may be filling the same pool meanwhile), only the
// image cache besides what was there, and no domain the cases made or
// planted is left.
func (s *suite) expectNothingLeft(t *testing.T, before []string) {
	after := libvirthost.VolumeNames(t, s.l, s.pool)
	var cache, left []string
	for _, v := range after {
		switch {
		case strings.HasPrefix(v, instancePrefix):
			left = append(left, v)
		case strings.HasPrefix(v, imageCachePrefix) && !slices.Contains(before, v):
			cache = append(cache, v)
		}
	}
	if len(left) > 0 {
		t.Errorf("pool %s after the suite holds volumes of the test: %v", s.host.Pool, left)
	}
	var doms []string
	s.mu.Lock()
	for name := range s.touched {
		if _, err := s.l.DomainLookupByName(name); err == nil {
			doms = append(doms, name)
		}
	}
	n := len(s.touched)
	s.mu.Unlock()
	if len(doms) > 0 {
		t.Errorf("domains of the test left after the suite: %v", doms)
	}
	if len(left) == 0 && len(doms) == 0 {
		t.Logf("after the suite pool %s holds no volume of the test (%d volumes in all; the image cache stays: new in this run %v); none of the %d domains the cases made or planted is left",
			s.host.Pool, len(after), cache, n)
	}
}

// backend is one case's world: its installation, its relay, its provider
// (replaced by Restart), and what the case made, for the checks and the
// cleanup.
type backend struct {
	s            *suite
	installation string
	relay        *libvirthost.Relay

	mu      sync.Mutex
	current libvirthost.FullProvider
	// created are the instances a Create returned without error, by name;
	// settled those whose step was seen to end, gone those deleted or
	// vanished since.
	created, settled, gone map[string]bool
	// plantedDomains and plantedVolumes are what the case planted that
	// the provider must leave alone; removed at cleanup.
	plantedDomains []string
	plantedVolumes []string
}

var (
	_ providertest.Backend          = (*backend)(nil)
	_ providertest.Inspector        = (*backend)(nil)
	_ providertest.Stopper          = (*backend)(nil)
	_ providertest.Slow             = (*backend)(nil)
	_ providertest.Restarter        = (*backend)(nil)
	_ providertest.SecondaryPlanter = (*backend)(nil)
)

// newBackend is Harness.New.
func (s *suite) newBackend(t *testing.T, installation string) (provider.Provider, providertest.Backend) {
	s.runParallel(t)
	b := &backend{
		s: s, installation: installation, relay: libvirthost.NewRelay(t, s.host.Socket),
		created: map[string]bool{}, settled: map[string]bool{}, gone: map[string]bool{},
	}
	p := b.watch(s.newProvider(t, installation, b.relay.Path))
	b.current = p
	t.Cleanup(func() { b.cleanup(t) })
	return p, b
}

// watch records what p's calls made.
func (b *backend) watch(p libvirthost.FullProvider) libvirthost.FullProvider {
	return libvirthost.Observe(p, libvirthost.Hooks{
		Create: func(req provider.CreateRequest, _ provider.Instance, err error) {
			b.s.touch(req.Name)
			if err == nil {
				b.mu.Lock()
				b.created[req.Name] = true
				delete(b.gone, req.Name)
				b.mu.Unlock()
			}
		},
		Delete: func(id string, err error) {
			if name, ok := nameOf(id); ok && err == nil {
				b.mu.Lock()
				b.gone[name] = true
				b.mu.Unlock()
			}
		},
	})
}

func (b *backend) live() libvirthost.FullProvider {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.current
}

func idOf(name string) string { return "hosts/" + libvirthost.ProviderHostName + "/domains/" + name }

func nameOf(id string) (string, bool) {
	return strings.CutPrefix(id, "hosts/"+libvirthost.ProviderHostName+"/domains/")
}

// settleAll waits until no create step of the case runs, so that the next
// call of the case is the only traffic on its relay: a knob armed then
// meets that call and nothing else.
func (b *backend) settleAll(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	var pending []string
	for name := range b.created {
		if !b.settled[name] && !b.gone[name] {
			pending = append(pending, name)
		}
	}
	b.mu.Unlock()
	for _, name := range pending {
		b.settleOne(t, name)
	}
}

func (b *backend) settleOne(t *testing.T, name string) {
	t.Helper()
	b.mu.Lock()
	done := b.settled[name] || b.gone[name] || !b.created[name]
	b.mu.Unlock()
	if done {
		return
	}
	settle(t, provider.Unwrap(b.live()), idOf(name))
	b.mu.Lock()
	b.settled[name] = true
	b.mu.Unlock()
}

// injected is the libvirt error a host sends that the provider must
// classify as class: the codes and texts libvirtd uses (errors.go).
func injected(class error) libvirtrpc.Error {
	const note = " (answer injected by the conformance relay)"
	switch {
	case errors.Is(class, provider.ErrNotFound):
		return libvirtrpc.Error{Code: uint32(libvirtrpc.ErrNoDomain), Message: "Domain not found" + note}
	case errors.Is(class, provider.ErrPermanent):
		return libvirtrpc.Error{Code: uint32(libvirtrpc.ErrAccessDenied), Message: "access denied" + note}
	case errors.Is(class, provider.ErrQuotaExceeded):
		return libvirtrpc.Error{Code: uint32(libvirtrpc.ErrInternalError), Message: "cannot allocate: No space left on device" + note}
	default:
		return libvirtrpc.Error{Code: uint32(libvirtrpc.ErrOperationFailed), Message: "operation failed: the host is busy" + note}
	}
}

// FailNext answers, on the case's relay, the call through which op first
// asks libvirtd something with the error class deserves: Create's,
// Delete's and Get's lookup of the domain by name, ListByTag's listing of
// the domains. A domain gone between Get's lookup and its read of the
// marks is what a real NotFound of an existing ID looks like (a lookup that
// finds nothing is an interrupted create when the instance's volumes are
// there). The case's create steps are let finish first, so that only the
// call of op meets the answer.
func (b *backend) FailNext(t *testing.T, op string, class error) {
	t.Helper()
	b.settleAll(t)
	proc := uint32(libvirthost.ProcDomainLookupByName)
	switch {
	case op == provider.OpList:
		proc = libvirthost.ProcConnectListAllDomains
	case op == provider.OpGet && errors.Is(class, provider.ErrNotFound):
		proc = libvirthost.ProcDomainGetMetadata
	}
	b.relay.FailNext(libvirthost.Procedures(proc), injected(class))
}

// Block holds every call on the case's relay, as a host that stopped
// answering does, once the case's create steps ended.
func (b *backend) Block(t *testing.T, op string) func() {
	t.Helper()
	b.settleAll(t)
	gate := b.relay.Hold(libvirthost.AnyCall, false)
	return func() { gate.Release(nil) }
}

// HoldCreate holds the seed upload of name's next create step (the first
// write of the step, and a call whose budget is an upload's, so a long hold
// does not make the provider declare the connection wedged). Released with
// nil it reaches libvirtd; with a class it is answered with that class's
// error and never reaches libvirtd.
func (b *backend) HoldCreate(t *testing.T, name string) providertest.Hold {
	t.Helper()
	gate := b.relay.Hold(libvirthost.ProceduresMentioning(name, libvirthost.ProcStorageVolUpload), true)
	return providertest.Hold{Release: func(err error) {
		if err == nil {
			gate.Release(nil)
			return
		}
		e := injected(err)
		gate.Release(&e)
	}}
}

// Restart closes the provider (its steps are cancelled and its connections
// dropped, with whatever the relay held for them) and builds a fresh one
// over the same relay and host.
func (b *backend) Restart(t *testing.T) provider.Provider {
	t.Helper()
	old := b.live()
	if err := old.Close(); err != nil {
		t.Errorf("closing the provider for the restart: %v", err)
	}
	p := b.watch(b.s.newProvider(t, b.installation, b.relay.Path))
	b.mu.Lock()
	b.current = p
	b.settled = map[string]bool{}
	b.mu.Unlock()
	return p
}

// Vanish removes the instance as a human with virsh would, once its create
// step ended (a step still running would make it again): the domain
// destroyed and undefined, and its volumes deleted.
func (b *backend) Vanish(t *testing.T, id string) {
	t.Helper()
	name, ok := nameOf(id)
	if !ok {
		t.Fatalf("Vanish(%q): not an ID of host %s", id, libvirthost.ProviderHostName)
	}
	b.settleOne(t, name)
	b.s.removeDomain(t, name)
	b.s.removeVolumes(t, func(v string) bool { return strings.HasPrefix(v, name+"_") })
	b.mu.Lock()
	b.gone[name] = true
	b.mu.Unlock()
}

// Plant defines a small domain named name (not started) carrying marks in
// the provider's metadata element, or none. Started (by an adopting
// Create), it runs SeaBIOS with nothing to boot.
func (b *backend) Plant(t *testing.T, name string, marks *provider.Marks) {
	t.Helper()
	b.s.touch(name)
	md := ""
	if marks != nil {
		md = "<metadata>" + metadataElement(*marks, time.Now()) + "</metadata>"
	}
	x := fmt.Sprintf(`<domain type='%s'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>%s
  <devices><memballoon model='none'/></devices></domain>`, b.s.host.DomainType, name, md)
	if _, err := b.s.l.DomainDefineXML(x); err != nil {
		t.Fatalf("Plant(%q): %v", name, err)
	}
	b.mu.Lock()
	b.plantedDomains = append(b.plantedDomains, name)
	b.mu.Unlock()
}

// metadataElement is the marks' element as the provider writes it.
func metadataElement(m provider.Marks, createdAt time.Time) string {
	var sb strings.Builder
	sb.WriteString(`<egressproxy:instance xmlns:egressproxy="` + metadataURI + `">`)
	field := func(tag, v string) {
		if v == "" {
			return
		}
		sb.WriteString("<egressproxy:" + tag + ">")
		_ = xml.EscapeText(&sb, []byte(v))
		sb.WriteString("</egressproxy:" + tag + ">")
	}
	if m.Managed {
		field("managed", provider.MarkManagedValue)
	}
	field("uid", m.UID)
	field("installation", m.Installation)
	field("createdAt", createdAt.UTC().Format(time.RFC3339))
	sb.WriteString("</egressproxy:instance>")
	return sb.String()
}

// Inspect reads the domain named name and its marks element.
func (b *backend) Inspect(t *testing.T, name string) (*provider.Marks, bool) {
	t.Helper()
	dom, err := b.s.l.DomainLookupByName(name)
	if libvirthost.IsError(err, libvirtrpc.ErrNoDomain) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	marks, err := b.s.marksOf(dom)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	return marks, true
}

// marksOf reads a domain's marks element (nil when it has none).
func (s *suite) marksOf(dom libvirtrpc.Domain) (*provider.Marks, error) {
	raw, err := s.l.DomainGetMetadata(dom, int32(libvirtrpc.DomainMetadataElement), libvirtrpc.OptString{metadataURI}, libvirtrpc.DomainAffectConfig)
	if libvirthost.IsError(err, libvirtrpc.ErrNoDomainMetadata) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var md struct {
		Managed      string `xml:"managed"`
		UID          string `xml:"uid"`
		Installation string `xml:"installation"`
	}
	if err := xml.Unmarshal([]byte(raw), &md); err != nil {
		return nil, fmt.Errorf("the marks element of %s: %w: %s", dom.Name, err, raw)
	}
	return &provider.Marks{Managed: md.Managed == provider.MarkManagedValue, UID: md.UID, Installation: md.Installation}, nil
}

// Stop shuts the guest down cleanly (systemctl poweroff, run through its
// guest agent) and waits until the domain is shut off. Not a hard
// power-off: one during the guest's first boot can lose what cloud-init
// wrote and had not flushed yet (seen here: an empty
// 10-cloud-init-ens2.network, after which the guest never got an address
// again), which tests the guest image, not the provider. Not the agent's
// guest-shutdown nor the ACPI button either: the test guest runs no D-Bus,
// which shutdown(8) and logind need; systemctl reaches systemd without it.
func (b *backend) Stop(t *testing.T, id string) {
	t.Helper()
	name, ok := nameOf(id)
	if !ok {
		t.Fatalf("Stop(%q): not an ID of host %s", id, libvirthost.ProviderHostName)
	}
	dom, err := b.s.l.DomainLookupByName(name)
	if err != nil {
		t.Fatalf("Stop(%q): %v", id, err)
	}
	// Not waited for: the agent stops with the guest.
	poweroff := `{"execute":"guest-exec","arguments":{"path":"/bin/systemctl","arg":["poweroff"]}}`
	if _, err := b.s.l.QEMUDomainAgentCommand(dom, poweroff, 10, 0); err != nil {
		t.Fatalf("Stop(%q): systemctl poweroff through the guest agent: %v", id, err)
	}
	start := time.Now()
	testenv.EventuallyNilWithin(t, pollTimeout, "domain "+name+" shut off after systemctl poweroff in the guest", func() error {
		state, _, err := b.s.l.DomainGetState(dom, 0)
		if err != nil {
			return err
		}
		if libvirtrpc.DomainState(state) != libvirtrpc.DomainShutoff {
			return fmt.Errorf("state %d", state)
		}
		return nil
	})
	t.Logf("domain %s shut down from inside the guest in %.1fs", name, time.Since(start).Seconds())
}

// PlantSecondary makes a small volume named as the provider names an
// instance's overlay, for the installation and UID of marks (volumes carry
// their marks in their names). The step of an instance the case created
// is let finish first: it makes that overlay itself, and this one is then
// left as it is.
func (b *backend) PlantSecondary(t *testing.T, instance string, marks provider.Marks) {
	t.Helper()
	b.settleOne(t, instance)
	name := instance + "_" + installationTag(marks.Installation) + "_" + marks.UID + "_disk.qcow2"
	x := fmt.Sprintf(`<volume><name>%s</name><capacity unit='bytes'>%d</capacity><target><format type='qcow2'/></target></volume>`, name, 1<<20)
	if _, err := b.s.l.StorageVolCreateXML(b.s.pool, x, 0); err != nil && !libvirthost.IsError(err, libvirtrpc.ErrStorageVolExist) {
		t.Fatalf("PlantSecondary(%q): %v", instance, err)
	}
	if marks.Installation != b.installation {
		b.mu.Lock()
		b.plantedVolumes = append(b.plantedVolumes, name)
		b.mu.Unlock()
	}
}

// installationTag is the provider's tag of an installation in volume
// names (volume.go: a stored format).
func installationTag(installation string) string {
	sum := sha256.Sum256([]byte(installation))
	return hex.EncodeToString(sum[:])[:10]
}

// cleanup ends the case: the relay lets everything through, the provider
// deletes every instance the case made or it lists, and then the case's
// installation must have nothing left on the host (a domain with its
// marks, a volume with its tag): what is left is a failure of the
// provider's Delete, removed here so that it does not spill into other
// cases. What the case planted is removed last.
func (b *backend) cleanup(t *testing.T) {
	b.relay.Reset()
	p := b.live()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ids := map[string]bool{}
	b.mu.Lock()
	for name := range b.created {
		ids[idOf(name)] = true
	}
	b.mu.Unlock()
	if list, err := p.ListByTag(ctx); err != nil {
		t.Errorf("cleanup: ListByTag: %v", err)
	} else {
		for _, in := range list {
			ids[in.ID] = true
		}
	}
	for id := range ids {
		// As the reconciler does: a Transient answer (a volume libvirtd
		// still allocates for a step Delete cancelled) is tried again.
		var last error
		testenv.EventuallyNilWithin(t, 2*time.Minute, "cleanup: Delete("+id+")", func() error {
			last = p.Delete(ctx, id)
			if last != nil && !errors.Is(last, provider.ErrTransient) {
				return nil
			}
			return last
		})
		if last != nil {
			t.Errorf("cleanup: Delete(%q): %v", id, last)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("cleanup: Close: %v", err)
	}

	s := b.s
	doms, _, err := s.l.ConnectListAllDomains(1, libvirtrpc.ConnectListDomainsActive|libvirtrpc.ConnectListDomainsInactive)
	if err != nil {
		t.Errorf("cleanup: listing the domains: %v", err)
	}
	for _, d := range doms {
		marks, err := s.marksOf(d)
		if err != nil || marks == nil || !marks.Managed || marks.Installation != b.installation {
			continue // not the provider's: planted ones are removed below
		}
		t.Errorf("the provider left domain %s (marks %+v) after deleting every instance of installation %s", d.Name, *marks, b.installation)
		s.removeDomain(t, d.Name)
	}
	tag := "_" + installationTag(b.installation) + "_"
	for _, v := range s.removeVolumes(t, func(v string) bool { return strings.Contains(v, tag) }) {
		t.Errorf("the provider left volume %s after deleting every instance of installation %s", v, b.installation)
	}

	b.mu.Lock()
	planted, plantedVols := b.plantedDomains, b.plantedVolumes
	b.mu.Unlock()
	for _, name := range planted {
		s.removeDomain(t, name)
	}
	set := map[string]bool{}
	for _, v := range plantedVols {
		set[v] = true
	}
	s.removeVolumes(t, func(v string) bool { return set[v] })
}

// removeDomain destroys and undefines the domain named name, if there.
func (s *suite) removeDomain(t *testing.T, name string) { libvirthost.RemoveDomain(t, s.l, name) }

// removeVolumes deletes the pool's volumes whose names match, and returns
// their names.
func (s *suite) removeVolumes(t *testing.T, match func(string) bool) []string {
	return libvirthost.RemoveVolumes(t, s.l, s.pool, match)
}

func randHex(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
