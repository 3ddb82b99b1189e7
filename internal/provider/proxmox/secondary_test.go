package proxmox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// twoNodes is DefaultWorld with a second node; local (a dir storage) is
// node-local on each.
func twoNodes() fakepve.Option {
	w := fakepve.DefaultWorld()
	w.Nodes = []string{"pve1", "pve2"}
	return fakepve.WithWorld(w)
}

func seedsOf(list []provider.Secondary, instance string) []provider.Secondary {
	var out []provider.Secondary
	for _, s := range list {
		if s.Instance == instance {
			out = append(out, s)
		}
	}
	return out
}

// Seed gap (proxmox): "a seed ISO whose VM was destroyed outside the
// operator is invisible to GC, and a seed on node-local storage stays
// behind when its VM migrated". Now the seeds are secondary resources:
// listed on every configured node with their owner, the one left on the
// node a VM migrated from included, InstanceGone once the VM is destroyed
// by hand, and removed by DeleteSecondary; Delete of a migrated VM takes
// the seed on the old node too.
func TestGapSeedISOInvisibleToGC(t *testing.T) {
	e := newEnv(t, twoNodes())
	e.cfg.Nodes = []string{"pve1", "pve2"}
	p := e.newProvider(t, testInstallation)
	var sl provider.SecondaryLister
	if l, ok := any(p).(provider.SecondaryLister); ok {
		sl = l
	} else {
		t.Fatal("the provider is no provider.SecondaryLister: the garbage collector never sees a seed ISO")
	}
	ctx := context.Background()
	const uidA, uidB = "61111111-2222-3333-4444-555555555555", "71111111-2222-3333-4444-555555555555"
	a, err := p.Create(ctx, request("proxy-mig", uidA))
	must(t, err)
	waitRunning(t, p, a.ID)
	b, err := p.Create(ctx, request("proxy-kept", uidB))
	must(t, err)
	waitRunning(t, p, b.ID)
	vmidA, _, _ := parseID(a.ID)
	vmidB, _, _ := parseID(b.ID)
	must(t, e.fake.MigrateVM(vmidA, "pve2"))
	must(t, e.fake.MigrateVM(vmidB, "pve2"))
	if !hasVolume(e.fake.Volumes("pve1", "local"), seedName("proxy-mig", testInstallation, uidA)) {
		t.Fatalf("the migration took the seed along: %+v", e.fake.Volumes("pve1", "local"))
	}

	list, err := sl.ListSecondary(ctx)
	must(t, err)
	seeds := seedsOf(list, "proxy-mig")
	if len(seeds) != 1 || !strings.HasPrefix(seeds[0].ID, "nodes/pve1/") || seeds[0].Kind != kindSeed ||
		seeds[0].Marks != (provider.Marks{Managed: true, UID: uidA, Installation: testInstallation}) ||
		seeds[0].InstanceGone || seeds[0].InstanceID != a.ID {
		t.Fatalf("seeds of the migrated VM = %+v, want its seed on pve1, owner %s, instance %s not gone", seeds, uidA, a.ID)
	}

	// A human destroys the migrated VM: its seed on pve1 is now an orphan.
	e.fake.SetVMRunning(vmidA, "")
	c := e.fake.Client()
	req, _ := httpRequest("DELETE", fmt.Sprintf("%s/nodes/pve2/qemu/%d?purge=1", e.fake.URL(), vmidA), e.fake.Token())
	resp, err := c.Do(req)
	must(t, err)
	_ = resp.Body.Close()
	e.fake.Settle()
	p.forgetResources()
	list, err = sl.ListSecondary(ctx)
	must(t, err)
	seeds = seedsOf(list, "proxy-mig")
	if len(seeds) != 1 || !seeds[0].InstanceGone || seeds[0].Marks.UID != uidA {
		t.Fatalf("the seed of the VM destroyed by hand = %+v, want listed with InstanceGone and UID %s", seeds, uidA)
	}
	if kept := seedsOf(list, "proxy-kept"); len(kept) != 1 || kept[0].InstanceGone {
		t.Fatalf("the seed of the live VM = %+v, want listed, not gone", kept)
	}
	must(t, sl.DeleteSecondary(ctx, seeds[0].ID))
	if hasVolume(e.fake.Volumes("pve1", "local"), seedName("proxy-mig", testInstallation, uidA)) {
		t.Fatalf("DeleteSecondary left the seed: %+v", e.fake.Volumes("pve1", "local"))
	}
	must(t, sl.DeleteSecondary(ctx, seeds[0].ID)) // gone is done

	// The collector refuses nothing it judged wrong: the live VM's seed is
	// not deleted while its VM exists.
	kept := seedsOf(list, "proxy-kept")[0]
	if err := sl.DeleteSecondary(ctx, kept.ID); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("DeleteSecondary of a live VM's seed = %v, want Transient (its instance exists)", err)
	}
	// Delete of the migrated VM removes its seed on the old node too.
	must(t, p.Delete(ctx, b.ID))
	testenv.EventuallyNil(t, "the migrated VM's delete done", func() error {
		if p.dels.Running("proxy-kept") {
			return errors.New("delete step running")
		}
		if _, ok := e.fake.VM(vmidB); ok {
			return errors.New("VM still there")
		}
		return nil
	})
	for _, node := range []string{"pve1", "pve2"} {
		if vols := e.fake.Volumes(node, "local"); hasVolume(vols, "proxy-kept") {
			t.Errorf("Delete left a seed of the migrated VM on %s: %+v", node, vols)
		}
	}
}

// The secondary ID names node, storage and file; anything else is refused.
func TestParseSecondaryID(t *testing.T) {
	good := formatSecondaryID("pve1", "local", seedName("proxy-a", "inst", "u-1"))
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{good, true},
		{"nodes/pve1/storage/local/iso/proxy-a-seed.iso", false}, // not a seed name
		{"nodes/pve1/storage/local/iso", false},
		{"nodes//storage/local/iso/" + seedName("proxy-a", "inst", "u-1"), false},
		{"vms/100/proxy-a", false},
		{"nodes/pve1/storage/local/iso/" + seedName("proxy-a", "inst", "u-1") + "/x", false},
		{"", false},
	} {
		node, storage, file, err := parseSecondaryID(tc.id)
		if (err == nil) != tc.want {
			t.Errorf("parseSecondaryID(%q) = %v, want ok %t", tc.id, err, tc.want)
		}
		if err != nil && !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("parseSecondaryID(%q) error %v is not Permanent", tc.id, err)
		}
		if tc.want && formatSecondaryID(node, storage, file) != tc.id {
			t.Errorf("round trip of %q = %q", tc.id, formatSecondaryID(node, storage, file))
		}
	}
}

// Seed names split back into instance, installation tag and UID, and
// nothing else parses.
func TestSeedNames(t *testing.T) {
	n := seedName("proxy-ns-name-0123456789", "inst-a", "ABCDEF01-2222-3333-4444-555555555555")
	sv, ok := parseSeedName(n)
	if !ok || sv.Instance != "proxy-ns-name-0123456789" || sv.Tag != seedTag("inst-a") || sv.UID != "abcdef01-2222-3333-4444-555555555555" {
		t.Fatalf("parseSeedName(%q) = %+v, %t", n, sv, ok)
	}
	for _, bad := range []string{"proxy-a-seed.iso", "debian-12.iso", "a_b_c_d.iso", "a_" + seedTag("x") + "_u_seed.img", "_" + seedTag("x") + "_u_seed.iso", "a_short_u_seed.iso"} {
		if sv, ok := parseSeedName(bad); ok {
			t.Errorf("parseSeedName(%q) = %+v, want not a seed", bad, sv)
		}
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-", c)) {
			t.Fatalf("seed name %q holds %q, which PVE's upload would rewrite", n, c)
		}
	}
}

// A node whose storage cannot be read fails the listing (Transient): the
// collector then deletes nothing rather than judge the seeds of half a
// cluster; an unknown secondary ID's node or storage is Permanent, another
// installation's seed counts as deleted.
func TestListSecondaryNodeDown(t *testing.T) {
	e := newEnv(t, twoNodes())
	e.cfg.Nodes = []string{"pve1", "pve2"}
	p := e.newProvider(t, testInstallation)
	ctx := context.Background()
	e.fake.SetNodeOffline("pve2", &fakepve.Error{})
	if _, err := p.ListSecondary(ctx); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("ListSecondary with pve2 offline = %v, want Transient", err)
	}
	e.fake.SetNodeOffline("pve2", nil)
	if _, err := p.ListSecondary(ctx); err != nil {
		t.Errorf("ListSecondary with pve2 back = %v", err)
	}
	file := seedName("proxy-x", testInstallation, "u-1")
	for _, id := range []string{formatSecondaryID("pve9", "local", file), formatSecondaryID("pve1", "nfs", file)} {
		if err := p.DeleteSecondary(ctx, id); !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("DeleteSecondary(%q) = %v, want Permanent", id, err)
		}
	}
	must(t, e.fake.PutVolume(fakepve.Volume{Node: "pve1", Storage: "local", Name: "iso/" + seedName("proxy-x", "inst-b", "u-1"), Data: []byte("x")}))
	must(t, p.DeleteSecondary(ctx, formatSecondaryID("pve1", "local", seedName("proxy-x", "inst-b", "u-1"))))
	if !hasVolume(e.fake.Volumes("pve1", "local"), seedName("proxy-x", "inst-b", "u-1")) {
		t.Error("DeleteSecondary removed another installation's seed")
	}
}

// Delete does not wait for a node that cannot be read: the VM on the
// other node is destroyed, and the seed left on the unreadable node is the
// collector's once it answers (listed, InstanceGone).
func TestDeleteLeavesAnUnreadableNodesSeedToGC(t *testing.T) {
	e := newEnv(t, twoNodes())
	e.cfg.Nodes = []string{"pve1", "pve2"}
	p := e.newProvider(t, testInstallation)
	ctx := context.Background()
	const uid = "d1111111-2222-3333-4444-555555555555"
	in, err := p.Create(ctx, request("proxy-half", uid))
	must(t, err)
	waitRunning(t, p, in.ID)
	stale := seedName("proxy-half", testInstallation, uid)
	must(t, e.fake.PutVolume(fakepve.Volume{Node: "pve2", Storage: "local", Name: "iso/" + stale, Data: []byte("left when the VM migrated back")}))
	e.fake.SetNodeOffline("pve2", &fakepve.Error{})
	ctx, logs := logCtx(t)
	must(t, p.Delete(ctx, in.ID))
	testenv.EventuallyNil(t, "Get NotFound with pve2 offline", func() error {
		_, err := p.Get(ctx, in.ID)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("Get after Delete: %v", err)
	})
	if !strings.Contains(logs.String(), `"node"="pve2"`) || !strings.Contains(logs.String(), "left for the garbage collector") {
		t.Errorf("the skipped node is not logged:\n%s", logs)
	}
	e.fake.SetNodeOffline("pve2", nil)
	list, err := p.ListSecondary(ctx)
	must(t, err)
	if s := seedsOf(list, "proxy-half"); len(s) != 1 || !strings.HasPrefix(s[0].ID, "nodes/pve2/") || !s[0].InstanceGone {
		t.Fatalf("the seed left on pve2 = %+v, want listed with InstanceGone", s)
	}
}
