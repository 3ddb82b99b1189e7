package proxmox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
)

// seedUserData is the user-data file of the seed ISO the fake holds for
// instance name on node, read back by xorriso (a real ISO reader).
func seedUserData(t *testing.T, fake *fakepve.Server, node, name string) string {
	t.Helper()
	return seedISOFile(t, fake, node, name, "user-data")
}

// seedISOFile is one file of that seed ISO.
func seedISOFile(t *testing.T, fake *fakepve.Server, node, name, file string) string {
	t.Helper()
	var iso []byte
	for _, v := range fake.Volumes(node, "local") {
		if sv, ok := parseSeedName(strings.TrimPrefix(v.Name, "iso/")); ok && sv.Instance == name {
			iso = v.Data
		}
	}
	if iso == nil {
		t.Fatalf("no seed ISO of %s on %s: %+v", name, node, fake.Volumes(node, "local"))
	}
	bin, err := exec.LookPath("xorriso")
	if err != nil {
		if os.Getenv("SKIP_ISO_TESTS") == "1" {
			t.Skip("xorriso is not installed and SKIP_ISO_TESTS=1")
		}
		t.Fatal("xorriso is not installed: run hack/install-test-deps.sh, or set SKIP_ISO_TESTS=1")
	}
	dir := t.TempDir()
	img, out := filepath.Join(dir, "seed.iso"), filepath.Join(dir, file)
	must(t, os.WriteFile(img, iso, 0o600))
	if b, err := exec.Command(bin, "-osirrox", "on", "-indev", img, "-extract", "/"+file, out).CombinedOutput(); err != nil {
		t.Fatalf("xorriso -extract /%s: %v\n%s", file, err, b)
	}
	ud, err := os.ReadFile(out)
	must(t, err)
	return string(ud)
}

// Seed gap (proxmox): the seed ISO carried req.CloudInit only, so a Proxy
// without its own cloudInit booted a template with no proxy at all. Now
// the seed holds the generated Squid cloud-config for the Proxy's port and
// allowedSourceRanges, with the entry's allowedDestinations, and
// cloud-init's own schema check accepts it.
func TestGapSeedCarriesNoSquid(t *testing.T) {
	e := newEnv(t)
	e.cfg.AllowedDestinations = []string{"10.20.30.0/24"}
	p := e.newProvider(t, testInstallation)
	req := provider.CreateRequest{Name: "proxy-squid", UID: "21111111-2222-3333-4444-555555555555", Port: 3130,
		AllowedSourceRanges: []string{"198.51.100.0/24"}}
	in, err := p.Create(context.Background(), req)
	must(t, err)
	waitRunning(t, p, in.ID)
	ud := seedUserData(t, e.fake, "pve1", req.Name)
	for _, want := range []string{"#cloud-config\n", "  - squid\n", "http_port 3130\n", "acl allowed_clients src 198.51.100.0/24\n",
		" 10.20.31.0/24"} { // 10.20.30.0/24 is cut out of the refused 10.0.0.0/8
		if !strings.Contains(ud, want) {
			t.Errorf("the seed's user-data lacks %q:\n%s", want, ud)
		}
	}
	if out, err := squidtest.Schema(t, ud); err != nil || !strings.Contains(string(out), "Valid cloud-config") {
		t.Errorf("cloud-init schema refuses the seed's user-data: %v\n%s", err, out)
	}
}

// The Proxy's own cloudInit goes into the seed as given, as on the other
// VM providers; a template of the rhel family gets RHEL's Squid set-up.
func TestSeedUserDataSources(t *testing.T) {
	e := newEnv(t)
	e.fake.PutVM(fakepve.Template(9001, "pve1", "rocky-9"))
	e.cfg.Templates = map[string]int{"debian-12": 9000, "rocky-9": 9001}
	e.cfg.TemplateFamilies = map[string]string{"rocky-9": "rhel"}
	e.cfg.DefaultTemplate = "debian-12"
	p := e.newProvider(t, testInstallation)
	own := provider.CreateRequest{Name: "proxy-own", UID: "31111111-2222-3333-4444-555555555555", Port: 3128,
		CloudInit: provider.Sensitive("#cloud-config\nruncmd: [echo own-proxy]\n")}
	rhel := provider.CreateRequest{Name: "proxy-rhel", UID: "41111111-2222-3333-4444-555555555555", Port: 8080,
		AllowedSourceRanges: []string{"192.0.2.0/24"}, Placement: provider.Placement{Image: "rocky-9"}}
	for _, req := range []provider.CreateRequest{own, rhel} {
		in, err := p.Create(context.Background(), req)
		must(t, err)
		waitRunning(t, p, in.ID)
	}
	if got := seedUserData(t, e.fake, "pve1", own.Name); got != own.CloudInit.Reveal() {
		t.Errorf("the seed's user-data = %q, want the Proxy's cloudInit as given", got)
	}
	if got := seedUserData(t, e.fake, "pve1", rhel.Name); !strings.Contains(got, "semanage port -a -t squid_port_t -p tcp 8080") {
		t.Errorf("the rhel template's seed lacks the SELinux port label:\n%s", got)
	}
}

// A Proxy whose allowedSourceRanges the generated config cannot use is
// refused by Create itself, Permanent, before any request.
func TestCreateRefusesBadSourceRange(t *testing.T) {
	e := newEnv(t)
	e.fake.ClearRequests()
	_, err := e.p.Create(context.Background(), provider.CreateRequest{Name: "proxy-bad", UID: "51111111-2222-3333-4444-555555555555",
		Port: 3128, AllowedSourceRanges: []string{"10.0.0.1/8"}})
	if !errors.Is(err, provider.ErrPermanent) {
		t.Fatalf("Create with a non-canonical source range = %v, want Permanent", err)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Errorf("Create made %d requests before refusing: %v", n, e.fake.Requests())
	}
}

// The seed's vendor-data installs the serving reporter for the Proxy's
// port (issue 22), then the guest agent, for a Proxy's own cloud-init; with
// the generated cloud-config the reporter is in its bootcmd instead.
func TestSeedVendorDataInstallsTheReporter(t *testing.T) {
	e := newEnv(t)
	req := provider.CreateRequest{Name: "proxy-vendor", UID: "22111111-2222-3333-4444-555555555555", Port: 3131,
		CloudInit: provider.Sensitive("#cloud-config\nruncmd: [echo own-proxy]\n")}
	in, err := e.p.Create(context.Background(), req)
	must(t, err)
	waitRunning(t, e.p, in.ID)
	vd := seedISOFile(t, e.fake, "pve1", req.Name, "vendor-data")
	if vd != nocloud.VendorData(&servingreport.Config{Port: req.Port, Publish: servingreport.PublishFile}, true).Reveal() {
		t.Errorf("the seed's vendor-data is not nocloud.VendorData with a reporter on 3131 and the agent:\n%s", vd)
	}
	for _, want := range []string{servingreport.TimerName, servingreport.ReporterPath + " 3131 file", "qemu-guest-agent"} {
		if !strings.Contains(vd, want) {
			t.Errorf("the seed's vendor-data lacks %q:\n%s", want, vd)
		}
	}
	if i, j := strings.Index(vd, servingreport.TimerName), strings.Index(vd, "install_agent"); i < 0 || j < 0 || i > j {
		t.Errorf("the reporter is not installed before the agent (timer at %d, agent at %d)", i, j)
	}

	// Generated user-data: the reporter in its bootcmd, once; the
	// vendor-data installs the agent only.
	gen := provider.CreateRequest{Name: "proxy-vendor-gen", UID: "22111111-2222-3333-4444-666666666666", Port: 3131}
	in, err = e.p.Create(context.Background(), gen)
	must(t, err)
	waitRunning(t, e.p, in.ID)
	if vd := seedISOFile(t, e.fake, "pve1", gen.Name, "vendor-data"); vd != nocloud.GuestAgentVendorData.Reveal() {
		t.Errorf("with the generated cloud-config the vendor-data is not the agent's alone:\n%s", vd)
	}
	if ud := seedISOFile(t, e.fake, "pve1", gen.Name, "user-data"); strings.Count(ud, servingreport.TimerName) == 0 {
		t.Errorf("the generated user-data does not install the reporter:\n%s", ud)
	}
}
