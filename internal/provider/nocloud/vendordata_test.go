package nocloud

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

func TestNoCloudSeed_GuestAgentVendorDataIsAShellScript(t *testing.T) {
	script := GuestAgentVendorData.Reveal()
	// cloud-init runs a vendor-data that starts with "#!" as a script.
	if !strings.HasPrefix(script, "#!/bin/sh\n") {
		t.Fatalf("vendor-data does not start with #!/bin/sh: %q", script[:min(len(script), 20)])
	}
	for _, shell := range []string{"/bin/sh", "bash"} {
		p, err := exec.LookPath(shell)
		if err != nil {
			t.Fatalf("%s: %v", shell, err)
		}
		cmd := exec.Command(p, "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s -n rejects the vendor-data: %v\n%s", shell, err, out)
		}
	}
	for _, forbidden := range []string{"curl", "wget", "http://", "https://"} {
		if strings.Contains(script, forbidden) {
			t.Errorf("vendor-data fetches from the network (%q); only the distro's package manager may", forbidden)
		}
	}
}

// stubs are fake commands on an otherwise empty PATH: each logs its argv
// (and DEBIAN_FRONTEND for apt-get) to $CALLS and runs its body.
type stubs map[string]string

const (
	// installs the agent: what a successful package install leaves behind
	installAgent = `printf '#!/bin/sh\n' > "$STUBS/qemu-ga"; /bin/chmod +x "$STUBS/qemu-ga"`
	// Debian/Ubuntu cloud images ship without package lists: install fails until update ran
	aptWithoutLists = `case "$*" in
*" update") : > "$STUBS/.lists";;
*" install "*) [ -e "$STUBS/.lists" ] || exit 100; ` + installAgent + `;;
esac`
	aptWithLists = `case "$*" in *" install "*) ` + installAgent + `;; esac`
	dnfOrYum     = `case "$*" in "install -y qemu-guest-agent") ` + installAgent + `;; *) exit 1;; esac`
	systemctlOK  = `:`
	// Debian's unit is static: is-enabled says so (exit 0), enable
	// refuses it, start works
	systemctlStatic = `case "$1" in enable) exit 1;; esac`
	// A unit not enabled yet (RHEL's packages enable nothing)
	systemctlDisabled = `case "$1" in is-enabled) exit 1;; esac`
)

func runVendorData(t *testing.T, dir string, s stubs) (calls []string, err error) {
	t.Helper()
	for name, body := range s {
		logLine := `echo "` + name + ` $*" >> "$CALLS"`
		if name == "apt-get" {
			logLine = `echo "apt-get $* DEBIAN_FRONTEND=${DEBIAN_FRONTEND-}" >> "$CALLS"`
		}
		stub := "#!/bin/sh\n" + logLine + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	callsFile := filepath.Join(dir, ".calls")
	_ = os.Remove(callsFile)
	cmd := exec.Command("/bin/sh", "-c", GuestAgentVendorData.Reveal())
	cmd.Env = []string{"PATH=" + dir, "STUBS=" + dir, "CALLS=" + callsFile}
	out, err := cmd.CombinedOutput()
	t.Logf("vendor-data output:\n%s", out)
	b, rerr := os.ReadFile(callsFile)
	if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		t.Fatal(rerr)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			calls = append(calls, l)
		}
	}
	return calls, err
}

func TestNoCloudSeed_GuestAgentVendorDataInstallsAndStarts(t *testing.T) {
	aptInstall := "apt-get -o DPkg::Lock::Timeout=300 -y install --no-install-recommends qemu-guest-agent DEBIAN_FRONTEND=noninteractive"
	aptUpdate := "apt-get -o DPkg::Lock::Timeout=300 -y update DEBIAN_FRONTEND=noninteractive"
	start := []string{"systemctl is-enabled --quiet qemu-guest-agent", "systemctl start qemu-guest-agent"}
	enableAndStart := []string{"systemctl is-enabled --quiet qemu-guest-agent", "systemctl enable qemu-guest-agent", "systemctl start qemu-guest-agent"}
	tests := []struct {
		name      string
		stubs     stubs
		want      []string
		wantFail  bool
		rerunWant []string // calls of a second run on the same machine
	}{
		{name: "Debian/Ubuntu fresh image: install fails, update, install, start",
			stubs:     stubs{"apt-get": aptWithoutLists, "systemctl": systemctlStatic},
			want:      append([]string{aptInstall, aptUpdate, aptInstall}, start...),
			rerunWant: start},
		{name: "Debian/Ubuntu with package lists: no update",
			stubs:     stubs{"apt-get": aptWithLists, "systemctl": systemctlOK},
			want:      append([]string{aptInstall}, start...),
			rerunWant: start},
		{name: "RHEL family with dnf: the unit enabled",
			stubs:     stubs{"dnf": dnfOrYum, "yum": dnfOrYum, "systemctl": systemctlDisabled},
			want:      append([]string{"dnf install -y qemu-guest-agent"}, enableAndStart...),
			rerunWant: enableAndStart},
		{name: "older RHEL with yum only",
			stubs:     stubs{"yum": dnfOrYum, "systemctl": systemctlOK},
			want:      append([]string{"yum install -y qemu-guest-agent"}, start...),
			rerunWant: start},
		{name: "agent already installed: no package manager call",
			stubs: stubs{"qemu-ga": ":", "apt-get": aptWithLists, "dnf": dnfOrYum, "systemctl": systemctlOK},
			want:  start},
		{name: "no systemd: service",
			stubs: stubs{"apt-get": aptWithLists, "service": ":"},
			want:  []string{aptInstall, "service qemu-guest-agent start"}},
		{name: "no known package manager fails",
			stubs:    stubs{"systemctl": systemctlOK},
			wantFail: true},
		{name: "install failure fails and starts nothing",
			stubs:    stubs{"apt-get": "exit 100", "systemctl": systemctlOK},
			want:     []string{aptInstall, aptUpdate},
			wantFail: true},
		{name: "start failure fails (no guest agent channel)",
			stubs:    stubs{"apt-get": aptWithLists, "systemctl": `case "$1" in start) exit 1;; esac`},
			want:     append([]string{aptInstall}, start...),
			wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			calls, err := runVendorData(t, dir, tt.stubs)
			if tt.wantFail != (err != nil) {
				t.Fatalf("vendor-data error = %v, want failure %v", err, tt.wantFail)
			}
			if strings.Join(calls, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(tt.want, "\n"))
			}
			if tt.rerunWant == nil {
				return
			}
			calls, err = runVendorData(t, dir, tt.stubs)
			if err != nil {
				t.Fatalf("second run: %v", err)
			}
			if strings.Join(calls, "\n") != strings.Join(tt.rerunWant, "\n") {
				t.Fatalf("second run calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(tt.rerunWant, "\n"))
			}
		})
	}
}

// TestVendorData_InstallsTheReporterThenTheAgent runs the whole
// vendor-data with / at a temporary directory: it writes the reporter and
// its units, starts the timer, then installs and starts the agent; a
// failing agent install fails the script after the reporter is in place.
func TestVendorData_InstallsTheReporterThenTheAgent(t *testing.T) {
	for _, tc := range []struct {
		name         string
		installAgent bool
		apt          string
		want         []string
		wantFail     bool
	}{
		{name: "with the agent", installAgent: true, apt: aptWithLists,
			want: []string{"systemctl daemon-reload", "systemctl enable " + servingreport.TimerName, "systemctl start --no-block " + servingreport.TimerName,
				"apt-get -o DPkg::Lock::Timeout=300 -y install --no-install-recommends qemu-guest-agent",
				"systemctl is-enabled --quiet qemu-guest-agent", "systemctl start qemu-guest-agent"}},
		{name: "without the agent", installAgent: false, apt: aptWithLists,
			want: []string{"systemctl daemon-reload", "systemctl enable " + servingreport.TimerName, "systemctl start --no-block " + servingreport.TimerName}},
		{name: "the agent's install fails after the reporter is in", installAgent: true, apt: "exit 100", wantFail: true,
			want: []string{"systemctl daemon-reload", "systemctl enable " + servingreport.TimerName, "systemctl start --no-block " + servingreport.TimerName,
				"apt-get -o DPkg::Lock::Timeout=300 -y install --no-install-recommends qemu-guest-agent",
				"apt-get -o DPkg::Lock::Timeout=300 -y update"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, bin := t.TempDir(), t.TempDir()
			calls := filepath.Join(bin, ".calls")
			for name, body := range map[string]string{"systemctl": ":", "apt-get": tc.apt} {
				stub := "#!/bin/sh\necho \"" + name + " $*\" >> \"$CALLS\"\n" + body + "\n"
				if err := os.WriteFile(filepath.Join(bin, name), []byte(stub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			testenv.LinkTools(t, bin, "mkdir", "cat", "chmod")
			cmd := exec.Command("/bin/sh", "-c", VendorData(&servingreport.Config{Port: 3128, Publish: servingreport.PublishFile}, tc.installAgent).Reveal())
			cmd.Env = []string{"PATH=" + bin, "STUBS=" + bin, "CALLS=" + calls, "EGRESS_PROXY_ROOT=" + root}
			out, err := cmd.CombinedOutput()
			if (err != nil) != tc.wantFail {
				t.Fatalf("vendor-data: %v, want failure %v\n%s", err, tc.wantFail, out)
			}
			b, _ := os.ReadFile(calls)
			if got := strings.TrimSpace(string(b)); got != strings.Join(tc.want, "\n") {
				t.Errorf("calls:\n%s\nwant:\n%s", got, strings.Join(tc.want, "\n"))
			}
			for path, want := range map[string]string{
				servingreport.ReporterPath:                         servingreport.Reporter(),
				"/etc/systemd/system/" + servingreport.ServiceName: servingreport.Service(servingreport.Config{Port: 3128, Publish: servingreport.PublishFile}),
				"/etc/systemd/system/" + servingreport.TimerName:   servingreport.Timer(),
			} {
				got, err := os.ReadFile(filepath.Join(root, path))
				if err != nil || string(got) != want {
					t.Errorf("%s as written: %v\n%s", path, err, got)
				}
			}
			if fi, err := os.Stat(filepath.Join(root, servingreport.ReporterPath)); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("the reporter's mode: %v %v", fi, err)
			}
		})
	}
}

// TestVendorData_WithoutTheReporter: without the reporter (the generated
// cloud-config installs it) the vendor-data is the agent's script alone,
// and nothing without the agent either.
func TestVendorData_WithoutTheReporter(t *testing.T) {
	if got := VendorData(nil, true); got != GuestAgentVendorData {
		t.Errorf("VendorData(nil, true) is not GuestAgentVendorData:\n%s", got.Reveal())
	}
	if got := VendorData(nil, false); got != "" {
		t.Errorf("VendorData(nil, false) = %q, want none", got.Reveal())
	}
}
