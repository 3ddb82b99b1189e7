package proxmox

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// One test per known gap of the earlier proxmox provider.

// TestGapCreateBlocksUntilRunning: Create returns Provisioning while the
// clone task still runs (the seed's Create returned only once the VM ran).
func TestGapCreateBlocksUntilRunning(t *testing.T) {
	e := newEnv(t)
	e.fake.SetTaskPolls("qmclone", 1000000) // a clone that does not end while the test looks
	in, err := e.p.Create(context.Background(), request("proxy-slow", "aaaaaaaa-0000-0000-0000-000000000001"))
	must(t, err)
	if in.State != provider.StateProvisioning {
		t.Fatalf("Create = %+v, want Provisioning while the clone runs", in)
	}
	testenv.EventuallyNil(t, "clone progress in Get", func() error {
		got, err := e.p.Get(context.Background(), in.ID)
		if err != nil {
			return err
		}
		if got.State != provider.StateProvisioning || !strings.Contains(got.Progress, "clone") {
			return fmt.Errorf("Get = %+v", got)
		}
		return nil
	})
}

// TestGapCloneLockNeverClears: a lock that stays is waited out in the
// background and reported with the VMID and the qm unlock hint.
func TestGapCloneLockNeverClears(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := request("proxy-locked", "aaaaaaaa-0000-0000-0000-000000000002")
	in, err := e.p.Create(ctx, req)
	must(t, err)
	waitRunning(t, e.p, in.ID)
	vmid, _, _ := parseID(in.ID)
	e.fake.SetVMRunning(vmid, "")
	e.fake.SetLock(vmid, "clone")
	lctx, logs := logCtx(t)
	in2, err := e.p.Create(lctx, req)
	must(t, err)
	if in2.ID != in.ID {
		t.Fatalf("adopted ID %s, want %s", in2.ID, in.ID)
	}
	want := fmt.Sprintf("qm unlock %d", vmid)
	testenv.EventuallyNil(t, "lock reported", func() error {
		got, err := e.p.Get(ctx, in.ID)
		if err != nil {
			return err
		}
		if !strings.Contains(got.Progress, want) {
			return fmt.Errorf("progress %q lacks %q", got.Progress, want)
		}
		return nil
	})
	// One V(1) line for the wait, not one per poll.
	if n := countLines(logs.String(), lockWaitLine); n != 1 || !strings.Contains(logs.String(), fmt.Sprintf(`"vmid"=%d`, vmid)) {
		t.Errorf("%d %q lines, want 1 naming VMID %d:\n%s", n, lockWaitLine, vmid, logs)
	}
}

// TestGapVMIDRangeSharedWithHumans: a human's VM on the VMID the UID hashes
// to is probed past and left exactly as it was.
func TestGapVMIDRangeSharedWithHumans(t *testing.T) {
	e := newEnv(t)
	uid := "aaaaaaaa-0000-0000-0000-000000000003"
	taken := e.p.vmidFor(uid, 0)
	must(t, e.fake.PutVM(fakepve.VM{VMID: taken, Node: "pve1", Config: []fakepve.KV{{Key: "name", Value: "humans-vm"}, {Key: "memory", Value: "512"}}}))
	in, err := e.p.Create(context.Background(), request("proxy-probe", uid))
	must(t, err)
	if vmid, _, _ := parseID(in.ID); vmid != e.p.vmidFor(uid, 1) {
		t.Fatalf("Create used VMID %d, want the next probe %d", vmid, e.p.vmidFor(uid, 1))
	}
	waitRunning(t, e.p, in.ID)
	vm, ok := e.fake.VM(taken)
	if !ok || configValue(vm, "name") != "humans-vm" || configValue(vm, "tags") != "" || vm.Running {
		t.Fatalf("human's VM changed: %+v (exists %v)", vm, ok)
	}
}

// TestGapHibernatedLatches: a hibernated VM of ours is resumed by Create,
// not refused.
func TestGapHibernatedLatches(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := request("proxy-hib", "aaaaaaaa-0000-0000-0000-000000000004")
	in, err := e.p.Create(ctx, req)
	must(t, err)
	waitRunning(t, e.p, in.ID)
	vmid, _, _ := parseID(in.ID)
	r, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/nodes/pve1/qemu/%d/status/suspend", e.fake.URL(), vmid), strings.NewReader("todisk=1"))
	r.Header.Set("Authorization", e.fake.Token())
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := e.fake.Client().Do(r)
	must(t, err)
	_ = resp.Body.Close()
	e.fake.Settle()
	if vm, _ := e.fake.VM(vmid); vm.Lock != "suspended" {
		t.Fatalf("VM not hibernated: %+v (%s)", vm, resp.Status)
	}
	e.p.forgetResources()
	if _, err := e.p.Create(ctx, req); err != nil {
		t.Fatalf("Create of a hibernated VM of ours: %v", err)
	}
	waitRunning(t, e.p, in.ID)
}

// TestGapCACachedForever: the CA file is reloaded when it changes (the
// seed cached the first CA it loaded).
func TestGapCACachedForever(t *testing.T) {
	e := newEnv(t)
	// httptest's servers all share one certificate, so the wrong CA is
	// made here.
	must(t, os.WriteFile(e.cfg.CAFile, selfSignedPEM(t), 0o600))
	if r := e.p.Check(context.Background()); r.Healthy || r.Reason != "CertificateInvalid" {
		t.Fatalf("Check with the wrong CA = %+v, want CertificateInvalid", r)
	}
	must(t, os.WriteFile(e.cfg.CAFile, append(e.fake.CACertPEM(), '\n'), 0o600))
	if r := e.p.Check(context.Background()); !r.Healthy {
		t.Fatalf("Check after the CA file was fixed = %+v, want Healthy", r)
	}
}

func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// Seed gap (proxmox): "cross-node clones (target) need shared storage and
// are untested". The template is cloned on its own node, with target when
// the Proxy is placed on another: a template on shared storage clones to
// pve2 and the VM runs there; a template on a node's local storage cannot,
// and PVE's refusal is Permanent with what to change, not retried.
func TestGapCrossNodeClonesUntested(t *testing.T) {
	w := fakepve.DefaultWorld()
	w.Nodes = []string{"pve1", "pve2"}
	w.Storages = append(w.Storages, fakepve.Storage{ID: "ceph", Type: "rbd", Shared: true, Content: []string{"images"},
		Capacity: 1 << 40})
	shared := fakepve.Template(9001, "pve1", "debian-12-shared")
	for i, kv := range shared.Config {
		if kv.Key == "scsi0" {
			shared.Config[i].Value = "ceph:base-9001-disk-0,iothread=1,size=3G"
		}
	}
	w.VMs = append(w.VMs, shared)
	e := newEnv(t, fakepve.WithWorld(w))
	e.cfg.Nodes = []string{"pve1", "pve2"}
	e.cfg.Templates = map[string]int{"debian-12": 9000, "debian-12-shared": 9001}
	p := e.newProvider(t, testInstallation)
	ctx := context.Background()

	req := request("proxy-far", "81111111-2222-3333-4444-555555555555")
	req.Placement = provider.Placement{Zone: "pve2", Image: "debian-12-shared"}
	in, err := p.Create(ctx, req)
	must(t, err)
	waitRunning(t, p, in.ID)
	vmid, _, _ := parseID(in.ID)
	if vm, ok := e.fake.VM(vmid); !ok || vm.Node != "pve2" {
		t.Fatalf("VM %d = %+v (exists %v), want it on pve2", vmid, vm, ok)
	}
	if n := e.fake.Count("POST", "nodes/pve1/qemu/9001/clone"); n != 1 {
		t.Errorf("%d clone requests on the template's node pve1, want 1", n)
	}

	local := request("proxy-far-local", "91111111-2222-3333-4444-555555555555")
	local.Placement = provider.Placement{Zone: "pve2", Image: "debian-12"}
	_, err = p.Create(ctx, local)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "shared storage") {
		t.Fatalf("Create on pve2 from a template on pve1's local storage: %v, want Permanent naming shared storage", err)
	}
}
