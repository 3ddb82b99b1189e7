package nocloud

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The real check of NetworkConfig: Debian's cloud-init reads every case of
// networkConfigCases. Its schema command validates network config only in
// the releases that have --schema-type network-config; every release has
// net-convert, which parses the config with the same code the guest runs
// at boot and renders it for the guest's network stack, so each rendering
// is checked for the address, the default route, the resolvers and the
// NIC's match, as the guest would apply them.

// writeNetworkConfig puts one case's network config in a file.
func writeNetworkConfig(t *testing.T, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), FileNetworkConfig)
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// cloudInit runs cloud-init with args and returns its output and error.
func cloudInit(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestNetworkConfig_CloudInitSchemaAccepts(t *testing.T) {
	bin := cloudInitBinary(t)
	help, _ := cloudInit(t, bin, "schema", "--help")
	if !strings.Contains(help, "--schema-type") {
		version, _ := cloudInit(t, bin, "--version")
		t.Skipf("%s: its schema command validates cloud-config only (no --schema-type network-config, which later releases have); TestNetworkConfig_CloudInitRenders reads every case with its parser", strings.TrimSpace(version))
	}
	for _, tc := range networkConfigCases {
		t.Run(tc.name, func(t *testing.T) {
			content, err := NetworkConfig(tc.addr, tc.mac)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := cloudInit(t, bin, "schema", "--schema-type", "network-config", "-c", writeNetworkConfig(t, content)); err != nil {
				t.Fatalf("cloud-init schema refuses the network config: %v\n%s\n%s", err, out, content)
			}
		})
	}
	// The check can fail: a route without its destination is refused.
	bad := writeNetworkConfig(t, []byte("version: 2\nethernets:\n  eth0:\n    match: {name: e*}\n    routes:\n    - via: 192.0.2.1\n"))
	if out, err := cloudInit(t, bin, "schema", "--schema-type", "network-config", "-c", bad); err == nil {
		t.Errorf("cloud-init schema accepts a route without to:\n%s", out)
	}
}

// netConvert has cloud-init render the network config at p for Debian in
// the format kind (netplan, networkd, eni) and returns the files it wrote,
// by path below the output directory.
func netConvert(t *testing.T, bin, p, kind string) (map[string]string, error) {
	t.Helper()
	dir := t.TempDir()
	if out, err := cloudInit(t, bin, "devel", "net-convert", "--network-data", p, "--kind", "yaml",
		"--distro", "debian", "--output-kind", kind, "--directory", dir); err != nil {
		return nil, &convertError{err: err, out: out}
	}
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files[strings.TrimPrefix(path, dir)] = string(b)
		return err
	})
	return files, err
}

type convertError struct {
	err error
	out string
}

func (e *convertError) Error() string { return e.err.Error() + "\n" + e.out }

// hasLine says whether text has a line equal to line once trimmed.
func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

func TestNetworkConfig_CloudInitRenders(t *testing.T) {
	bin := cloudInitBinary(t)
	for _, tc := range networkConfigCases {
		t.Run(tc.name, func(t *testing.T) {
			content, err := NetworkConfig(tc.addr, tc.mac)
			if err != nil {
				t.Fatal(err)
			}
			p := writeNetworkConfig(t, content)
			mac := strings.ToLower(tc.mac)
			gw := tc.addr.Gateway
			var dns []string
			for _, d := range tc.addr.DNS {
				dns = append(dns, d.String())
			}

			t.Run("networkd", func(t *testing.T) {
				// Debian 12's cloud images: systemd-networkd.
				files, err := netConvert(t, bin, p, "networkd")
				if err != nil {
					t.Fatalf("net-convert: %v\n%s", err, content)
				}
				name := MACMatchedName
				if mac == "" {
					name = nameGlob // a glob networkd matches names with
				}
				unit, ok := files["/etc/systemd/network/10-cloud-init-"+name+".network"]
				if !ok || len(files) != 1 {
					t.Fatalf("networkd files %v, want only 10-cloud-init-%s.network", keys(files), name)
				}
				want := []string{"Address=" + tc.addr.Address.String(), "DHCP=no", "Name=" + name}
				if mac != "" {
					want = append(want, "MACAddress="+mac)
				}
				if gw.IsValid() {
					want = append(want, "Gateway="+gw.String())
					if gw.Is4() {
						want = append(want, "Destination=0.0.0.0/0")
					}
				}
				if len(dns) > 0 {
					want = append(want, "DNS="+strings.Join(dns, " "))
				}
				for _, w := range want {
					if !hasLine(unit, w) {
						t.Errorf("the networkd unit has no line %q:\n%s", w, unit)
					}
				}
				// A route to anything but the default (cloud-init 22.4
				// turns one to ::/0 into ::/64).
				if strings.Contains(unit, "Destination=") && !hasLine(unit, "Destination=0.0.0.0/0") {
					t.Errorf("the networkd unit routes somewhere other than the default:\n%s", unit)
				}
			})

			t.Run("eni", func(t *testing.T) {
				if mac == "" {
					t.Skip("ifupdown has no name globs: a guest rendering ENI needs the MAC (netcfg.go)")
				}
				files, err := netConvert(t, bin, p, "eni")
				if err != nil {
					t.Fatalf("net-convert: %v\n%s", err, content)
				}
				rules := files["/etc/udev/rules.d/70-persistent-net.rules"]
				if !strings.Contains(rules, `ATTR{address}=="`+mac+`", NAME="`+MACMatchedName+`"`) {
					t.Errorf("the udev rules do not name the NIC with MAC %s %s:\n%s", mac, MACMatchedName, rules)
				}
				eni := files["/etc/network/interfaces.d/50-cloud-init"]
				family := "inet"
				if tc.addr.Address.Addr().Is6() {
					family = "inet6"
				}
				want := []string{"auto " + MACMatchedName, "iface " + MACMatchedName + " " + family + " static", "address " + tc.addr.Address.String()}
				switch {
				case gw.Is4():
					want = append(want, "post-up route add default gw "+gw.String()+" || true")
				case gw.Is6():
					want = append(want, "gateway "+gw.String())
				}
				if len(dns) > 0 {
					want = append(want, "dns-nameservers "+strings.Join(dns, " "))
				}
				for _, w := range want {
					if !hasLine(eni, w) {
						t.Errorf("the interfaces file has no line %q:\n%s", w, eni)
					}
				}
			})

			t.Run("netplan", func(t *testing.T) {
				files, err := netConvert(t, bin, p, "netplan")
				if err != nil {
					t.Fatalf("net-convert: %v\n%s", err, content)
				}
				var doc struct {
					Network map[string]any `json:"network"`
				}
				if err := yaml.Unmarshal([]byte(files["/etc/netplan/50-cloud-init.yaml"]), &doc); err != nil {
					t.Fatalf("the netplan file: %v\n%v", err, files)
				}
				inner, err := yaml.Marshal(doc.Network)
				if err != nil {
					t.Fatal(err)
				}
				addr, match, err := ParseNetworkConfig(inner)
				if err != nil {
					t.Fatalf("the netplan cloud-init wrote is not the config given: %v\n%s", err, inner)
				}
				if !reflect.DeepEqual(addr, tc.addr) || (mac != "" && match.MAC != mac) || (mac == "" && match.Name != nameGlob) {
					t.Errorf("netplan gets %+v %+v, want %+v", addr, match, tc.addr)
				}
			})
		})
	}

	// The check can fail, on the very mistakes the rendering avoids: a
	// default route to "default" (refused), and a MAC YAML 1.1 reads as a
	// number (refused, or matched as that number).
	for _, c := range []struct{ name, text, line string }{
		{`route to "default"`, "version: 2\nethernets:\n  eth0:\n    match: {macaddress: \"52:54:00:ab:cd:ef\"}\n    set-name: eth0\n    addresses: [192.0.2.77/24]\n    routes: [{to: default, via: 192.0.2.1}]\n",
			"Gateway=192.0.2.1"},
		{"unquoted MAC", "version: 2\nethernets:\n  eth0:\n    match: {macaddress: 52:54:00:12:34:56}\n    set-name: eth0\n    addresses: [192.0.2.77/24]\n",
			"MACAddress=52:54:00:12:34:56"},
	} {
		t.Run("wrong: "+c.name, func(t *testing.T) {
			files, err := netConvert(t, bin, writeNetworkConfig(t, []byte(c.text)), "networkd")
			if err == nil && hasLine(files["/etc/systemd/network/10-cloud-init-eth0.network"], c.line) {
				t.Errorf("net-convert renders it as meant (%s):\n%v", c.line, files)
			}
		})
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
