package libvirt

import (
	"reflect"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
)

const goodSHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// parseEntry reads a providers config with one entry of the given type
// name, through the same top-level parser the registry uses, and parses its
// block: messages carry the path the registry would give.
func parseEntry(t *testing.T, typeName, block string) (Config, string) {
	t.Helper()
	doc := "providers:\n- name: vms\n  type: " + typeName + "\n  " + typeName + ":\n" + indent(block, "    ")
	entries, err := config.Parse([]byte(doc), TypeNames)
	if err != nil {
		t.Fatalf("top level: %v\n%s", err, doc)
	}
	cfg, errs := Parse(entries[0].Settings, entries[0].SettingsPath())
	if len(errs) == 0 {
		return cfg, ""
	}
	return cfg, errs.ToAggregate().Error()
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = by + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func errText(t *testing.T, typeName, block string) string {
	t.Helper()
	_, msg := parseEntry(t, typeName, block)
	return msg
}

const minimalBlock = `hosts:
- name: beelink
  address: 192.0.2.10
  user: virt
  bridge: br0
`

func TestConfigDefaults(t *testing.T) {
	cfg, msg := parseEntry(t, TypeKVM, minimalBlock)
	if msg != "" {
		t.Fatal(msg)
	}
	yes := true
	want := Config{
		SSHKeyFile: DefaultSSHKeyFile, KnownHostsFile: DefaultKnownHostsFile, DiskSizeGiB: DefaultDiskSizeGiB,
		InstallGuestAgent: &yes,
		MachineTypes:      map[string]MachineType{DefaultMachineTypeName: DefaultMachineType}, DefaultMachineType: DefaultMachineTypeName,
		Hosts: []Host{{Name: "beelink", Address: "192.0.2.10", User: "virt", Socket: DefaultSocket, Pool: DefaultPool, Bridge: "br0"}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", cfg, want)
	}
	// Default is idempotent (New applies it again).
	again := cfg
	again.Default()
	if !reflect.DeepEqual(again, want) {
		t.Fatalf("Default twice changed the config: %+v", again)
	}
}

func TestConfigCatalogueDefaults(t *testing.T) {
	cfg, msg := parseEntry(t, TypeKVM2, minimalBlock+`domainType: qemu
images:
  debian-12: {url: "https://cloud.debian.org/images/debian-12-genericcloud-amd64.qcow2", sha256: `+goodSHA+`}
machineTypes:
  small: {vcpus: 1, memoryMiB: 512}
vendorData: "#!/bin/sh\necho site\n"
`)
	if msg != "" {
		t.Fatal(msg)
	}
	img := cfg.Images["debian-12"]
	if img.Format != FormatQCOW2 || img.Firmware != FirmwareBIOS {
		t.Errorf("image defaults: %+v", img)
	}
	if cfg.DefaultImage != "debian-12" || cfg.DefaultMachineType != "small" {
		t.Errorf("a one-entry catalogue is the default: image %q, machine type %q", cfg.DefaultImage, cfg.DefaultMachineType)
	}
	if *cfg.InstallGuestAgent {
		t.Error("vendorData set: the guest-agent script must default off")
	}
	if cfg.Hosts[0].DomainType != DomainTypeQEMU {
		t.Errorf("the host did not inherit the block's domainType: %+v", cfg.Hosts[0])
	}
}

// Both type names read the same block into the same config, so an entry
// switched from one to the other keeps its settings (and its instances).
func TestConfigBothTypeNamesParseAlike(t *testing.T) {
	a, msgA := parseEntry(t, TypeKVM, minimalBlock)
	b, msgB := parseEntry(t, TypeKVM2, minimalBlock)
	if msgA != "" || msgB != "" || !reflect.DeepEqual(a, b) {
		t.Fatalf("kvm and kvm2 differ: %+v (%s) vs %+v (%s)", a, msgA, b, msgB)
	}
}

// Every error names the path with the block the entry used.
func TestConfigErrorsNameTheBlockTheUserWrote(t *testing.T) {
	block := minimalBlock + `- name: nas
  address: "not an address"
  user: virt
  bridge: br0
`
	for _, typeName := range TypeNames {
		msg := errText(t, typeName, block)
		want := "providers[0]." + typeName + ".hosts[1].address"
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q does not name %s", typeName, msg, want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	host := func(extra string) string {
		return "hosts:\n- name: h1\n  address: 192.0.2.10\n  user: virt\n" + extra
	}
	for _, tc := range []struct {
		name, block, want string
	}{
		{"no block", "", "kvm.hosts: Required value"},
		{"no hosts", "diskSizeGb: 20\n", "kvm.hosts: Required value"},
		{"unknown key", minimalBlock + "bogus: 1\n", "kvm.bogus: Forbidden: unknown field"},
		{"unknown host key", host("  bridge: br0\n  bogus: 1\n"), "kvm.hosts[0].bogus: Forbidden: unknown field"},
		{"host name", "hosts:\n- name: Bee_Link\n  address: a\n  user: u\n  bridge: b\n", "kvm.hosts[0].name: Invalid value"},
		{"duplicate host", minimalBlock + "- name: beelink\n  address: 192.0.2.11\n  user: virt\n  bridge: br0\n", "kvm.hosts[1].name: Duplicate value"},
		{"address missing", "hosts:\n- name: h1\n  user: u\n  bridge: b\n", "kvm.hosts[0].address: Invalid value: \"\": required"},
		{"address port", strings.Replace(host("  bridge: br0\n"), "192.0.2.10", "192.0.2.10:99999", 1), "hosts[0].address: Invalid value: \"192.0.2.10:99999\": port \"99999\" is not a TCP port"},
		{"address user", strings.Replace(host("  bridge: br0\n"), "192.0.2.10", "root@192.0.2.10", 1), "hosts[0].address: Invalid value"},
		{"user missing", "hosts:\n- name: h1\n  address: a\n  bridge: b\n", "kvm.hosts[0].user: Required value"},
		{"socket relative", host("  bridge: br0\n  socket: libvirt-sock\n"), "kvm.hosts[0].socket: Invalid value"},
		{"pool", host("  bridge: br0\n  pool: \"my pool\"\n"), "kvm.hosts[0].pool: Invalid value"},
		{"no nic", host(""), "kvm.hosts[0].bridge: Required value"},
		{"bridge and network", host("  bridge: br0\n  network: lan\n"), "kvm.hosts[0].network: Invalid value: \"lan\": conflicts with bridge"},
		{"bridge name", host("  bridge: a-very-long-bridge-name\n"), "kvm.hosts[0].bridge: Invalid value"},
		{"host domain type", host("  bridge: br0\n  domainType: xen\n"), "kvm.hosts[0].domainType: Unsupported value: \"xen\""},
		{"domain type", minimalBlock + "domainType: hvf\n", "kvm.domainType: Unsupported value: \"hvf\""},
		{"disk size", minimalBlock + "diskSizeGb: -1\n", "kvm.diskSizeGb: Invalid value: -1"},
		{"key file relative", minimalBlock + "sshKeyFile: id_ed25519\n", "kvm.sshKeyFile: Invalid value"},
		{"known_hosts relative", minimalBlock + "knownHostsFile: known_hosts\n", "kvm.knownHostsFile: Invalid value"},
		{"insecure and known_hosts", minimalBlock + "insecureIgnoreHostKey: true\nknownHostsFile: /etc/kh\n", "kvm.insecureIgnoreHostKey: Invalid value: true: conflicts with knownHostsFile"},
		{"vendor data and agent", minimalBlock + "vendorData: x\ninstallGuestAgent: true\n", "kvm.installGuestAgent: Invalid value: true: conflicts with vendorData"},
		{"image key", minimalBlock + "images:\n  Debian: {url: \"https://a/b\", sha256: " + goodSHA + "}\n", "kvm.images[Debian]: Invalid value"},
		{"image url scheme", minimalBlock + "images:\n  d: {url: \"ftp://a/b\", sha256: " + goodSHA + "}\n", "kvm.images[d].url: Invalid value: \"ftp://a/b\": must be an http or https URL"},
		{"image url missing", minimalBlock + "images:\n  d: {sha256: " + goodSHA + "}\n", "kvm.images[d].url: Required value"},
		{"image sha missing", minimalBlock + "images:\n  d: {url: \"https://a/b\"}\n", "kvm.images[d].sha256: Invalid value"},
		{"image sha upper", minimalBlock + "images:\n  d: {url: \"https://a/b\", sha256: " + strings.ToUpper(goodSHA) + "}\n", "kvm.images[d].sha256: Invalid value"},
		{"image format", minimalBlock + "images:\n  d: {url: \"https://a/b\", sha256: " + goodSHA + ", format: vmdk}\n", "kvm.images[d].format: Unsupported value: \"vmdk\""},
		{"image firmware", minimalBlock + "images:\n  d: {url: \"https://a/b\", sha256: " + goodSHA + ", firmware: coreboot}\n", "kvm.images[d].firmware: Unsupported value"},
		{"image family", minimalBlock + "images:\n  d: {url: \"https://a/b\", sha256: " + goodSHA + ", family: alpine}\n", "kvm.images[d].family: Invalid value: \"alpine\""},
		{"default image", minimalBlock + "defaultImage: nope\n", "kvm.defaultImage: Not found: \"nope\""},
		{"vcpus", minimalBlock + "machineTypes:\n  s: {vcpus: 0, memoryMiB: 512}\n", "kvm.machineTypes[s].vcpus: Invalid value: 0"},
		{"memory", minimalBlock + "machineTypes:\n  s: {vcpus: 1, memoryMiB: 64}\n", "kvm.machineTypes[s].memoryMiB: Invalid value: 64"},
		{"default machine type", minimalBlock + "defaultMachineType: big\n", "kvm.defaultMachineType: Not found: \"big\""},
		{"destinations", minimalBlock + "allowedDestinations: [0.0.0.0/0]\n", "kvm.allowedDestinations[0]: Invalid value"},
		{"connect ports", minimalBlock + "connectPorts: [0]\n", "kvm.connectPorts[0]: Invalid value"},
		{"wrong type", minimalBlock + "diskSizeGb: ten\n", "kvm.diskSizeGb: Invalid value: \"ten\": expected a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := errText(t, TypeKVM, tc.block)
			if !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q does not contain %q", msg, tc.want)
			}
		})
	}
}

// An image URL with credentials is refused without repeating them.
func TestConfigImageURLCredentialsNotEchoed(t *testing.T) {
	msg := errText(t, TypeKVM, minimalBlock+"images:\n  d: {url: \"https://user:hunter2@example.com/d.qcow2\", sha256: "+goodSHA+"}\n")
	if !strings.Contains(msg, "kvm.images[d].url") || strings.Contains(msg, "hunter2") {
		t.Fatalf("error %q: want the path, never the password", msg)
	}
}

func TestSSHAddress(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.10":       "192.0.2.10:22",
		"192.0.2.10:2222":  "192.0.2.10:2222",
		"beelink.lan":      "beelink.lan:22",
		"Beelink.LAN:22":   "Beelink.LAN:22",
		"2001:db8::1":      "[2001:db8::1]:22",
		"[2001:db8::1]":    "[2001:db8::1]:22",
		"[2001:db8::1]:22": "[2001:db8::1]:22",
	} {
		got, err := sshAddress(in)
		if err != nil || got != want {
			t.Errorf("sshAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "host:0", "host:ssh", "a b", "root@host", "host/x", ":22", "under_score.example"} {
		if got, err := sshAddress(in); err == nil {
			t.Errorf("sshAddress(%q) = %q, want an error", in, got)
		}
	}
}
