package controller

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/ippool"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// proxmoxPoolEntry is proxmoxEntry's entry with the NIC on bridge (where a
// static address goes with its own MAC) and an addressPool of spec (built
// as poolEntry builds it), polled every poll.
func proxmoxPoolEntry(t *testing.T, fake *fakepve.Server, bridge string, spec ippool.Spec, poll time.Duration) *registry.Entry {
	t.Helper()
	e := proxmoxEntry(t, fake, false, func(c *proxmox.Config) { c.Bridge = bridge })
	e.PollInterval = poll
	// The pool as poolEntry builds it (its fake provider is not used).
	pooled, _ := poolEntry(t, "pve", spec)
	e.SetAddressPool(pooled.AddressPool())
	return e
}

// pveVMID is the VMID in a proxmox provider ID (vms/<vmid>/<name>).
func pveVMID(id string) (int, bool) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] != "vms" {
		return 0, false
	}
	n, err := strconv.Atoi(parts[1])
	return n, err == nil
}

// pveSeed is what VM vmid boots from on the fake: its net0, and the user-data
// and network-config of the seed ISO on its ide2 (decoded from the volume's
// bytes as the guest's cloud-init reads them).
type pveSeed struct {
	volume, net0, userData, networkConfig string
}

func readPVESeed(t *testing.T, fake *fakepve.Server, vmid int) pveSeed {
	t.Helper()
	vm, ok := fake.VM(vmid)
	if !ok {
		t.Fatalf("no VM %d on the fake", vmid)
	}
	var s pveSeed
	var ide2 string
	for _, kv := range vm.Config {
		switch kv.Key {
		case "ide2":
			ide2 = kv.Value
		case "net0":
			s.net0 = kv.Value
		}
	}
	storage, rest, ok := strings.Cut(ide2, ":")
	if !ok {
		t.Fatalf("VM %d: ide2 %q names no volume", vmid, ide2)
	}
	s.volume, _, _ = strings.Cut(rest, ",")
	var iso []byte
	for _, v := range fake.Volumes(vm.Node, storage) {
		if v.Name == s.volume {
			iso = v.Data
		}
	}
	if iso == nil {
		t.Fatalf("VM %d: no volume %s on %s/%s", vmid, s.volume, vm.Node, storage)
	}
	for name, into := range map[string]*string{nocloud.FileUserData: &s.userData, nocloud.FileNetworkConfig: &s.networkConfig} {
		b, found, err := nocloud.ReadFile(iso, name)
		if err != nil || !found {
			t.Fatalf("VM %d: seed %s: %s found %v, %v", vmid, s.volume, name, found, err)
		}
		*into = b.Reveal()
	}
	return s
}

// writtenFiles are the user-data's write_files by path, and its packages.
func writtenFiles(t *testing.T, userData string) (map[string]string, []string) {
	t.Helper()
	var doc struct {
		Packages   []string `json:"packages"`
		WriteFiles []struct {
			Path    string `json:"path"`
			Content string `json:"content"`
		} `json:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(userData), &doc); err != nil {
		t.Fatalf("user-data is no YAML: %v\n%s", err, userData)
	}
	files := map[string]string{}
	for _, f := range doc.WriteFiles {
		files[f.Path] = f.Content
	}
	return files, doc.Packages
}

var keepalivedPriority = regexp.MustCompile(`(?m)^\s*priority ([0-9]+)$`)

// TestProxmoxGroupOnAPool (issue 24, proxmox): a ProxyGroup of two on the
// real proxmox provider over the fake PVE API, on an entry with an
// addressPool (the built-in IPAM provider) and a bridge. Each member's VM
// (one clone each: a member waits for its peers) boots a NoCloud seed whose
// user-data runs keepalived (VRRP from the member's own pool address,
// unicast to the other member's, the group's address as the virtual one)
// and Squid egressing from the group's address, and whose network-config
// gives the VM's NIC (net0 on the bridge, by its MAC) the member's own
// address. Both members are Ready once their guests report serving; the
// group shows its address and <address>:3128 as its endpoint, names no
// holder while both guests say they do not hold it, and names the one
// whose guest reports holding it (the member keepalived prefers, by the
// seeds' priorities). Deleting the group (its members with it, played
// here as the garbage collector would) leaves only the template on PVE.
func TestProxmoxGroupOnAPool(t *testing.T) {
	fake := fakepve.New().Start()
	t.Cleanup(fake.Close)
	entry := proxmoxPoolEntry(t, fake, "vmbr0",
		ippool.Spec{Addresses: []string{"192.0.2.10-192.0.2.20"}, Prefix: 24, Gateway: "192.0.2.1"}, 500*time.Millisecond)
	ns, evs := startGroupManagerOn(t, entry)
	ctx := context.Background()

	// The members' guests report as the reporter of a group member does:
	// serving, and whether the guest holds the group's address: the
	// elected member's does, every other's does not.
	var mu sync.Mutex
	elected := ""
	elect := func(name string) { mu.Lock(); elected = name; mu.Unlock() }
	reportAsGuests(t, ns, 50*time.Millisecond, func(px *egressv1.Proxy) {
		vmid, ok := pveVMID(px.Status.ProviderID)
		if !ok {
			return
		}
		mu.Lock()
		holds := "no"
		if px.Name == elected {
			holds = "yes"
		}
		mu.Unlock()
		now := time.Now()
		fake.SetGuestReport(vmid, servingreport.Report{Serving: true, Checked: now, Answered: now, Version: "5.7",
			CloudInit: servingreport.CloudInitDone, HoldsGroupAddress: holds})
	})

	g := &egressv1.ProxyGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vip"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, Template: egressv1.ProxyTemplate{
			Spec: egressv1.ProxySpec{Provider: "pve", Port: 3128, AllowedSourceRanges: []string{"192.0.2.0/24"}},
		}},
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	g = waitGroup(t, ns, "vip", "both members ready on the group's address", func(g *egressv1.ProxyGroup) error {
		if err := allReady(2)(g); err != nil {
			return fmt.Errorf("%w (members' Ready: %s)", err, membersReady(ns, "vip-0", "vip-1"))
		}
		if g.Status.Address == "" || groupCondition(g, egressv1.ConditionAvailable) != "True/AddressHeld" {
			return fmt.Errorf("no address held")
		}
		return nil
	})
	vip := g.Status.Address
	if g.Status.Endpoint != vip+":3128" || g.Status.Holder != "" {
		t.Errorf("endpoint %q, holder %q: want %s:3128 and no holder while no guest holds it", g.Status.Endpoint, g.Status.Holder, vip)
	}
	if a, err := netip.ParseAddr(vip); err != nil || !netip.MustParsePrefix("192.0.2.0/24").Contains(a) {
		t.Fatalf("group address %q is not from the pool", vip)
	}

	own := map[string]string{}
	for _, m := range g.Status.Members {
		own[m.Name] = m.Address
	}
	if len(own) != 2 || own["vip-0"] == "" || own["vip-1"] == "" || own["vip-0"] == own["vip-1"] || own["vip-0"] == vip || own["vip-1"] == vip {
		t.Fatalf("members' own addresses %v beside the group's %s", own, vip)
	}
	vmids := map[string]int{}
	priority := map[string]int{}
	routerIDs := map[string]bool{}
	for i, name := range []string{"vip-0", "vip-1"} {
		self, peer := own[name], own[memberName("vip", 1-i)]
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, px); err != nil {
			t.Fatal(err)
		}
		vmid, ok := pveVMID(px.Status.ProviderID)
		if !ok {
			t.Fatalf("member %s: provider ID %q is no proxmox ID", name, px.Status.ProviderID)
		}
		vmids[name] = vmid
		if px.Status.IP != self {
			t.Errorf("member %s: status.ip %q, want its own pool address %s (the guest's, from the seed)", name, px.Status.IP, self)
		}
		seed := readPVESeed(t, fake, vmid)

		// network-config: the member's own address on net0, by its MAC,
		// net0 on the entry's bridge.
		static, match, err := nocloud.ParseNetworkConfig([]byte(seed.networkConfig))
		if err != nil {
			t.Fatalf("member %s: network-config: %v\n%s", name, err, seed.networkConfig)
		}
		if static.Address != netip.MustParsePrefix(self+"/24") || static.Gateway != netip.MustParseAddr("192.0.2.1") {
			t.Errorf("member %s: network-config gives %+v, want %s/24 via 192.0.2.1", name, static, self)
		}
		if mac := macOfNet0(seed.net0); match.MAC == "" || match.MAC != strings.ToLower(mac) || !strings.Contains(seed.net0, "bridge=vmbr0") {
			t.Errorf("member %s: network-config matches %+v; net0 is %q (want it on vmbr0, matched by its MAC)", name, match, seed.net0)
		}

		// user-data: keepalived beside Squid, unicast to the peer's own
		// address, the group's address virtual; Squid egresses from it.
		files, packages := writtenFiles(t, seed.userData)
		if !slices.Contains(packages, "keepalived") || !slices.Contains(packages, "squid") {
			t.Errorf("member %s: packages %v, want squid and keepalived", name, packages)
		}
		conf, ok := files[vrrp.ConfigPath]
		if !ok {
			t.Fatalf("member %s: the seed writes no %s; files %v", name, vrrp.ConfigPath, slices.Sorted(maps.Keys(files)))
		}
		if want := "unicast_src_ip " + self + "\nunicast_peer {\n    " + peer + "\n}\n"; !strings.HasSuffix(files[vrrp.PeersPath], want) {
			t.Errorf("member %s: %s is\n%s\nwant it to end in\n%s", name, vrrp.PeersPath, files[vrrp.PeersPath], want)
		}
		for _, want := range []string{
			"    state BACKUP\n", "    interface " + nocloud.MACMatchedName + "\n",
			"    include " + vrrp.PeersPath + "\n",
			"    virtual_ipaddress {\n        " + vip + "/24 dev " + nocloud.MACMatchedName + "\n    }\n",
			"    virtual_router_id " + strconv.Itoa(int(vrrp.RouterID(string(g.UID)))) + "\n",
		} {
			if !strings.Contains(conf, want) {
				t.Errorf("member %s: keepalived.conf lacks %q:\n%s", name, want, conf)
			}
		}
		for _, l := range strings.Split(conf, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "virtual_router_id" {
				routerIDs[f[1]] = true
			}
		}
		if m := keepalivedPriority.FindStringSubmatch(conf); m == nil {
			t.Errorf("member %s: keepalived.conf has no priority:\n%s", name, conf)
		} else {
			priority[name], _ = strconv.Atoi(m[1])
		}
		if sq := files["/etc/squid/squid.conf"]; !strings.Contains(sq, "\ntcp_outgoing_address "+vip+"\n") {
			t.Errorf("member %s: squid.conf does not egress from the group's address %s:\n%s", name, vip, sq)
		}
		if _, ok := files[vrrp.CheckPath]; !ok {
			t.Errorf("member %s: the seed writes no serving check %s", name, vrrp.CheckPath)
		}
	}
	if len(routerIDs) != 1 {
		t.Errorf("the members' virtual_router_id differ: %v", routerIDs)
	}
	// One clone per member: each was made once its peers were known.
	clones := 0
	for _, tk := range fake.Tasks() {
		if tk.Type == "qmclone" {
			clones++
		}
	}
	if ids := fake.VMIDs(); clones != 2 || len(ids) != 3 {
		t.Errorf("%d clones, VMs %v: want one clone per member beside the template 9000", clones, ids)
	}

	// The member keepalived prefers (the higher priority) reports holding
	// the address: the group names it.
	want := "vip-0"
	if priority["vip-1"] > priority["vip-0"] {
		want = "vip-1"
	}
	elect(want)
	g = waitGroup(t, ns, "vip", "the address held by "+want, func(g *egressv1.ProxyGroup) error {
		c := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionAvailable)
		if g.Status.Holder != want || c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "held by member "+want) {
			return fmt.Errorf("holder %q, Available %+v", g.Status.Holder, c)
		}
		return nil
	})
	if g.Status.Address != vip || g.Status.Endpoint != vip+":3128" || g.Status.ReadyMembers != 2 {
		t.Errorf("with a holder: address %q, endpoint %q, %d ready; want %s, %s:3128, 2", g.Status.Address, g.Status.Endpoint, g.Status.ReadyMembers, vip, vip)
	}
	for _, name := range []string{"vip-0", "vip-1"} {
		px := &egressv1.Proxy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, px); err != nil {
			t.Fatal(err)
		}
		if h := px.Status.HoldsGroupAddress; h == nil || *h != (name == want) {
			t.Errorf("member %s: status.holdsGroupAddress %v, want %v", name, h, name == want)
		}
	}
	evs.await(t, "HolderMoved", "held by member "+want)
	t.Logf("group %s: address %s, endpoint %s, holder %s; members' own addresses vip-0 %s (VM %d, priority %d), vip-1 %s (VM %d, priority %d)",
		g.Name, vip, g.Status.Endpoint, g.Status.Holder, own["vip-0"], vmids["vip-0"], priority["vip-0"], own["vip-1"], vmids["vip-1"], priority["vip-1"])

	// Deleting the group: its members go with it (their controller
	// reference; envtest runs no garbage collector, so the test deletes
	// them as it would), and with them their VMs and seeds.
	if err := env.Client.Delete(ctx, g); err != nil {
		t.Fatal(err)
	}
	list := &egressv1.ProxyList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		px := &list.Items[i]
		if c := metav1.GetControllerOf(px); c != nil && c.UID == g.UID {
			if err := env.Client.Delete(ctx, px, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
		}
	}
	testenv.EventuallyNil(t, "the group and its members gone", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), &egressv1.ProxyGroup{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("group still there (%v)", err)
		}
		l := &egressv1.ProxyList{}
		if err := env.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d members left, e.g. %s %s %q", len(l.Items), l.Items[0].Name, readyReason(&l.Items[0]), conditionMessage(&l.Items[0]))
		}
		return nil
	})
	if ids := fake.VMIDs(); len(ids) != 1 || ids[0] != 9000 {
		t.Errorf("VMs left after the group was deleted: %v, want only the template 9000", ids)
	}
	for _, v := range fake.Volumes("pve1", "local") {
		if strings.HasSuffix(v.Name, "_seed.iso") || strings.Contains(v.Name, "vip-") {
			t.Errorf("seed volume left after the group was deleted: %s", v.Name)
		}
	}
	for _, v := range fake.Volumes("pve1", "local-lvm") {
		if v.VMID != 9000 {
			t.Errorf("disk left after the group was deleted: %s (VM %d)", v.Name, v.VMID)
		}
	}
}

// macOfNet0 is the MAC of a PVE net value (virtio=<MAC>,bridge=...).
func macOfNet0(v string) string {
	model, _, _ := strings.Cut(v, ",")
	_, mac, _ := strings.Cut(model, "=")
	return mac
}
