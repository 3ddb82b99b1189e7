// Package smoke proves the libvirt test host (hack/libvirt) works end to
// end, the way the libvirt provider will use it: go-libvirt over SSH with a
// pinned host key and a direct-streamlocal channel, the real Debian guest
// booted from the disk with a NoCloud seed holding the generated Squid
// cloud-config, the address from the guest agent, a page fetched through
// the guest's Squid over a loopback port forward, and a refusal; then the
// provider itself tells the guest a group member's peers in place, through
// the agent's guest-exec (UpdateGroupPeers), as the reconciler does.
//
// It runs only inside the host's namespace: `make test-libvirt` (or
// `hack/libvirt/run.sh go test ./test/libvirt/smoke`); without a host it
// skips, with one it never does (internal/testenv/libvirthost).
//
// Network: every connection this test makes goes to the namespace's
// loopback (sshd, the port forward, the origin). The guest reaches the
// origin through QEMU's user-mode network, whose 10.0.2.2 is the
// namespace's loopback; the namespace has no route out.
package smoke

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	kvm "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
)

const (
	// slirpHost is the address under which a guest on QEMU's user-mode
	// network reaches the loopback of QEMU's (here: the namespace's) host;
	// connections forwarded into the guest come from it too.
	slirpHost = libvirthost.SlirpHost
	squidPort = 3128
	mac       = "52:54:00:e9:00:01"
	// bootBound only stops a hung test: the guest needs about a minute
	// under emulation on an idle machine, more on a busy one.
	bootBound  = 6 * time.Minute
	originBody = "hello from the namespace's loopback\n"
	// metadataURI is the provider's marks element
	// (internal/provider/libvirt/metadata.go, a stored format): the domain
	// carries it so that the provider's calls take it for an instance.
	metadataURI = "https://egress.proxy-operator.dev/libvirt/instance/v1"
	// installation is the one the domain's marks and the provider name.
	installation = "smoke"
)

func TestLibvirtHostSmoke(t *testing.T) {
	h := libvirthost.Require(t)
	guest := h.RequireGuest(t)
	l := h.Connect(t)

	version, err := l.ConnectGetLibVersion()
	if err != nil {
		t.Fatal(err)
	}
	hostname, err := l.ConnectGetHostname()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("libvirt %d.%d.%d on %s over ssh %s (pinned known_hosts) and direct-streamlocal to %s; domain type %s",
		version/1000000, version/1000%1000, version%1000, hostname, h.SSHAddr, h.Socket, h.DomainType)

	pool, err := l.StoragePoolLookupByName(h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("smoke-%x", time.Now().UnixNano()&0xffffff)

	// Torn down on every path; the last step checks it left nothing.
	var dom *libvirt.Domain
	var vols []libvirt.StorageVol
	teardown := func() error {
		var errs []error
		if dom != nil {
			if err := l.DomainDestroy(*dom); err != nil && !libvirthost.IsError(err, libvirt.ErrOperationInvalid) {
				errs = append(errs, fmt.Errorf("destroy: %w", err))
			}
			if err := l.DomainUndefineFlags(*dom, libvirt.DomainUndefineNvram|libvirt.DomainUndefineManagedSave|
				libvirt.DomainUndefineSnapshotsMetadata); err != nil {
				errs = append(errs, fmt.Errorf("undefine: %w", err))
			}
			dom = nil
		}
		for i := len(vols) - 1; i >= 0; i-- {
			if err := l.StorageVolDelete(vols[i], 0); err != nil {
				errs = append(errs, fmt.Errorf("delete volume %s: %w", vols[i].Name, err))
			}
		}
		vols = nil
		return errors.Join(errs...)
	}
	t.Cleanup(func() {
		if err := teardown(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	console := filepath.Join(h.QEMULogDir, name+".console")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("guest console (last lines of %s):\n%s", console, libvirthost.Tail(console, 60))
		}
	})

	// The disk: the guest image streamed into the pool (as the provider's
	// image cache does), and a qcow2 overlay on it.
	start := time.Now()
	base := uploadFile(t, l, pool, name+"-base.qcow2", "qcow2", guest.Image)
	vols = append(vols, base)
	if err := l.StoragePoolRefresh(pool, 0); err != nil { // re-reads the qcow2 header: the virtual size
		t.Fatal(err)
	}
	_, capacity, _, err := l.StorageVolGetInfo(base)
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := l.StorageVolCreateXML(pool, fmt.Sprintf(`<volume><name>%s.qcow2</name><capacity unit='bytes'>%d</capacity>
  <target><format type='qcow2'/></target>
  <backingStore><path>%s</path><format type='qcow2'/></backingStore></volume>`, name, capacity, base.Key), 0)
	if err != nil {
		t.Fatal(err)
	}
	vols = append(vols, overlay)
	t.Logf("image %s (sha256 %s…) uploaded into pool %s in %.1fs, overlay %s", guest.Image, guest.SHA256[:12], h.Pool,
		time.Since(start).Seconds(), overlay.Key)

	// The seed: the generated Squid cloud-config admits the forwarded
	// connections (they come from slirpHost) and lets Squid reach the
	// origin at slirpHost, which the default policy denies as private.
	origin, hits := testenv.CountingOrigin(t, "127.0.0.1", originBody, false)
	originPort := origin.Listener.Addr().(*net.TCPAddr).Port
	userData, err := squid.UserData(provider.CreateRequest{
		Name: name, Port: squidPort, AllowedSourceRanges: []string{slirpHost + "/32"},
	}, (&egress.Settings{AllowedDestinations: []string{slirpHost + "/32"}}).Policy(), squid.FamilyDebian, "")
	if err != nil {
		t.Fatal(err)
	}
	iso, err := nocloud.Build(nocloud.Seed{
		InstanceID: name, LocalHostname: name,
		UserData: userData, VendorData: nocloud.GuestAgentVendorData,
	})
	if err != nil {
		t.Fatal(err)
	}
	seed := uploadBytes(t, l, pool, name+"-seed.iso", iso)
	vols = append(vols, seed)

	xml := domainXML(name, h.DomainType, h.Pool, overlay.Name, seed.Name, console, marksElement(name))
	applied := time.Now()
	d, err := l.DomainDefineXML(xml)
	if err != nil {
		t.Fatalf("define: %v\n%s", err, xml)
	}
	dom = &d
	if err := l.DomainCreate(d); err != nil {
		t.Fatalf("start: %v", err)
	}
	// libvirt 9.0 rejects passt in domain XML, and slirp's <portForward>
	// needs it: the forward is added through the monitor. QEMU binds it on
	// the namespace's loopback.
	fwdPort := libvirthost.AddForward(t, l, d, squidPort)
	t.Logf("domain %s defined and started in %.1fs; 127.0.0.1:%d forwards to the guest's :%d",
		name, time.Since(applied).Seconds(), fwdPort, squidPort)

	testenv.EventuallyNilWithin(t, bootBound, "the guest agent answers guest-ping", func() error {
		_, err := l.QEMUDomainAgentCommand(d, `{"execute":"guest-ping"}`, 2, 0)
		return err
	})
	toAgent := time.Since(applied)
	t.Logf("guest agent answers after %.1fs", toAgent.Seconds())

	var addr netip.Addr
	testenv.EventuallyNilWithin(t, bootBound, "the guest agent reports an IPv4 address on "+mac, func() error {
		var err error
		addr, err = libvirthost.AgentAddress(l, d, mac)
		return err
	})
	toAddress := time.Since(applied)
	t.Logf("guest agent reports %s after %.1fs (QEMU's user-mode network; connected to only through the loopback forward)",
		addr, toAddress.Seconds())

	client := libvirthost.ProxyClient(fwdPort)
	target := fmt.Sprintf("http://%s/", net.JoinHostPort(slirpHost, fmt.Sprint(originPort)))
	testenv.EventuallyNilWithin(t, bootBound, "a 200 from the origin through the guest's Squid", func() error {
		return libvirthost.GetBody(client, target, originBody)
	})
	toProxied := time.Since(applied)
	t.Logf("GET %s through the guest's Squid (via 127.0.0.1:%d): 200 %q after %.1fs", target, fwdPort, originBody, toProxied.Seconds())

	// A client outside allowedSourceRanges: the guest itself, from its own
	// address. Squid must answer 403 without fetching: the origin's count
	// stays where it was.
	hitsBefore := hits.Load()
	refusedURL := fmt.Sprintf("http://%s/refused", net.JoinHostPort(slirpHost, fmt.Sprint(originPort)))
	out := libvirthost.RequestFromGuest(t, l, d, addr, squidPort, refusedURL)
	status, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(status, " 403 ") || !strings.Contains(out, "ERR_ACCESS_DENIED") {
		t.Fatalf("GET %s from %s (outside allowedSourceRanges %s/32): want Squid's 403 ERR_ACCESS_DENIED, got:\n%s",
			refusedURL, addr, slirpHost, out)
	}
	if n := hits.Load(); n != hitsBefore {
		t.Fatalf("the refused request reached the origin: %d requests, %d before it", n, hitsBefore)
	}
	t.Logf("GET %s from %s (outside allowedSourceRanges): %s (%s), the origin not reached", refusedURL, addr,
		strings.TrimSpace(status), "ERR_ACCESS_DENIED")

	// The group peers, through the provider as the reconciler calls it (its
	// method boundary, whose outcome line says what the call did). No
	// keepalived runs here (the guest has no keepalived.conf), so the
	// reload does nothing, and nothing is sent to the TEST-NET peers.
	p := newProvider(t, h, guest)
	id := "hosts/" + libvirthost.ProviderHostName + "/domains/" + name
	// Get proves the marks: the provider takes the domain for its instance
	// (its state says Provisioning: the NIC's MAC is not the one the
	// provider derives from the name, so it finds no address).
	inst, err := p.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("the provider's Get of %s: %v", id, err)
	}
	t.Logf("the provider's Get of %s: %s (installation %s's instance)", id, inst.State, installation)
	peersU := provider.WithBoundary("smoke", kvm.TypeKVM, p).Peers
	self, peers := netip.MustParseAddr("192.0.2.10"), []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")}
	wantPeers, err := vrrp.Peers(self, peers)
	if err != nil {
		t.Fatal(err)
	}
	updatePeers := func(want string) time.Duration {
		t.Helper()
		var logs testenv.LogLines
		began := time.Now()
		if err := peersU.UpdateGroupPeers(logs.Context(1), id, self, peers); err != nil {
			t.Fatalf("UpdateGroupPeers(%s, %s, %v): %v", id, self, peers, err)
		}
		took := time.Since(began)
		if len(logs.Find(`"msg"="update_group_peers done"`, `"outcome"="`+want+`"`)) != 1 {
			t.Fatalf("UpdateGroupPeers: no outcome %q in its outcome line:\n%s", want, logs.String())
		}
		return took
	}
	// The file and its inode: ApplyPeers replaces the file whole (mv), so
	// a call that wrote it again would show a new inode.
	peersFile := func() (content, stat string) {
		t.Helper()
		return libvirthost.GuestExec(t, l, d, "/bin/cat", vrrp.PeersPath),
			strings.TrimSpace(libvirthost.GuestExec(t, l, d, "/usr/bin/stat", "-c", "%i %y", vrrp.PeersPath))
	}
	// The smoke guest has no peers file (it is no group member): written.
	tookWrite := updatePeers("updated")
	got, written := peersFile()
	if got != wantPeers {
		t.Fatalf("%s after UpdateGroupPeers:\n%s\nwant:\n%s", vrrp.PeersPath, got, wantPeers)
	}
	tookRead := updatePeers("unchanged")
	if got, again := peersFile(); got != wantPeers || again != written {
		t.Fatalf("%s after a second UpdateGroupPeers with the same peers: inode and mtime %q (were %q), content:\n%s", vrrp.PeersPath, again, written, got)
	}
	t.Logf("UpdateGroupPeers(%s, %v) wrote %s through guest-exec in %.2fs (inode and mtime %s); again with the same peers: one read, unchanged, in %.2fs",
		self, peers, vrrp.PeersPath, tookWrite.Seconds(), written, tookRead.Seconds())

	t.Logf("TIMINGS apply->agent %.1fs, apply->address %.1fs, apply->first proxied 200 %.1fs",
		toAgent.Seconds(), toAddress.Seconds(), toProxied.Seconds())

	if err := teardown(); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	// Only this test's volumes (all named after the domain): the other
	// libvirt tests may be filling the same pool meanwhile.
	after := libvirthost.VolumeNames(t, l, pool)
	if left := slices.DeleteFunc(slices.Clone(after), func(v string) bool { return !strings.HasPrefix(v, name) }); len(left) > 0 {
		t.Fatalf("pool %s after teardown holds volumes of the test: %v", h.Pool, left)
	}
	if _, err := l.DomainLookupByName(name); !libvirthost.IsError(err, libvirt.ErrNoDomain) {
		t.Fatalf("domain %s after teardown: lookup gives %v, want no domain", name, err)
	}
	t.Logf("domain undefined; pool %s holds no volume of the test (%d volumes in all)", h.Pool, len(after))
}

// newProvider is the libvirt provider on this host, as an entry would
// configure it, of the installation the domain's marks name. It makes no
// instance: the image URL is never fetched.
func newProvider(t *testing.T, h *libvirthost.Host, guest libvirthost.Guest) *kvm.Provider {
	t.Helper()
	cfg, errs := kvm.Parse(h.ProviderConfig(h.Socket, "http://127.0.0.1:9/unused.qcow2", guest), nil)
	if len(errs) > 0 {
		t.Fatalf("the test host's provider config: %v", errs.ToAggregate())
	}
	p, err := kvm.New("smoke", cfg, provider.Options{InstallationID: installation})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the provider: %v", err)
		}
	})
	return p
}

// marksElement is the provider's marks element for instance name, as the
// provider writes it.
func marksElement(name string) string {
	return fmt.Sprintf(`<metadata><egressproxy:instance xmlns:egressproxy='%s'>`+
		`<egressproxy:managed>%s</egressproxy:managed><egressproxy:uid>uid-%s</egressproxy:uid>`+
		`<egressproxy:installation>%s</egressproxy:installation></egressproxy:instance></metadata>`,
		metadataURI, provider.MarkManagedValue, name, installation)
}

func domainXML(name, domainType, pool, disk, seed, console, metadata string) string {
	return fmt.Sprintf(`<domain type='%s'>
  <name>%s</name>
  %s
  <memory unit='MiB'>1024</memory>
  <vcpu>2</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot><on_crash>destroy</on_crash>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2' cache='unsafe'/>
      <source pool='%s' volume='%s'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='volume' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source pool='%s' volume='%s'/>
      <target dev='hdc' bus='ide'/>
      <readonly/>
    </disk>
    <interface type='user'>
      <mac address='%s'/>
      <model type='virtio'/>
    </interface>
    <channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <serial type='file'><source path='%s'/><target port='0'/></serial>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <memballoon model='none'/>
  </devices>
</domain>`, domainType, name, metadata, pool, disk, pool, seed, mac, console)
}

func uploadFile(t *testing.T, l *libvirt.Libvirt, pool libvirt.StoragePool, name, format, path string) libvirt.StorageVol {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return upload(t, l, pool, name, format, f, fi.Size())
}

func uploadBytes(t *testing.T, l *libvirt.Libvirt, pool libvirt.StoragePool, name string, data []byte) libvirt.StorageVol {
	t.Helper()
	return upload(t, l, pool, name, "raw", strings.NewReader(string(data)), int64(len(data)))
}

func upload(t *testing.T, l *libvirt.Libvirt, pool libvirt.StoragePool, name, format string, r io.Reader, size int64) libvirt.StorageVol {
	t.Helper()
	vol, err := l.StorageVolCreateXML(pool, fmt.Sprintf(`<volume><name>%s</name><capacity unit='bytes'>%d</capacity>
  <target><format type='%s'/></target></volume>`, name, size, format), 0)
	if err != nil {
		t.Fatalf("create volume %s: %v", name, err)
	}
	if err := l.StorageVolUpload(vol, r, 0, uint64(size), 0); err != nil {
		_ = l.StorageVolDelete(vol, 0)
		t.Fatalf("upload volume %s: %v", name, err)
	}
	return vol
}
