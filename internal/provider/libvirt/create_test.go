package libvirt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// testImage is the catalogue image of the lifecycle tests, served by
// imageServer.
var testImage = []byte(strings.Repeat("QFI\xfb fake qcow2 image ", 4096))

func testImageSHA() string {
	sum := sha256.Sum256(testImage)
	return hex.EncodeToString(sum[:])
}

// imageServer serves testImage at /debian-12.qcow2 on loopback and counts
// the GETs.
type imageServer struct {
	*httptest.Server
	gets atomic.Int32
	// gate, when set, holds every GET until closed.
	gate chan struct{}
}

func newImageServer(t *testing.T) *imageServer {
	t.Helper()
	s := &imageServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			s.gets.Add(1)
			if s.gate != nil {
				select {
				case <-s.gate:
				case <-r.Context().Done():
					return
				}
			}
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "debian-12.qcow2", time.Time{}, strings.NewReader(string(testImage)))
	}))
	t.Cleanup(s.Close)
	return s
}

// newLifecycleProvider is a provider over fake hosts with a one-image
// catalogue served by srv and a 1 GiB disk.
func newLifecycleProvider(t *testing.T, srv *imageServer, hosts ...*fakeHost) *Provider {
	t.Helper()
	p := buildFakeProvider(t, Config{SSHKeyFile: "/etc/k", KnownHostsFile: "/etc/kh", DiskSizeGiB: 1,
		Images: map[string]Image{"debian-12": {URL: srv.URL + "/debian-12.qcow2", SHA256: testImageSHA()}}}, hosts...)
	p.http = srv.Client()
	return p
}

func testRequest(name string) provider.CreateRequest {
	return provider.CreateRequest{Name: name, Namespace: "team-a", ProxyName: "egress", UID: "0c7a5e4e-1111-4e4e-9a9a-000000000001",
		Port: 3128, AllowedSourceRanges: []string{"10.1.0.0/16"}}
}

// stepFailure waits for Get to report the failure of the instance's
// create step, and returns it.
func stepFailure(t *testing.T, p *Provider, id string) error {
	t.Helper()
	var stepErr error
	testenv.EventuallyNil(t, "Get reports the failed create step", func() error {
		got, err := p.Get(context.Background(), id)
		if err != nil {
			stepErr = err
			return nil
		}
		return errors.New("no error yet: " + string(got.State) + " " + got.Progress)
	})
	return stepErr
}

// waitSteps waits until no create step is in flight or unreported.
func waitSteps(t *testing.T, p *Provider) {
	t.Helper()
	testenv.Eventually(t, "the create steps end", func() bool { return p.steps.Len() == 0 })
}

// giveAddress makes the fake guest agent report ip on the domain's NIC.
func giveAddress(h *fakeHost, name, ip string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.domains[name].ifaces[libvirt.DomainInterfaceAddressesSrcAgent] = []libvirt.DomainInterface{{
		Name: "eth0", Hwaddr: libvirt.OptString{domainMAC(name)},
		Addrs: []libvirt.DomainIPAddr{{Type: int32(libvirt.IPAddrTypeIpv4), Addr: ip, Prefix: 24}},
	}}
}

// poolVolumeNames are the volumes in the fake's default pool.
func poolVolumeNames(h *fakeHost) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return config.SortedKeys(h.pools[DefaultPool].vols)
}

func domainState(h *fakeHost, name string) (libvirt.DomainState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.domains[name]
	if !ok {
		return 0, false
	}
	return d.state, true
}

func setDomainState(h *fakeHost, name string, s libvirt.DomainState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.domains[name].state = s
}

// createRunning creates name on h through p and waits for it to run with
// an address.
func createRunning(t *testing.T, p *Provider, h *fakeHost, name string) provider.Instance {
	t.Helper()
	ctx := context.Background()
	inst, err := p.Create(ctx, testRequest(name))
	if err != nil {
		t.Fatal(err)
	}
	waitSteps(t, p)
	giveAddress(h, name, "192.0.2.50")
	got, err := p.Get(ctx, inst.ID)
	if err != nil || got.State != provider.StateRunning {
		t.Fatalf("Get after the step: %+v, %v", got, err)
	}
	return got
}

// Seed gap (kvm, kvm2): "Create blocks, including the first image
// download on each host." Create returns Provisioning with the download's
// progress while the image server holds the body, and the step finishes
// the instance once it is let go.
func TestGapCreateBlocksOnTheFirstImageDownload(t *testing.T) {
	srv := newImageServer(t)
	srv.gate = make(chan struct{})
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	name := "proxy-team-a-egress-0123456789"

	inst, err := p.Create(ctx, testRequest(name))
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != provider.StateProvisioning || inst.ID != formatID("h1", name) || inst.UID != testRequest(name).UID {
		t.Fatalf("Create: %+v", inst)
	}
	testenv.EventuallyNil(t, "Get reports the download in progress", func() error {
		got, err := p.Get(ctx, inst.ID)
		if err != nil {
			return err
		}
		if got.State != provider.StateProvisioning || !strings.Contains(got.Progress, "image debian-12") {
			return errors.New(got.Progress)
		}
		return nil
	})
	// A second Create joins the step in flight.
	again, err := p.Create(ctx, testRequest(name))
	if err != nil || again.State != provider.StateProvisioning {
		t.Fatalf("second Create: %+v, %v", again, err)
	}
	close(srv.gate)
	waitSteps(t, p)
	if n := srv.gets.Load(); n != 1 {
		t.Fatalf("the image was fetched %d times, want once", n)
	}
	if s, ok := domainState(h, name); !ok || s != libvirt.DomainRunning {
		t.Fatalf("domain after the step: %v %v", s, ok)
	}
	got, err := p.Get(ctx, inst.ID)
	if err != nil || got.State != provider.StateProvisioning || got.IP != "" {
		t.Fatalf("Get before the agent reports an address: %+v, %v", got, err)
	}
	giveAddress(h, name, "192.0.2.50")
	got, err = p.Get(ctx, inst.ID)
	if err != nil || got.State != provider.StateRunning || got.IP != "192.0.2.50" || got.UID != testRequest(name).UID || got.CreatedAt.IsZero() {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	vols := poolVolumeNames(h)
	for _, want := range []string{overlayName(name, "test", got.UID), seedName(name, "test", got.UID)} {
		if !slices.Contains(vols, want) {
			t.Errorf("pool lacks %s: %v", want, vols)
		}
	}
}

// Create resumes after a failure at every step: the failure is the next
// Get's error, once, with its class; the next Create goes on from what the
// host holds; in the end there is one domain and one overlay and seed.
func TestCreateResumesAfterEveryPartialStep(t *testing.T) {
	for _, rpc := range []string{
		"StoragePoolGetInfo", "ConnectGetCapabilities", "StorageVolCreateXML", "StorageVolUpload",
		"StoragePoolRefresh", "StorageVolGetPath", "DomainDefineXML", "DomainCreate",
	} {
		t.Run(rpc, func(t *testing.T) {
			srv := newImageServer(t)
			h := newFakeHost("h1")
			p := newLifecycleProvider(t, srv, h)
			ctx := context.Background()
			name := "proxy-team-a-egress-0123456789"
			h.failNext(rpc, lvErr(libvirt.ErrInternalError, "internal error: injected failure of %s", rpc))
			inst, err := p.Create(ctx, testRequest(name))
			if err != nil {
				t.Fatal(err)
			}
			stepErr := stepFailure(t, p, inst.ID)
			if !errors.Is(stepErr, provider.ErrTransient) || !strings.Contains(stepErr.Error(), "injected failure of "+rpc) {
				t.Fatalf("the step's failure: %v", stepErr)
			}
			// Reported once: now Get reads what the host holds.
			got, err := p.Get(ctx, inst.ID)
			if err != nil && !errors.Is(err, provider.ErrNotFound) {
				t.Fatalf("Get after the failure was reported: %v", err)
			}
			if err == nil && got.State == provider.StateRunning {
				t.Fatalf("Get after the failure: %+v", got)
			}
			if _, err := p.Create(ctx, testRequest(name)); err != nil {
				t.Fatal(err)
			}
			waitSteps(t, p)
			giveAddress(h, name, "192.0.2.50")
			got, err = p.Get(ctx, inst.ID)
			if err != nil || got.State != provider.StateRunning {
				t.Fatalf("Get after the resume: %+v, %v", got, err)
			}
			want := []string{imageMarkerName(imageRefOf(t, p)), imageVolumeName(imageRefOf(t, p)),
				overlayName(name, "test", got.UID), seedName(name, "test", got.UID)}
			slices.Sort(want)
			if vols := poolVolumeNames(h); !slices.Equal(vols, want) {
				t.Fatalf("pool after the resume: %v, want %v", vols, want)
			}
		})
	}
}

func imageRefOf(t *testing.T, p *Provider) imageRef {
	t.Helper()
	img, err := p.placeImage("")
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Seed gap (kvm): "Create can return ErrNotFound when a volume or domain
// disappears during the call." A volume that vanishes under the step is
// Transient, and the next Create makes it again.
func TestGapCreateReturnsNotFoundWhenAVolumeVanishes(t *testing.T) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	name := "proxy-team-a-egress-0123456789"
	h.failNext("StorageVolGetPath", lvErr(libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching path"))
	inst, err := p.Create(ctx, testRequest(name))
	if err != nil {
		t.Fatal(err)
	}
	stepErr := stepFailure(t, p, inst.ID)
	if errors.Is(stepErr, provider.ErrNotFound) || !errors.Is(stepErr, provider.ErrTransient) || !strings.Contains(stepErr.Error(), "vanished") {
		t.Fatalf("a volume vanishing under Create: %v (want Transient, never NotFound)", stepErr)
	}
}

// The capacity precheck: a pool without room for the image, the disk and
// the seed, or a host without the machine type's memory, is QuotaExceeded
// with the figures; nothing is made.
func TestGapNoQuotaOrCapacityDetection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(h *fakeHost)
		want  []string
	}{
		{"pool full", func(h *fakeHost) { h.pools[DefaultPool].available = 512 << 20 },
			[]string{"storage pool default has 512 MiB free", "needs 1.0 GiB", "image debian-12", "not cached yet"}},
		{"memory short", func(h *fakeHost) { h.freeMemory = 256 << 20 },
			[]string{"256 MiB of memory free", "machine type default needs 1.0 GiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newImageServer(t)
			h := newFakeHost("h1")
			tc.setup(h)
			p := newLifecycleProvider(t, srv, h)
			ctx := context.Background()
			name := "proxy-team-a-egress-0123456789"
			inst, err := p.Create(ctx, testRequest(name))
			if err != nil {
				t.Fatal(err)
			}
			stepErr := stepFailure(t, p, inst.ID)
			if !errors.Is(stepErr, provider.ErrQuotaExceeded) {
				t.Fatalf("%v, want QuotaExceeded", stepErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stepErr.Error(), w) {
					t.Errorf("message lacks %q: %v", w, stepErr)
				}
			}
			if vols := poolVolumeNames(h); len(vols) != 0 {
				t.Errorf("a refused create left volumes: %v", vols)
			}
			if n := srv.gets.Load(); n != 0 {
				t.Errorf("a refused create downloaded the image %d times", n)
			}
		})
	}
}

// Seed gap (kvm, kvm2): "No reused-overlay check: an existing overlay is
// reused without checking its backing image or size." An overlay of
// another size or on another backing image is rebuilt; the right one is
// reused as it is.
func TestGapNoReusedOverlayCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		overlay func(p *Provider, imagePath string) volumeSpec
		reused  bool
	}{
		{"matching", func(p *Provider, path string) volumeSpec {
			return volumeSpec{CapacityBytes: 1 << 30, Format: FormatQCOW2, BackingPath: path, BackingFormat: FormatQCOW2}
		}, true},
		{"other size", func(p *Provider, path string) volumeSpec {
			return volumeSpec{CapacityBytes: 2 << 30, Format: FormatQCOW2, BackingPath: path, BackingFormat: FormatQCOW2}
		}, false},
		{"other backing image", func(p *Provider, path string) volumeSpec {
			return volumeSpec{CapacityBytes: 1 << 30, Format: FormatQCOW2, BackingPath: "/var/lib/libvirt/images/old.qcow2", BackingFormat: FormatQCOW2}
		}, false},
		{"not an overlay", func(p *Provider, path string) volumeSpec {
			return volumeSpec{CapacityBytes: 1 << 30, Format: FormatQCOW2}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newImageServer(t)
			h := newFakeHost("h1")
			p := newLifecycleProvider(t, srv, h)
			ctx := context.Background()
			name := "proxy-team-a-egress-0123456789"
			req := testRequest(name)
			img := imageRefOf(t, p)
			// The image is cached and an overlay is there from an earlier,
			// interrupted create.
			b, err := p.table.get(ctx, p.hosts[0])
			if err != nil {
				t.Fatal(err)
			}
			pool, err := b.StoragePoolLookupByName(ctx, DefaultPool)
			if err != nil {
				t.Fatal(err)
			}
			imgVol, err := p.ensureImage(ctx, p.hosts[0], b, pool, img, func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			spec := tc.overlay(p, imgVol.Key)
			spec.Name = overlayName(name, "test", req.UID)
			x, err := volumeXML(spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.StorageVolCreateXML(ctx, pool, x); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Create(ctx, req); err != nil {
				t.Fatal(err)
			}
			waitSteps(t, p)
			h.mu.Lock()
			ov := h.pools[DefaultPool].vols[spec.Name]
			h.mu.Unlock()
			if ov == nil {
				t.Fatal("no overlay after Create")
			}
			have, err := parseVolumeXML(ov.xml)
			if err != nil {
				t.Fatal(err)
			}
			if have.BackingPath != imgVol.Key || have.CapacityBytes != 1<<30 || have.BackingFormat != FormatQCOW2 {
				t.Fatalf("overlay after Create: %+v", have)
			}
			if reused := ov.xml == x; reused != tc.reused {
				t.Fatalf("overlay reused: %v, want %v", reused, tc.reused)
			}
		})
	}
}

// Seed gap (kvm2): "A paused or pmsuspended domain is not started by a
// repeat Create: ensureRunning returns Permanent, so the Proxy latches."
// Create resumes a paused domain of ours, wakes a suspended one and starts
// a shut off or crashed one.
func TestGapPausedOrSuspendedDomainLatches(t *testing.T) {
	for _, tc := range []struct {
		state libvirt.DomainState
		rpc   string
	}{
		{libvirt.DomainPaused, "DomainResume"},
		{libvirt.DomainPmsuspended, "DomainPMWakeup"},
		{libvirt.DomainShutoff, "DomainCreate"},
		{libvirt.DomainCrashed, "DomainCreate"},
	} {
		t.Run(stateName(tc.state), func(t *testing.T) {
			srv := newImageServer(t)
			h := newFakeHost("h1")
			p := newLifecycleProvider(t, srv, h)
			name := "proxy-team-a-egress-0123456789"
			createRunning(t, p, h, name)
			setDomainState(h, name, tc.state)
			got, err := p.Get(context.Background(), formatID("h1", name))
			if err != nil || got.State != provider.StateStopped {
				t.Fatalf("Get of a %s domain: %+v, %v", stateName(tc.state), got, err)
			}
			before := len(h.callLog())
			inst, err := p.Create(context.Background(), testRequest(name))
			if err != nil {
				t.Fatalf("Create of a %s domain: %v", stateName(tc.state), err)
			}
			if s, _ := domainState(h, name); s != libvirt.DomainRunning {
				t.Fatalf("domain after Create: %s", stateName(s))
			}
			if inst.State != provider.StateRunning || inst.IP != "192.0.2.50" {
				t.Fatalf("Create: %+v", inst)
			}
			if !slices.ContainsFunc(h.callLog()[before:], func(c string) bool { return strings.HasSuffix(c, ":"+tc.rpc) }) {
				t.Fatalf("no %s in %v", tc.rpc, h.callLog()[before:])
			}
		})
	}
}

// The UID guard on adoption: a domain under the name that is unmarked,
// another installation's, or another Proxy's is Permanent and untouched.
func TestCreateAdoptionGuard(t *testing.T) {
	for _, tc := range []struct {
		name  string
		marks provider.Marks
		want  string
	}{
		{"unmarked", provider.Marks{}, "not managed by this operator"},
		{"other installation", provider.Marks{Managed: true, Installation: "other", UID: "x"}, "another operator installation"},
		{"other proxy", provider.Marks{Managed: true, Installation: "test", UID: "someone-else"}, "another Proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newImageServer(t)
			h := newFakeHost("h1")
			p := newLifecycleProvider(t, srv, h)
			ctx := context.Background()
			name := "proxy-team-a-egress-0123456789"
			b, err := p.table.get(ctx, p.hosts[0])
			if err != nil {
				t.Fatal(err)
			}
			x := "<domain type='qemu'><name>" + name + "</name></domain>"
			if tc.marks.Managed {
				md, err := buildMetadata(tc.marks, p.now(), "", "", false)
				if err != nil {
					t.Fatal(err)
				}
				x = "<domain type='qemu'><name>" + name + "</name><metadata>" + md + "</metadata></domain>"
			}
			if _, err := b.DomainDefineXML(ctx, x); err != nil {
				t.Fatal(err)
			}
			_, err = p.Create(ctx, testRequest(name))
			if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create over a domain that is %s: %v", tc.name, err)
			}
			if s, _ := domainState(h, name); s != libvirt.DomainShutoff {
				t.Fatalf("the foreign domain was touched: %s", stateName(s))
			}
			if vols := poolVolumeNames(h); len(vols) != 0 {
				t.Fatalf("volumes made for a refused adoption: %v", vols)
			}
		})
	}
}

// Placement refusals name the field and the choices, before any dial.
func TestCreatePlacementRefusals(t *testing.T) {
	srv := newImageServer(t)
	p := newLifecycleProvider(t, srv, newFakeHost("h1"), newFakeHost("h2"))
	sha := testImageSHA()
	for _, tc := range []struct {
		pl   provider.Placement
		want string
	}{
		{provider.Placement{}, "placement.zone is required: this entry has 2 hosts (h1, h2)"},
		{provider.Placement{Zone: "h3"}, `placement.zone "h3" names no host of this entry (h1, h2)`},
		{provider.Placement{Zone: "h1", MachineType: "huge"}, `placement.machineType "huge" is not in this entry's machineTypes (default)`},
		{provider.Placement{Zone: "h1", Image: "ubuntu"}, `placement.image "ubuntu" is not in this entry's images (debian-12)`},
		{provider.Placement{Zone: "h1", Image: "https://images.example/x.qcow2"}, "needs its digest"},
		{provider.Placement{Zone: "h1", Image: "ftp://images.example/x.qcow2#sha256=" + sha}, "http or https"},
		{provider.Placement{Zone: "h1", Image: "https://images.example/x.img#sha256=" + sha + "&format=vmdk"}, `format "vmdk"`},
	} {
		req := testRequest("proxy-a")
		req.Placement = tc.pl
		_, err := p.Create(context.Background(), req)
		if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want Permanent with %q", tc.pl, err, tc.want)
		}
	}
	if len(p.table.entries) != 0 {
		t.Error("a refused placement dialled a host")
	}
	// An image by URL with its digest resolves, and names no query.
	img, err := p.placeImage("https://images.example/d.qcow2?token=secret#sha256=" + sha + "&firmware=uefi")
	if err != nil || img.SHA256 != sha || img.Firmware != FirmwareUEFI || img.Format != FormatQCOW2 || strings.Contains(img.display(), "secret") {
		t.Fatalf("image by URL: %+v %q, %v", img, img.display(), err)
	}
}

// The Proxy's cloud-init never reaches a log line (at any tier) or an
// error, on success or failure: a sentinel in it is looked for in both.
func TestCloudInitNeverLoggedNorInErrors(t *testing.T) {
	const sentinel = "SENTINEL-cloud-init-7f3a"
	srv := newImageServer(t)
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	var logs strings.Builder
	var mu sync.Mutex
	ctx := logr.NewContext(context.Background(), funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10}))
	b := provider.WithBoundary("vms", TypeKVM, p).Provider
	name := "proxy-team-a-egress-0123456789"
	req := testRequest(name)
	req.CloudInit = provider.Sensitive("#cloud-config\nwrite_files: [{path: /etc/x, content: " + sentinel + "}]\n")
	var errs []string
	h.failNext("DomainDefineXML", lvErr(libvirt.ErrXMLError, "XML error: injected"))
	inst, err := b.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	errs = append(errs, stepFailure(t, p, inst.ID).Error())
	if _, err := b.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, p)
	giveAddress(h, name, "192.0.2.50")
	if inst, err := b.Get(ctx, formatID("h1", name)); err != nil || inst.State != provider.StateRunning {
		t.Fatalf("Get: %+v, %v", inst, err)
	}
	// The seed does carry it: the sentinel is absent from the logs not
	// for lack of use.
	h.mu.Lock()
	seed := h.pools[DefaultPool].vols[seedName(name, "test", req.UID)]
	inSeed := seed != nil && strings.Contains(string(seed.data), sentinel)
	h.mu.Unlock()
	if !inSeed {
		t.Fatal("the seed does not carry the cloud-init")
	}
	if err := b.Delete(ctx, formatID("h1", name)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	all := logs.String()
	mu.Unlock()
	if len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), "injected") {
		t.Fatalf("the injected failure was not seen: %v", errs)
	}
	if !strings.Contains(all, "libvirt domain XML") {
		t.Fatalf("the V(2) lines were not captured:\n%s", all)
	}
	for what, s := range map[string]string{"logs": all, "errors": strings.Join(errs, "\n")} {
		if strings.Contains(s, sentinel) {
			t.Fatalf("the cloud-init sentinel is in the %s:\n%s", what, s)
		}
	}
}

// A domain of ours with an empty UID mark is adopted and the mark is
// completed with the Proxy's UID (seen missing on the real libvirtd by the
// conformance suite's AdoptionFillsEmptyUIDMark).
func TestCreateAdoptionFillsAnEmptyUIDMark(t *testing.T) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	name := "proxy-team-a-egress-0123456789"
	createRunning(t, p, h, name)
	b, err := p.table.get(ctx, p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	md, err := buildMetadata(provider.Marks{Managed: true, Installation: "test"}, created, "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := b.DomainLookupByName(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DomainSetMetadata(ctx, dom, md, metadataKey, metadataURI, libvirt.DomainAffectConfig); err != nil {
		t.Fatal(err)
	}
	req := testRequest(name)
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	insts, err := p.ListByTag(ctx)
	if err != nil || len(insts) != 1 || insts[0].UID != req.UID || !insts[0].CreatedAt.Equal(created) {
		t.Fatalf("after adoption: %+v, %v; want UID %s and createdAt kept", insts, err, req.UID)
	}
}
