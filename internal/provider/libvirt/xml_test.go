package libvirt

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata")

// testMarks are the marks every test domain carries.
var testMarks = provider.Marks{Managed: true, UID: "5b1f0c1e-7f34-4c55-9d0e-1b2a3c4d5e6f", Installation: "inst-1"}

func testMetadata(t *testing.T) string {
	t.Helper()
	md, err := buildMetadata(testMarks, time.Date(2026, 12, 1, 9, 20, 30, 0, time.UTC), "default", "web", false)
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// testDomainSpec is a complete spec (BIOS, user-mode networking); cases
// change one thing.
func testDomainSpec(t *testing.T) domainSpec {
	t.Helper()
	return domainSpec{
		Name:           "web-1",
		DomainType:     DomainTypeQEMU,
		VCPUs:          2,
		MemoryMiB:      1024,
		Firmware:       FirmwareBIOS,
		Pool:           "default",
		DiskVolume:     overlayName("web-1", testMarks.Installation, testMarks.UID),
		SeedVolume:     seedName("web-1", testMarks.Installation, testMarks.UID),
		MAC:            domainMAC("web-1"),
		UserNetworking: true,
		Metadata:       testMetadata(t),
	}
}

// nicKinds are the three places a NIC can go, as a change to the spec.
var nicKinds = []struct {
	name string
	set  func(*domainSpec)
	// wantType and wantSource are the <interface type=...> and its
	// <source> attribute's value ("" for user-mode: no source).
	wantType, wantSource string
}{
	{"user", func(s *domainSpec) { s.UserNetworking = true }, "user", ""},
	{"bridge", func(s *domainSpec) { s.UserNetworking = false; s.Bridge = "br-egress" }, "bridge", "br-egress"},
	{"network", func(s *domainSpec) { s.UserNetworking = false; s.Network = "egress-net" }, "network", "egress-net"},
}

// TestBuildDomainXML renders every firmware with every NIC kind and reads
// the result back as libvirt's structure: each device the doc comment
// promises, with the values the boot on the real host needed.
func TestBuildDomainXML(t *testing.T) {
	for _, fw := range []struct {
		firmware, machine, osFirmware, cdromDev, cdromBus string
	}{
		{FirmwareBIOS, "pc", "", "hdc", "ide"},
		{FirmwareUEFI, "q35", "efi", "sda", "scsi"},
	} {
		for _, nic := range nicKinds {
			t.Run(fw.firmware+"/"+nic.name, func(t *testing.T) {
				s := testDomainSpec(t)
				s.Firmware = fw.firmware
				nic.set(&s)
				out, err := buildDomainXML(s)
				if err != nil {
					t.Fatal(err)
				}
				var d libvirtxml.Domain
				if err := d.Unmarshal(out); err != nil {
					t.Fatalf("the rendered domain does not parse: %v\n%s", err, out)
				}
				check := func(what string, got, want any) {
					t.Helper()
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s: got %v, want %v", what, got, want)
					}
				}
				check("type", d.Type, DomainTypeQEMU)
				check("name", d.Name, "web-1")
				check("memory", fmt.Sprint(d.Memory.Value, " ", d.Memory.Unit), "1024 MiB")
				check("vcpu", d.VCPU.Value, 2)
				check("arch", d.OS.Type.Arch, "x86_64")
				check("machine", d.OS.Type.Machine, fw.machine)
				check("os type", d.OS.Type.Type, "hvm")
				check("os firmware", d.OS.Firmware, fw.osFirmware)
				if fw.firmware == FirmwareUEFI {
					if d.OS.FirmwareInfo == nil {
						t.Errorf("uefi: no <firmware> features")
					} else {
						check("firmware features", d.OS.FirmwareInfo.Features,
							[]libvirtxml.DomainOSFirmwareFeature{{Enabled: "no", Name: "secure-boot"}, {Enabled: "no", Name: "enrolled-keys"}})
					}
				} else if d.OS.FirmwareInfo != nil {
					t.Errorf("bios: <firmware> features %+v", d.OS.FirmwareInfo)
				}
				check("boot", len(d.OS.BootDevices) == 1 && d.OS.BootDevices[0].Dev == "hd", true)
				check("on_poweroff", d.OnPoweroff, "destroy")
				check("on_reboot", d.OnReboot, "restart")
				check("on_crash", d.OnCrash, "destroy")
				check("acpi and apic", d.Features != nil && d.Features.ACPI != nil && d.Features.APIC != nil, true)
				check("clock", d.Clock != nil && d.Clock.Offset == "utc", true)

				dev := d.Devices
				if len(dev.Disks) != 2 {
					t.Fatalf("%d disks, want the overlay and the seed:\n%s", len(dev.Disks), out)
				}
				disk, seed := dev.Disks[0], dev.Disks[1]
				check("disk device", disk.Device, "disk")
				check("disk source", *disk.Source.Volume, libvirtxml.DomainDiskSourceVolume{Pool: "default", Volume: s.DiskVolume})
				check("disk driver", fmt.Sprint(disk.Driver.Name, " ", disk.Driver.Type), "qemu qcow2")
				check("disk target", *disk.Target, libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"})
				check("disk read-only", disk.ReadOnly != nil, false)
				check("seed device", seed.Device, "cdrom")
				check("seed source", *seed.Source.Volume, libvirtxml.DomainDiskSourceVolume{Pool: "default", Volume: s.SeedVolume})
				check("seed driver", fmt.Sprint(seed.Driver.Name, " ", seed.Driver.Type), "qemu raw")
				check("seed target", *seed.Target, libvirtxml.DomainDiskTarget{Dev: fw.cdromDev, Bus: fw.cdromBus})
				check("seed read-only", seed.ReadOnly != nil, true)

				if len(dev.Interfaces) != 1 {
					t.Fatalf("%d interfaces, want 1", len(dev.Interfaces))
				}
				nicOut := dev.Interfaces[0]
				check("mac", nicOut.MAC.Address, domainMAC("web-1"))
				check("model", nicOut.Model.Type, "virtio")
				src := nicOut.Source
				switch nic.wantType {
				case "user":
					check("interface type", src.User != nil, true)
				case "bridge":
					check("interface type", src.Bridge != nil, true)
					if src.Bridge != nil {
						check("bridge", src.Bridge.Bridge, nic.wantSource)
					}
				case "network":
					check("interface type", src.Network != nil, true)
					if src.Network != nil {
						check("network", src.Network.Network, nic.wantSource)
					}
				}
				if !strings.Contains(out, fmt.Sprintf(`<interface type="%s">`, nic.wantType)) {
					t.Errorf("no <interface type=%q> in\n%s", nic.wantType, out)
				}

				check("channels", len(dev.Channels), 1)
				if len(dev.Channels) == 1 {
					ch := dev.Channels[0]
					check("channel type", ch.Source != nil && ch.Source.UNIX != nil, true)
					check("channel target", ch.Target != nil && ch.Target.VirtIO != nil && ch.Target.VirtIO.Name == "org.qemu.guest_agent.0", true)
				}
				check("rngs", len(dev.RNGs), 1)
				if len(dev.RNGs) == 1 {
					r := dev.RNGs[0]
					check("rng", fmt.Sprint(r.Model, " ", r.Backend.Random != nil && r.Backend.Random.Device == "/dev/urandom"), "virtio true")
				}
				check("serial", len(dev.Serials) == 1 && dev.Serials[0].Source.Pty != nil && *dev.Serials[0].Target.Port == 0, true)
				check("console", len(dev.Consoles) == 1 && dev.Consoles[0].Source.Pty != nil && dev.Consoles[0].Target.Type == "serial", true)
				check("memballoon", dev.MemBalloon != nil && dev.MemBalloon.Model == "none", true)
				check("graphics", len(dev.Graphics), 0)

				if d.Metadata == nil {
					t.Fatalf("no <metadata>:\n%s", out)
				}
				md, err := parseMetadata(d.Metadata.XML)
				if err != nil || md.Marks != testMarks {
					t.Errorf("the metadata element reads back as %+v, %v; want %+v", md, err, testMarks)
				}
				if !strings.Contains(d.Metadata.XML, `xmlns="`+metadataURI+`"`) {
					t.Errorf("the metadata element lost its namespace: %s", d.Metadata.XML)
				}
			})
		}
	}
}

// domainVariants change one value of testDomainSpec each; check reads the
// result back.
var domainVariants = []struct {
	name   string
	change func(*domainSpec)
	check  func(*testing.T, libvirtxml.Domain)
}{
	{"kvm", func(s *domainSpec) { s.DomainType = DomainTypeKVM }, func(t *testing.T, d libvirtxml.Domain) {
		if d.Type != "kvm" {
			t.Errorf("type %q", d.Type)
		}
	}},
	{"one vCPU and 512 MiB", func(s *domainSpec) { s.VCPUs, s.MemoryMiB = 1, 512 }, func(t *testing.T, d libvirtxml.Domain) {
		if d.VCPU.Value != 1 || d.Memory.Value != 512 || d.Memory.Unit != "MiB" {
			t.Errorf("vcpu %d, memory %d %s", d.VCPU.Value, d.Memory.Value, d.Memory.Unit)
		}
	}},
	{"upper-case MAC is written in lower case", func(s *domainSpec) { s.MAC = "52:54:00:AB:CD:EF" }, func(t *testing.T, d libvirtxml.Domain) {
		if got := d.Devices.Interfaces[0].MAC.Address; got != "52:54:00:ab:cd:ef" {
			t.Errorf("mac %q", got)
		}
	}},
	{"names with XML's special characters are escaped", func(s *domainSpec) {
		s.Name, s.Pool, s.SeedVolume = `a<b>&"c'`, "p&q", `seed<&>"'.iso`
	}, func(t *testing.T, d libvirtxml.Domain) {
		if d.Name != `a<b>&"c'` || d.Devices.Disks[0].Source.Volume.Pool != "p&q" || d.Devices.Disks[1].Source.Volume.Volume != `seed<&>"'.iso` {
			t.Errorf("name %q, pool %q, seed %q", d.Name, d.Devices.Disks[0].Source.Volume.Pool, d.Devices.Disks[1].Source.Volume.Volume)
		}
	}},
	{"metadata with a prefix", func(s *domainSpec) {
		s.Metadata = `<egressproxy:instance xmlns:egressproxy="` + metadataURI + `"><egressproxy:uid>u</egressproxy:uid></egressproxy:instance>`
	}, func(t *testing.T, d libvirtxml.Domain) {
		md, err := parseMetadata(d.Metadata.XML)
		if err != nil || md.Marks.UID != "u" {
			t.Errorf("metadata %+v, %v", md, err)
		}
	}},
}

// TestBuildDomainXMLVariants: the spec's values reach the XML as given,
// and a MAC is written the way libvirt writes it.
func TestBuildDomainXMLVariants(t *testing.T) {
	for _, tc := range domainVariants {
		t.Run(tc.name, func(t *testing.T) {
			s := testDomainSpec(t)
			tc.change(&s)
			out, err := buildDomainXML(s)
			if err != nil {
				t.Fatal(err)
			}
			var d libvirtxml.Domain
			if err := d.Unmarshal(out); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			tc.check(t, d)
		})
	}
}

// TestBuildDomainXMLRefuses: every input libvirt would refuse, or accept
// and get wrong, is a Permanent error naming the field.
func TestBuildDomainXMLRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*domainSpec)
		want   string
	}{
		{"empty name", func(s *domainSpec) { s.Name = "" }, "name: empty"},
		{"name with a slash", func(s *domainSpec) { s.Name = "a/b" }, "name: \"a/b\" contains '/'"},
		{"empty domain type", func(s *domainSpec) { s.DomainType = "" }, `domain type "" is not kvm or qemu`},
		{"unknown domain type", func(s *domainSpec) { s.DomainType = "xen" }, `domain type "xen"`},
		{"zero vCPUs", func(s *domainSpec) { s.VCPUs = 0 }, "vCPUs 0"},
		{"negative vCPUs", func(s *domainSpec) { s.VCPUs = -2 }, "vCPUs -2"},
		{"zero memory", func(s *domainSpec) { s.MemoryMiB = 0 }, "memory 0 MiB"},
		{"negative memory", func(s *domainSpec) { s.MemoryMiB = -1 }, "memory -1 MiB"},
		{"empty firmware", func(s *domainSpec) { s.Firmware = "" }, `firmware "" is not bios or uefi`},
		{"unknown firmware", func(s *domainSpec) { s.Firmware = "efi" }, `firmware "efi"`},
		{"name with a newline", func(s *domainSpec) { s.Name = "web\n1" }, `name: "web\n1" contains a control character`},
		{"empty pool", func(s *domainSpec) { s.Pool = "" }, "pool: empty"},
		{"pool with a slash", func(s *domainSpec) { s.Pool = "/var/lib/libvirt/images" }, "pool: \"/var/lib/libvirt/images\" contains '/'"},
		{"empty disk volume", func(s *domainSpec) { s.DiskVolume = "" }, "disk volume: empty"},
		{"disk volume with a slash", func(s *domainSpec) { s.DiskVolume = "/var/lib/x.qcow2" }, "disk volume: \"/var/lib/x.qcow2\" contains '/'"},
		{"empty seed volume", func(s *domainSpec) { s.SeedVolume = "" }, "seed volume: empty"},
		{"seed is the disk", func(s *domainSpec) { s.SeedVolume = s.DiskVolume }, "the disk and the seed are the same volume"},
		{"no NIC target", func(s *domainSpec) { s.UserNetworking = false }, "exactly one of bridge, network and user networking, got 0"},
		{"bridge and network", func(s *domainSpec) { s.UserNetworking, s.Bridge, s.Network = false, "br0", "net0" },
			"got 2 (bridge br0, network net0)"},
		{"bridge and user networking", func(s *domainSpec) { s.Bridge = "br0" }, "got 2 (bridge br0, user networking)"},
		{"all three", func(s *domainSpec) { s.Bridge, s.Network = "br0", "net0" }, "got 3"},
		{"empty MAC", func(s *domainSpec) { s.MAC = "" }, `MAC: ""`},
		{"short MAC", func(s *domainSpec) { s.MAC = "52:54:00:12:34" }, `MAC: "52:54:00:12:34"`},
		{"MAC with dashes", func(s *domainSpec) { s.MAC = "52-54-00-12-34-56" }, "is not six colon-separated bytes"},
		{"EUI-64", func(s *domainSpec) { s.MAC = "52:54:00:12:34:56:78:9a" }, "is not six colon-separated bytes"},
		{"not hex", func(s *domainSpec) { s.MAC = "52:54:00:12:34:zz" }, `MAC: "52:54:00:12:34:zz"`},
		{"multicast MAC", func(s *domainSpec) { s.MAC = "01:00:5e:00:00:01" }, "is a multicast address"},
		{"no metadata", func(s *domainSpec) { s.Metadata = "" }, "metadata: empty"},
		{"metadata without a namespace", func(s *domainSpec) { s.Metadata = "<instance><uid>u</uid></instance>" },
			`metadata: <instance> is in namespace "", want "` + metadataURI + `"`},
		{"metadata in another namespace", func(s *domainSpec) { s.Metadata = `<instance xmlns="urn:other"/>` },
			`is in namespace "urn:other"`},
		{"metadata not well formed", func(s *domainSpec) { s.Metadata = `<instance xmlns="` + metadataURI + `"><uid>u</instance>` },
			"metadata: not well-formed XML"},
		{"metadata closing <metadata> to add devices", func(s *domainSpec) {
			s.Metadata = `</metadata><devices><disk type="file" device="disk"/></devices><metadata>`
		}, "metadata: not well-formed XML"},
		{"two metadata elements", func(s *domainSpec) { s.Metadata = s.Metadata + s.Metadata }, "metadata: 2 elements, want exactly one"},
		{"text beside the element", func(s *domainSpec) { s.Metadata = "marks: " + s.Metadata }, `metadata: text "marks:" outside the element`},
		{"an XML declaration", func(s *domainSpec) { s.Metadata = `<?xml version="1.0"?>` + s.Metadata }, "metadata: a declaration or directive"},
		{"only a comment", func(s *domainSpec) { s.Metadata = "<!-- marks -->" }, "metadata: 0 elements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testDomainSpec(t)
			tc.change(&s)
			out, err := buildDomainXML(s)
			if err == nil {
				t.Fatalf("no error; rendered\n%s", out)
			}
			if !errors.Is(err, provider.ErrPermanent) {
				t.Errorf("class %v, want Permanent: %v", provider.ClassOf(err), err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("rendered %q beside the error", out)
			}
		})
	}
}

// TestDomainXMLGolden pins the whole document per firmware and NIC kind,
// so any change to what libvirt is handed shows in review
// (go test ./internal/provider/libvirt -run DomainXMLGolden -update
// rewrites the files).
func TestDomainXMLGolden(t *testing.T) {
	for _, fw := range []string{FirmwareBIOS, FirmwareUEFI} {
		for _, nic := range nicKinds {
			t.Run(fw+"/"+nic.name, func(t *testing.T) {
				s := testDomainSpec(t)
				s.Firmware = fw
				nic.set(&s)
				out, err := buildDomainXML(s)
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join("testdata", fmt.Sprintf("domain-%s-%s.golden", fw, nic.name))
				if *updateGolden {
					if err := os.WriteFile(path, []byte(out+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update to write it)", err)
				}
				if out+"\n" != string(want) {
					t.Errorf("%s changed (-update rewrites it):\n got:\n%s\nwant:\n%s", path, out, want)
				}
			})
		}
	}
}

// TestSchemaCheckCatchesAWrongElement: the schema check is not vacuous.
// A domain with one wrong value or element, each a mistake this builder
// could make, fails virt-xml-validate.
func TestSchemaCheckCatchesAWrongElement(t *testing.T) {
	xmlValidator(t)
	out, err := buildDomainXML(testDomainSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"rng backend model", `<backend model="random">`, `<backend model="urandom">`},
		{"disk source as a file attribute on a volume disk", `<source pool="default"`, `<source file="/x" pool="default"`},
		{"graphics none (libvirt 9.0 rejects it)", `<memballoon`, `<graphics type="none"></graphics><memballoon`},
		{"on_crash", `<on_crash>destroy</on_crash>`, `<on_crash>reboot-later</on_crash>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(out, tc.old) {
				t.Fatalf("the rendered domain has no %q:\n%s", tc.old, out)
			}
			bad := strings.Replace(out, tc.old, tc.new, 1)
			if msg, ok := schemaValid(t, "domain", bad); ok {
				t.Fatalf("virt-xml-validate accepted a domain with %s:\n%s\n%s", tc.name, msg, bad)
			}
		})
	}
}

func TestDomainMAC(t *testing.T) {
	// Pinned: a changed derivation would give every existing instance a
	// new MAC on its next define, and Get would match no address source.
	for name, want := range map[string]string{
		"web-1":        "52:54:00:c4:71:9a",
		"egress-proxy": "52:54:00:f9:d5:aa",
		"":             "52:54:00:e3:b0:c4",
	} {
		if got := domainMAC(name); got != want {
			t.Errorf("domainMAC(%q) = %s, want %s", name, got, want)
		}
	}
	form := regexp.MustCompile(`^52:54:00(:[0-9a-f]{2}){3}$`)
	seen := map[string]string{}
	for i := range 200 {
		name := fmt.Sprintf("proxy-%d", i)
		mac := domainMAC(name)
		if !form.MatchString(mac) {
			t.Fatalf("domainMAC(%q) = %q: not 52:54:00 and three lower-case bytes", name, mac)
		}
		if got, err := canonicalMAC(mac); err != nil || got != mac {
			t.Fatalf("domainMAC(%q) = %q: buildDomainXML would refuse it or rewrite it (%q, %v)", name, mac, got, err)
		}
		if domainMAC(name) != mac {
			t.Fatalf("domainMAC(%q) is not stable", name)
		}
		if other, dup := seen[mac]; dup {
			t.Fatalf("domainMAC(%q) = domainMAC(%q) = %s", name, other, mac)
		}
		seen[mac] = name
	}
}

// testVolumes are the volumes Create makes: the cached image (length known
// or not), its marker, the overlay on a qcow2 or a raw image, the seed.
var testVolumes = []struct {
	name string
	spec volumeSpec
}{
	{"qcow2 image of known length", volumeSpec{Name: "img-3f2a.qcow2", CapacityBytes: 154664960, Format: FormatQCOW2}},
	{"raw image of unknown length", volumeSpec{Name: "img-3f2a.raw", Format: FormatRaw}},
	{"marker", volumeSpec{Name: "img-3f2a.complete", CapacityBytes: 64, Format: FormatRaw}},
	{"overlay on qcow2", volumeSpec{Name: "web-1_0123456789_u_disk.qcow2", CapacityBytes: 10 << 30, Format: FormatQCOW2,
		BackingPath: "/var/lib/libvirt/images/img-3f2a.qcow2", BackingFormat: FormatQCOW2}},
	{"overlay on raw", volumeSpec{Name: "web-1_0123456789_u_disk.qcow2", CapacityBytes: 4 << 30, Format: FormatQCOW2,
		BackingPath: "/pool/img-3f2a.raw", BackingFormat: FormatRaw}},
	{"seed", volumeSpec{Name: "web-1_0123456789_u_seed.iso", CapacityBytes: 374784, Format: formatISO}},
	{"name with XML's special characters", volumeSpec{Name: `a<&>"'.raw`, CapacityBytes: 1, Format: FormatRaw}},
}

func TestVolumeXML(t *testing.T) {
	for _, tc := range testVolumes {
		t.Run(tc.name, func(t *testing.T) {
			out, err := volumeXML(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			var v libvirtxml.StorageVolume
			if err := v.Unmarshal(out); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if v.Name != tc.spec.Name {
				t.Errorf("name %q", v.Name)
			}
			if v.Capacity == nil || v.Capacity.Unit != "bytes" || v.Capacity.Value != tc.spec.CapacityBytes {
				t.Errorf("capacity %+v, want %d bytes", v.Capacity, tc.spec.CapacityBytes)
			}
			if v.Allocation == nil || v.Allocation.Value != 0 {
				t.Errorf("allocation %+v, want 0 (sparse)", v.Allocation)
			}
			if v.Target == nil || v.Target.Format == nil || v.Target.Format.Type != tc.spec.Format {
				t.Errorf("target %+v, want format %s", v.Target, tc.spec.Format)
			}
			switch b := v.BackingStore; {
			case tc.spec.BackingPath == "" && b != nil:
				t.Errorf("backingStore %+v on a volume without one", b)
			case tc.spec.BackingPath != "" && (b == nil || b.Path != tc.spec.BackingPath || b.Format == nil || b.Format.Type != tc.spec.BackingFormat):
				t.Errorf("backingStore %+v, want %s (%s)", b, tc.spec.BackingPath, tc.spec.BackingFormat)
			}
			// What Create writes, the reuse check reads back the same.
			desc, err := parseVolumeXML(out)
			want := volumeDesc{CapacityBytes: tc.spec.CapacityBytes, Format: tc.spec.Format,
				BackingPath: tc.spec.BackingPath, BackingFormat: tc.spec.BackingFormat}
			if err != nil || desc != want {
				t.Errorf("parseVolumeXML(volumeXML) = %+v, %v; want %+v", desc, err, want)
			}
		})
	}
}

func TestVolumeXMLRefuses(t *testing.T) {
	overlay := volumeSpec{Name: "o.qcow2", CapacityBytes: 1 << 30, Format: FormatQCOW2, BackingPath: "/p/base.qcow2", BackingFormat: FormatQCOW2}
	for _, tc := range []struct {
		name   string
		change func(*volumeSpec)
		want   string
	}{
		{"empty name", func(v *volumeSpec) { v.Name = "" }, "name: empty"},
		{"name with a slash", func(v *volumeSpec) { v.Name = "../etc/x" }, "contains '/'"},
		{"name with a tab", func(v *volumeSpec) { v.Name = "a\tb" }, "contains a control character"},
		{"empty format", func(v *volumeSpec) { v.Format = "" }, `format "" is not qcow2, raw or iso`},
		{"unknown format", func(v *volumeSpec) { v.Format = "vmdk" }, `format "vmdk"`},
		{"backing path without format", func(v *volumeSpec) { v.BackingFormat = "" }, "give both or neither"},
		{"backing format without path", func(v *volumeSpec) { v.BackingPath = "" }, "give both or neither"},
		{"backing under a raw volume", func(v *volumeSpec) { v.Format = FormatRaw }, `a backing image needs format qcow2, not "raw"`},
		{"backing under the seed", func(v *volumeSpec) { v.Format = formatISO }, `not "iso"`},
		{"relative backing path", func(v *volumeSpec) { v.BackingPath = "base.qcow2" }, `backing path "base.qcow2" is not absolute`},
		{"unknown backing format", func(v *volumeSpec) { v.BackingFormat = "iso" }, `backing format "iso" is not qcow2 or raw`},
		{"overlay of size 0", func(v *volumeSpec) { v.CapacityBytes = 0 }, "an overlay needs its virtual size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := overlay
			tc.change(&v)
			out, err := volumeXML(v)
			if err == nil {
				t.Fatalf("no error; rendered\n%s", out)
			}
			if !errors.Is(err, provider.ErrPermanent) {
				t.Errorf("class %v, want Permanent: %v", provider.ClassOf(err), err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestParseVolumeXML reads StorageVolGetXMLDesc answers captured from the
// real libvirtd 9.0 of the test host, dir pool (testdata/README.md says how).
func TestParseVolumeXML(t *testing.T) {
	const pool = "/run/egress-proxies-operator/libvirt-test/egress-lv/pool/"
	for _, tc := range []struct {
		file string
		want volumeDesc
	}{
		{"volume-overlay.xml", volumeDesc{CapacityBytes: 64 << 20, Format: FormatQCOW2,
			BackingPath: pool + "xmlhelper-img.qcow2", BackingFormat: FormatQCOW2}},
		{"volume-overlay-raw.xml", volumeDesc{CapacityBytes: 64 << 20, Format: FormatQCOW2,
			BackingPath: pool + "xmlhelper-img.raw", BackingFormat: FormatRaw}},
		// After the upload and a pool refresh: the qcow2 header's virtual size.
		{"volume-image.xml", volumeDesc{CapacityBytes: 1 << 20, Format: FormatQCOW2}},
		// Created for an upload of 196616 bytes: qemu-img rounded it up.
		{"volume-image-before-upload.xml", volumeDesc{CapacityBytes: 197632, Format: FormatQCOW2}},
		{"volume-image-raw-unknown-length.xml", volumeDesc{CapacityBytes: 0, Format: FormatRaw}},
		// Created as iso, uploaded, refreshed: still iso.
		{"volume-seed.xml", volumeDesc{CapacityBytes: 374784, Format: formatISO}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseVolumeXML(string(data))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDefinedDomainKeepsWhatWeWrote reads the domains as the real libvirtd
// returned them after DomainDefineXML of buildDomainXML's output
// (testdata/domain-*.defined.xml): the marks, the MAC and the sizes are
// there, but libvirt rewrites the document (machine pc-i440fx-7.2, memory
// in KiB, added controllers and addresses), so nothing may compare the
// XML as a string.
func TestDefinedDomainKeepsWhatWeWrote(t *testing.T) {
	for _, tc := range []struct{ file, name, machine string }{
		{"domain-bios-user.defined.xml", "xmlhelper-bios-user", "pc-i440fx-7.2"},
		{"domain-uefi-bridge.defined.xml", "xmlhelper-uefi-bridge", "pc-q35-7.2"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var d libvirtxml.Domain
			if err := d.Unmarshal(string(data)); err != nil {
				t.Fatal(err)
			}
			if d.Name != tc.name || d.OS.Type.Machine != tc.machine {
				t.Errorf("name %q machine %q, want %q %q", d.Name, d.OS.Type.Machine, tc.name, tc.machine)
			}
			if d.Metadata == nil {
				t.Fatal("libvirt kept no <metadata>")
			}
			md, err := parseMetadata(d.Metadata.XML)
			if err != nil || md.Marks != testMarks {
				t.Errorf("marks %+v, %v; want %+v", md.Marks, err, testMarks)
			}
			if got := d.Devices.Interfaces[0].MAC.Address; got != domainMAC(tc.name) {
				t.Errorf("mac %s, want domainMAC(%q) = %s", got, tc.name, domainMAC(tc.name))
			}
			if d.Memory.Value != 1024*1024 || d.Memory.Unit != "KiB" {
				t.Errorf("memory %d %s, want 1024 MiB as libvirt writes it (1048576 KiB)", d.Memory.Value, d.Memory.Unit)
			}
		})
	}
}

// TestParseVolumeXMLUnits: the capacity in every unit libvirt's parser
// takes (virScaleInteger), so the overlay check compares bytes with bytes.
func TestParseVolumeXMLUnits(t *testing.T) {
	for _, tc := range []struct {
		unit  string
		value uint64
		want  uint64
	}{
		{"", 12345, 12345},
		{"bytes", 4294967296, 4294967296},
		{"b", 7, 7},
		{"B", 7, 7},
		{"byte", 7, 7},
		{"k", 2, 2048},
		{"K", 2, 2048},
		{"KiB", 2, 2048},
		{"KB", 2, 2000},
		{"kB", 2, 2000},
		{"M", 3, 3 << 20},
		{"MiB", 3, 3 << 20},
		{"MB", 3, 3000000},
		{"G", 10, 10 << 30},
		{"GiB", 10, 10 << 30},
		{"GB", 10, 10000000000},
		{"T", 1, 1 << 40},
		{"TiB", 1, 1 << 40},
		{"TB", 1, 1000000000000},
		{"P", 1, 1 << 50},
		{"PB", 1, 1000000000000000},
		{"E", 15, 15 << 60},
		{"EiB", 15, 15 << 60},
		{"EB", 18, 18000000000000000000},
	} {
		t.Run(tc.unit, func(t *testing.T) {
			doc := fmt.Sprintf(`<volume type='file'><name>v</name><capacity unit='%s'>%d</capacity><target><format type='raw'/></target></volume>`,
				tc.unit, tc.value)
			got, err := parseVolumeXML(doc)
			if err != nil {
				t.Fatal(err)
			}
			if got.CapacityBytes != tc.want {
				t.Errorf("%d %s = %d bytes, want %d", tc.value, tc.unit, got.CapacityBytes, tc.want)
			}
		})
	}
}

// TestParseVolumeXMLRefuses: an answer that does not say what the check
// needs is Transient (libvirt wrote it; a retry reads it again).
func TestParseVolumeXMLRefuses(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"empty", "", "does not parse"},
		{"not XML", "volume: v", "does not parse"},
		{"a pool", `<pool type='dir'><name>p</name></pool>`, "does not parse"},
		{"cut off", `<volume type='file'><name>v</name><capacity unit='bytes'>1</capa`, "does not parse"},
		{"no capacity", `<volume type='file'><name>v</name><target><format type='qcow2'/></target></volume>`, `volume "v" has no capacity`},
		{"capacity not a number", `<volume><name>v</name><capacity unit='bytes'>lots</capacity></volume>`, "does not parse"},
		{"negative capacity", `<volume><name>v</name><capacity unit='bytes'>-1</capacity></volume>`, "does not parse"},
		{"unknown unit", `<volume><name>v</name><capacity unit='furlongs'>1</capacity></volume>`, `capacity: unknown unit "furlongs"`},
		{"unknown suffix", `<volume><name>v</name><capacity unit='Kibi'>1</capacity></volume>`, `unknown unit "Kibi"`},
		{"overflow", `<volume><name>v</name><capacity unit='EiB'>16</capacity></volume>`, "16 EiB overflows 64 bits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVolumeXML(tc.doc)
			if err == nil {
				t.Fatalf("no error; read %+v", got)
			}
			if !errors.Is(err, provider.ErrTransient) {
				t.Errorf("class %v, want Transient: %v", provider.ClassOf(err), err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestXMLSchemas checks every document the tests above build, and the
// golden files, against libvirt's own schemas (virt-xml-validate), apart
// from the structural tests so those run on a machine without it.
func TestXMLSchemas(t *testing.T) {
	xmlValidator(t)
	for _, fw := range []string{FirmwareBIOS, FirmwareUEFI} {
		for _, nic := range nicKinds {
			t.Run("domain/"+fw+"/"+nic.name, func(t *testing.T) {
				s := testDomainSpec(t)
				s.Firmware = fw
				nic.set(&s)
				out, err := buildDomainXML(s)
				if err != nil {
					t.Fatal(err)
				}
				virtXMLValidate(t, "domain", out)
			})
		}
	}
	for _, tc := range domainVariants {
		t.Run("domain/"+tc.name, func(t *testing.T) {
			s := testDomainSpec(t)
			tc.change(&s)
			out, err := buildDomainXML(s)
			if err != nil {
				t.Fatal(err)
			}
			virtXMLValidate(t, "domain", out)
		})
	}
	goldens, err := filepath.Glob(filepath.Join("testdata", "domain-*.golden"))
	if err != nil || len(goldens) != 2*len(nicKinds) {
		t.Fatalf("golden files %v, %v: want one per firmware and NIC kind", goldens, err)
	}
	for _, path := range goldens {
		t.Run(path, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			virtXMLValidate(t, "domain", string(data))
		})
	}
	for _, tc := range testVolumes {
		t.Run("volume/"+tc.name, func(t *testing.T) {
			out, err := volumeXML(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			virtXMLValidate(t, "storagevol", out)
		})
	}
}

// The schema check: libvirt's own RELAX NG schemas through virt-xml-validate
// (libvirt-clients), which runs xmllint (libxml2-utils).

// xmlValidator is virt-xml-validate's path; the test skips, saying what
// to install, only when it or the xmllint it runs is absent.
func xmlValidator(t *testing.T) string {
	t.Helper()
	if os.Getenv("SKIP_LIBVIRT_SCHEMA_TESTS") == "1" {
		t.Skip("SKIP_LIBVIRT_SCHEMA_TESTS=1: libvirt's schema check skipped")
	}
	bin, err := exec.LookPath("virt-xml-validate")
	if err != nil {
		t.Fatal("virt-xml-validate is not installed: make install-test-deps (libvirt-clients, libxml2-utils), or SKIP_LIBVIRT_SCHEMA_TESTS=1")
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		t.Fatal("virt-xml-validate needs xmllint, which is not installed: make install-test-deps (libxml2-utils), or SKIP_LIBVIRT_SCHEMA_TESTS=1")
	}
	return bin
}

// schemaValid runs virt-xml-validate on doc against schema (domain or
// storagevol): ok, or its complaint.
func schemaValid(t *testing.T, schema, doc string) (msg string, ok bool) {
	t.Helper()
	bin := xmlValidator(t)
	f := filepath.Join(t.TempDir(), schema+".xml")
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, f, schema).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), true
	case errors.As(err, &exit) && (exit.ExitCode() == 1 || exit.ExitCode() == 3):
		// xmllint's "not well formed" and "fails to validate".
		return string(out), false
	default:
		t.Fatalf("virt-xml-validate %s %s: %v\n%s", f, schema, err, out)
		return "", false
	}
}

func virtXMLValidate(t *testing.T, schema, doc string) {
	t.Helper()
	if msg, ok := schemaValid(t, schema, doc); !ok {
		t.Errorf("libvirt's %s schema rejects the XML:\n%s\n%s", schema, msg, doc)
	}
}
