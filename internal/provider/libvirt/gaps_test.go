package libvirt

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The seeds' known gaps (sections 6 and 7 of
// ../shared/seeds/providers-existing-v2-five-providers.md) each have a
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
