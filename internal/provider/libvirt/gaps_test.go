package libvirt

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// The known gaps of the earlier kvm and kvm2 providers each have a
// test named TestGap<the gap>; most live next to the code they are about
// (create_test.go, delete_test.go, list_test.go, ssh_test.go,
// backend_test.go, image_test.go, samples_test.go). These are the ones that
// cross files. `go test -run TestGap -v` lists them all;
// docs/libvirt-provider.md maps each gap to its test.

// Seed gap (kvm): "SSH auth failures retry forever: SSH authentication and
// host-key failures are Transient." A refusal is Permanent from Create,
// with which refusal it was, and Unauthorized in the Checker.
func TestGapSSHAuthFailuresRetryForever(t *testing.T) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	// x/crypto/ssh's own text for a refused key.
	h.dialErr = newDialError("h1", "192.0.2.1:22", stageSSH,
		errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain"))
	_, err := p.Create(context.Background(), testRequest("proxy-team-a-egress-0123456789"))
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "SSH key refused") {
		t.Fatalf("Create with the key refused: %v, want Permanent saying the key was refused", err)
	}
	res := p.Check(context.Background())
	if res.Healthy || res.Reason != provider.ReasonUnauthorized || !strings.Contains(res.Message, "SSH key refused") {
		t.Fatalf("Check with the key refused: %+v", res)
	}
}

// Seed gap (kvm2): "No adoption of kvm's domains: a switched entry needs
// its Proxies deleted first." An entry read as a `kvm` block and the same
// entry read as a `kvm2` block are one configuration: the second lists and
// adopts what the first made, and makes nothing new.
func TestGapNoAdoptionOfTheOtherTypesDomains(t *testing.T) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	block, err := json.Marshal(map[string]any{
		"sshKeyFile": "/etc/k", "knownHostsFile": "/etc/kh", "diskSizeGb": 1,
		"hosts":  []map[string]any{{"name": "h1", "address": "192.0.2.1", "user": "virt", "bridge": "br0"}},
		"images": map[string]any{"debian-12": map[string]any{"url": srv.URL + "/debian-12.qcow2", "sha256": testImageSHA()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	build := func(typeName string) *Provider {
		cfg, errs := Parse(block, field.NewPath("providers").Index(0).Child(typeName))
		if len(errs) > 0 {
			t.Fatal(errs.ToAggregate())
		}
		p, err := New("vms", cfg, provider.Options{InstallationID: "test"})
		if err != nil {
			t.Fatal(err)
		}
		p.table = newHostTable(fakeHosts{"h1": h}.connect)
		p.http = srv.Client()
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	asKVM := build(TypeKVM)
	name := "proxy-team-a-egress-0123456789"
	made := createRunning(t, asKVM, h, name)
	_ = asKVM.Close()

	asKVM2 := build(TypeKVM2)
	listed, err := asKVM2.ListByTag(context.Background())
	if err != nil || len(listed) != 1 || listed[0].ID != made.ID || listed[0].UID != made.UID {
		t.Fatalf("kvm2 lists %+v, %v; kvm made %+v", listed, err, made)
	}
	vols := poolVolumeNames(h)
	adopted, err := asKVM2.Create(context.Background(), testRequest(name))
	if err != nil || adopted.ID != made.ID || adopted.State != provider.StateRunning {
		t.Fatalf("kvm2 Create of kvm's instance: %+v, %v", adopted, err)
	}
	if after := poolVolumeNames(h); strings.Join(after, ",") != strings.Join(vols, ",") {
		t.Fatalf("adoption changed the pool: %v -> %v", vols, after)
	}
}

// Seed gap (kvm): "Doc drift in kvm-provider.md: it says ARP is the
// fallback, but the code tries ARP first; it says host and name are on
// every log line, but the check and list paths lack them." The guide states
// the address sources in the order the code asks them, and the Checker's
// and the listings' log lines carry the host.
func TestGapDocDriftAddressOrderAndLogKeys(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/libvirt-provider.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The sentence that gives the order, and the code's order.
	const sentence = "The address comes from the guest agent first, then libvirt's DHCP leases"
	i := strings.Index(string(doc), sentence)
	if i < 0 {
		t.Fatalf("docs/libvirt-provider.md no longer says %q", sentence)
	}
	para := string(doc[i:min(i+300, len(doc))])
	words := map[string]string{"agent": "guest agent", "lease": "DHCP leases", "arp": "ARP table"}
	last := -1
	for _, s := range addressSources {
		at := strings.Index(para, words[s.name])
		if at < last {
			t.Fatalf("the guide names %q out of the code's order (%v): %q", words[s.name], addressSources, para)
		}
		last = at
	}

	srv := newImageServer(t)
	up, down := newFakeHost("h1"), newFakeHost("h2")
	down.dialErr = newDialError("h2", "192.0.2.2:22", stageTCP, errors.New("connect: connection refused"))
	p := newLifecycleProvider(t, srv, up, down)
	var mu sync.Mutex
	var lines []string
	ctx := logr.NewContext(context.Background(), funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 2}))
	_ = p.Check(ctx)
	if _, err := p.ListByTag(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ListSecondary(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) == 0 {
		t.Fatal("the check and the listings logged nothing")
	}
	for _, l := range lines {
		if !strings.Contains(l, `"host"=`) {
			t.Errorf("a check or list line without the host: %s", l)
		}
	}
}

var (
	allowAll = regexp.MustCompile(`(?m)^\s*http_access allow all\s*$`)
	denyAll  = regexp.MustCompile(`(?m)^\s*http_access deny all( decided_destinations)?\s*$`) // with the access log's annotation
)

// Seed gap (kvm2): "The sample cloud-init installs Squid with
// http_access allow all." No libvirt sample carries a cloud-init of its
// own, so the generated cloud-config serves them; and that never allows
// all, whatever the sample's ranges.
func TestGapSampleCloudInitAllowsAll(t *testing.T) {
	var libvirtSamples int
	for _, s := range readSamples(t) {
		if !strings.Contains(s.file, "kvm") {
			continue
		}
		libvirtSamples++
		if s.proxy.Spec.CloudInit != "" || s.proxy.Spec.CloudInitSecretRef != nil {
			t.Errorf("%s carries its own cloud-init: the generated Squid config should serve it", s.file)
		}
		ud, err := squid.UserData(provider.CreateRequest{Name: "sample", Port: s.proxy.Spec.Port,
			AllowedSourceRanges: s.proxy.Spec.AllowedSourceRanges}, (&egress.Settings{}).Policy(), squid.FamilyDebian, servingreport.PublishFile)
		if err != nil {
			t.Fatalf("%s: %v", s.file, err)
		}
		if allowAll.MatchString(string(ud)) {
			t.Errorf("%s: the generated cloud-config allows all", s.file)
		}
		if !denyAll.MatchString(string(ud)) {
			t.Errorf("%s: the generated cloud-config does not end in a deny", s.file)
		}
	}
	if libvirtSamples < 2 {
		t.Fatalf("%d libvirt samples, want the kvm and the kvm2 one", libvirtSamples)
	}
}
