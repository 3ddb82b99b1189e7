package squid

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// cloudConfigDoc is the part of a generated cloud-config the tests read.
type cloudConfigDoc struct {
	PackageUpdate  *bool    `json:"package_update"`
	PackageUpgrade *bool    `json:"package_upgrade"`
	Packages       []string `json:"packages"`
	WriteFiles     []struct {
		Path        string `json:"path"`
		Owner       string `json:"owner"`
		Permissions string `json:"permissions"`
		Content     string `json:"content"`
	} `json:"write_files"`
	Runcmd  []any `json:"runcmd"`
	Bootcmd []any `json:"bootcmd"`
}

func parseCloudConfig(t *testing.T, doc string) (cloudConfigDoc, map[string]any) {
	t.Helper()
	if !strings.HasPrefix(doc, "#cloud-config\n") {
		t.Fatalf("user-data does not start with #cloud-config:\n%s", doc)
	}
	var d cloudConfigDoc
	if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
		t.Fatalf("the cloud-config is not the YAML the tests expect: %v\n%s", err, doc)
	}
	var keys map[string]any
	if err := yaml.Unmarshal([]byte(doc), &keys); err != nil {
		t.Fatal(err)
	}
	return d, keys
}

// squidConfOf is the squid.conf the cloud-config writes.
func squidConfOf(t *testing.T, d cloudConfigDoc) string {
	t.Helper()
	for _, f := range d.WriteFiles {
		if f.Path == "/etc/squid/squid.conf" {
			return f.Content
		}
	}
	t.Fatalf("no write_files entry for /etc/squid/squid.conf in %+v", d.WriteFiles)
	return ""
}

func runcmdLines(d cloudConfigDoc) []string {
	var out []string
	for _, c := range d.Runcmd {
		switch c := c.(type) {
		case string:
			out = append(out, c)
		case []any:
			s := make([]string, len(c))
			for i, a := range c {
				s[i] = fmt.Sprint(a)
			}
			out = append(out, strings.Join(s, " "))
		}
	}
	return out
}

// TestCloudConfig_Generated: the cloud-config installs the family's Squid
// package, writes the generated squid.conf (the VM variant of Config for
// the request's port, ranges and the entry's policy) where the distro's
// service reads it, enables and (re)starts the service, and holds nothing
// else: no user, no key, no other package, no other file.
func TestCloudConfig_Generated(t *testing.T) {
	allowing := (&egress.Settings{AllowedDestinations: []string{"10.20.0.0/16"}, ConnectPorts: []int32{443, 8443}}).Policy()
	for _, tc := range []struct {
		name     string
		in       CloudConfigParams
		packages []string
		runcmd   []string
		conf     []string // lines the squid.conf holds
	}{
		{"debian, ranges, default policy",
			CloudConfigParams{Port: 3128, Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
			[]string{"squid"},
			[]string{enableUnit("squid.service"), "systemctl restart squid.service"},
			[]string{"http_port 3128", "acl allowed_clients src 10.1.0.0/16", "acl connect_ports port 443"}},
		{"debian by name, empty ranges admit the VM's loopback",
			CloudConfigParams{Port: 8080, Family: FamilyDebian},
			[]string{"squid"},
			[]string{enableUnit("squid.service"), "systemctl restart squid.service"},
			[]string{"http_port 8080", "acl allowed_clients src 127.0.0.1/32", "acl allowed_clients src ::1/128"}},
		{"rhel on squid's own SELinux port",
			CloudConfigParams{Port: 3128, Family: FamilyRHEL, Destinations: allowing},
			[]string{"squid"},
			[]string{enableUnit("squid.service"), "systemctl restart squid.service"},
			[]string{"http_port 3128", "acl refused_destinations dst 10.0.0.0/12 10.16.0.0/14 10.21.0.0/16 10.22.0.0/15 10.24.0.0/13 10.32.0.0/11 10.64.0.0/10 10.128.0.0/9", "acl connect_ports port 443 8443"}},
		{"rhel on another port labels it for Squid first",
			CloudConfigParams{Port: 3129, Family: FamilyRHEL},
			[]string{"squid", "policycoreutils-python-utils"},
			[]string{"semanage port -a -t squid_port_t -p tcp 3129 || semanage port -m -t squid_port_t -p tcp 3129",
				enableUnit("squid.service"), "systemctl restart squid.service"},
			[]string{"http_port 3129"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := CloudConfig(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			d, keys := parseCloudConfig(t, doc)
			for k := range keys {
				switch k {
				case "package_update", "package_upgrade", "packages", "write_files", "runcmd":
				default:
					t.Errorf("the cloud-config sets %q; it must open nothing beyond Squid", k)
				}
			}
			if d.PackageUpdate == nil || !*d.PackageUpdate || d.PackageUpgrade == nil || *d.PackageUpgrade {
				t.Errorf("package_update %v, package_upgrade %v; want true and false", d.PackageUpdate, d.PackageUpgrade)
			}
			if fmt.Sprint(d.Packages) != fmt.Sprint(tc.packages) {
				t.Errorf("packages %q, want %q", d.Packages, tc.packages)
			}
			if len(d.WriteFiles) != 1 {
				t.Fatalf("write_files %+v, want only squid.conf", d.WriteFiles)
			}
			f := d.WriteFiles[0]
			if f.Path != "/etc/squid/squid.conf" || f.Owner != "root:root" || f.Permissions != "0644" {
				t.Errorf("write_files[0] = %s %s %s, want /etc/squid/squid.conf root:root 0644", f.Path, f.Owner, f.Permissions)
			}
			// The embedded file is byte for byte the generator's VM variant.
			if want := Config(vmParams(tc.in)); f.Content != want {
				t.Errorf("embedded squid.conf differs from Config(vmParams):\n%s\nwant\n%s", f.Content, want)
			}
			for _, l := range tc.conf {
				if !strings.Contains(f.Content, "\n"+l+"\n") {
					t.Errorf("squid.conf lacks %q:\n%s", l, f.Content)
				}
			}
			if got := runcmdLines(d); fmt.Sprint(got) != fmt.Sprint(tc.runcmd) {
				t.Errorf("runcmd %q, want %q", got, tc.runcmd)
			}
		})
	}
}

// TestCloudConfig_Golden pins one generated cloud-config byte for byte
// (go test ./internal/provider/squid -run Golden -update rewrites it).
func TestCloudConfig_Golden(t *testing.T) {
	doc, err := CloudConfig(CloudConfigParams{
		Generator: "egress-proxies-operator (gcp provider)",
		Port:      3128,
		Clients:   []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("2001:db8::/32")},
		Family:    FamilyDebian,
	})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "cloudconfig-debian.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if doc != string(want) {
		t.Errorf("the generated cloud-config differs from %s:\n%s", golden, doc)
	}
}

// TestConfig_VMDiffersFromPodOnlyInLayout: the Pod's and the VM's
// squid.conf carry the same rules; they differ only in where Squid writes
// its pid file and logs, and in the generator's name.
func TestConfig_VMDiffersFromPodOnlyInLayout(t *testing.T) {
	clients := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	pod := Config(Params{Generator: "egress-proxies-operator (kubernetes provider)", Port: 3128, Clients: clients,
		PidFile: "/var/run/squid/squid.pid", CoredumpDir: "/var/spool/squid"})
	vm := Config(vmParams(CloudConfigParams{Port: 3128, Clients: clients}))
	layout := []string{"# Generated by ", "pid_filename ", "coredump_dir ", "access_log ", "cache_log ", "cache_effective_user ",
		// The guest's serving reporter is answered on VMs only.
		"acl serving_probe", "acl decided_serving_probe ", "http_access deny serving_probe_client "}
	onlyLayout := func(conf string) (rules []string) {
		for _, l := range strings.Split(conf, "\n") {
			isLayout := false
			for _, p := range layout {
				isLayout = isLayout || strings.HasPrefix(l, p)
			}
			if !isLayout {
				rules = append(rules, l)
			}
		}
		return rules
	}
	if p, v := strings.Join(onlyLayout(pod), "\n"), strings.Join(onlyLayout(vm), "\n"); p != v {
		t.Errorf("the rules differ between the Pod and the VM:\npod:\n%s\nvm:\n%s", p, v)
	}
	for _, l := range []string{"pid_filename /run/squid.pid", "coredump_dir /var/spool/squid",
		"access_log syslog:daemon.info logformat=egress has_request !serving_probe", "cache_log /var/log/squid/cache.log"} {
		if !strings.Contains(vm, "\n"+l+"\n") {
			t.Errorf("the VM's squid.conf lacks %q (the distro's paths):\n%s", l, vm)
		}
	}
	for _, l := range []string{"access_log stdio:/dev/stdout logformat=egress has_request", "cache_log /dev/stderr"} {
		if !strings.Contains(pod, "\n"+l+"\n") {
			t.Errorf("the Pod's squid.conf lacks %q (logs to the container's output):\n%s", l, pod)
		}
	}
	// The distro's service drops to the package's user (proxy on Debian,
	// squid on RHEL): the VM's config names none.
	if strings.Contains(vm, "cache_effective_user") {
		t.Errorf("the VM's squid.conf names a user:\n%s", vm)
	}
}

func TestCloudConfig_Refused(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   CloudConfigParams
		want string
	}{
		{"suse", CloudConfigParams{Port: 3128, Family: "suse"}, `distribution family "suse" is not supported`},
		{"alpine", CloudConfigParams{Port: 3128, Family: "alpine"}, `distribution family "alpine" is not supported`},
		{"port 0", CloudConfigParams{Port: 0}, "port 0 is outside 1-65535"},
		{"port too high", CloudConfigParams{Port: 65536}, "port 65536 is outside 1-65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := CloudConfig(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("CloudConfig(%+v) = %v, want a Permanent error with %q", tc.in, err, tc.want)
			}
			if doc != "" {
				t.Errorf("a refused request still produced a cloud-config")
			}
		})
	}
}

func TestParseFamily(t *testing.T) {
	for in, want := range map[string]Family{"": FamilyDebian, "debian": FamilyDebian, "rhel": FamilyRHEL} {
		if got, err := ParseFamily(in); err != nil || got != want {
			t.Errorf("ParseFamily(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ubuntu", "suse", "alpine", "Debian"} {
		if _, err := ParseFamily(in); err == nil || !strings.Contains(err.Error(), "debian, rhel") {
			t.Errorf("ParseFamily(%q) = %v, want an error listing debian, rhel", in, err)
		}
	}
}

// TestUserData: a Proxy's own cloud-init is used as given; without one the
// generated cloud-config is returned, for the request's port and ranges.
// Either way the result is Sensitive.
func TestUserData(t *testing.T) {
	own := "#cloud-config\nruncmd: [[echo, sentinel-3f1c]]\n"
	got, err := UserData(provider.CreateRequest{Port: 3128, CloudInit: provider.Sensitive(own), AllowedSourceRanges: []string{"10.0.0.0/8"}}, nil, FamilyDebian, "")
	if err != nil || got.Reveal() != own {
		t.Errorf("UserData with the Proxy's cloud-init = %q, %v; want it verbatim", got.Reveal(), err)
	}
	if s := fmt.Sprintf("%v %s %q %+v", got, got, got, got); strings.Contains(s, "sentinel") {
		t.Errorf("the user-data printed: %s", s)
	}

	got, err = UserData(provider.CreateRequest{Port: 3129, AllowedSourceRanges: []string{"10.1.0.0/16"}}, nil, FamilyRHEL, "")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := CloudConfig(CloudConfigParams{Port: 3129, Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, Family: FamilyRHEL})
	if got.Reveal() != want {
		t.Errorf("UserData without cloud-init:\n%s\nwant\n%s", got.Reveal(), want)
	}

	// A range with host bits is refused as the contract says, naming it.
	_, err = UserData(provider.CreateRequest{Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8", "10.1.0.1/16"}}, nil, FamilyDebian, "")
	if err == nil || !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "allowedSourceRanges[1]") {
		t.Errorf("UserData with a non-canonical range = %v, want Permanent naming allowedSourceRanges[1]", err)
	}
	_, err = UserData(provider.CreateRequest{Port: 3128}, nil, "alpine", "")
	if err == nil || !errors.Is(err, provider.ErrPermanent) {
		t.Errorf("UserData for alpine = %v, want Permanent", err)
	}
}

// A Proxy's clientAuth users reach the VM: the password file is written
// root-only before the package exists, handed to Squid's group after it,
// and squid.conf checks it; a malformed file, or one beside the Proxy's
// own cloud-init, is refused without echoing it.
func TestUserDataCarriesClientAuth(t *testing.T) {
	const users = "alice:$2y$04$Q0oOV/DmLL4SCVin7w9Rlegb2hRVF6hyIlAdLcvngU0I6Uo/1GlSa\n"
	for family, group := range map[Family]string{FamilyDebian: "proxy", FamilyRHEL: "squid"} {
		ud, err := UserData(provider.CreateRequest{Port: 3128, ClientAuth: users}, nil, family, "")
		if err != nil {
			t.Fatal(err)
		}
		doc := ud.Reveal()
		for _, want := range []string{
			"  - path: /etc/squid/htpasswd\n    owner: root:root\n    permissions: '0600'\n    content: |\n      " + strings.TrimSuffix(users, "\n") + "\n",
			"  - chgrp " + group + " /etc/squid/htpasswd\n  - chmod 0640 /etc/squid/htpasswd\n  - '" + enableUnit("squid.service") + "'\n",
			"      auth_param basic program /usr/lib/squid/basic_ncsa_auth /etc/squid/htpasswd\n",
			"      http_access deny decided_client_auth !authenticated\n",
		} {
			if !strings.Contains(doc, want) {
				t.Errorf("%s: the cloud-config lacks %q:\n%s", family, want, doc)
			}
		}
		if out, err := squidtest.Schema(t, doc); err != nil || !strings.Contains(string(out), "Valid cloud-config") {
			t.Errorf("%s: cloud-init schema refuses it: %v\n%s", family, err, out)
		}
	}
	for _, req := range []provider.CreateRequest{
		{Port: 3128, ClientAuth: "alice:plain-text-SENTINEL\n"},
		{Port: 3128, ClientAuth: users, CloudInit: "#cloud-config\n"},
	} {
		_, err := UserData(req, nil, FamilyDebian, "")
		if err == nil || !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "clientAuth") ||
			strings.Contains(err.Error(), "SENTINEL") || strings.Contains(err.Error(), "$2y$") {
			t.Errorf("UserData = %v; want Permanent naming clientAuth, not its content", err)
		}
	}
}

// TestCloudConfig_ReporterInBootcmd: with a reporter, bootcmd (the first
// module, before the packages) is exactly the reporter's installer; without
// one there is no bootcmd.
func TestCloudConfig_ReporterInBootcmd(t *testing.T) {
	for _, publish := range []servingreport.Publish{servingreport.PublishFile, ""} {
		doc, err := CloudConfig(CloudConfigParams{Port: 3129, Reporter: publish})
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Bootcmd []string `json:"bootcmd"`
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		switch {
		case publish == "" && d.Bootcmd != nil:
			t.Errorf("a bootcmd without a reporter: %q", d.Bootcmd)
		case publish != "" && (len(d.Bootcmd) != 1 || d.Bootcmd[0] != servingreport.Installer(servingreport.Config{Port: 3129, Publish: publish})):
			t.Errorf("bootcmd %q, want the installer", d.Bootcmd)
		}
	}
}

// TestUserData_EgressEcho: an entry's echo reaches the VM twice, in the
// reporter's unit (its third argument) and in squid.conf (the reporter's
// allow line), and the real cloud-init still takes the document.
func TestUserData_EgressEcho(t *testing.T) {
	dest := (&egress.Settings{EgressIPEcho: "http://192.0.2.1:8080/ip?format=text"}).Policy()
	ud, err := UserData(provider.CreateRequest{Port: 3128}, dest, FamilyDebian, servingreport.PublishFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := ud.Reveal()
	for _, want := range []string{
		"ExecStart=" + servingreport.ReporterPath + " 3128 file http://192.0.2.1:8080/ip?format=text\n",
		"http_access allow serving_probe_client egress_echo_method",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the cloud-config lacks %q:\n%s", want, doc)
		}
	}
	if out, err := squidtest.Schema(t, doc); err != nil || !strings.Contains(string(out), "Valid cloud-config") {
		t.Errorf("cloud-init schema refuses it: %v\n%s", err, out)
	}
	ud, err = UserData(provider.CreateRequest{Port: 3128}, egress.Default(), FamilyDebian, servingreport.PublishFile)
	if err != nil {
		t.Fatal(err)
	}
	if doc := ud.Reveal(); strings.Contains(doc, "egress_echo") || strings.Contains(doc, " 3128 file http") {
		t.Errorf("without an echo the cloud-config mentions one:\n%s", doc)
	}
}
