package nocloud

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// cloudInitPython finds the Python that runs Debian's cloud-init (its
// shebang), so the test imports the installed cloudinit package. A missing
// cloud-init fails the test unless SKIP_CLOUDINIT_TESTS=1 (the switch of
// hack/install-test-deps.sh's cloud-init) or SKIP_ISO_TESTS=1.
func cloudInitPython(t *testing.T) string {
	t.Helper()
	bin := cloudInitBinary(t)
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "#!") {
		t.Fatalf("%s has no #! line (%q): %v", bin, line, err)
	}
	return strings.Fields(strings.TrimPrefix(line, "#!"))[0]
}

// The datasource half of cloud-init's NoCloud (DataSourceNoCloud._get_data)
// over the files a real reader extracted from the seed: what it claims as
// instance-id, hostname, user-data, vendor-data and network config. The
// label scan and the mount, which need a block device and root's mount,
// are covered by the readers above (cloud-init finds the device with
// blkid's LABEL=cidata, which the blkid check below reads).
const noCloudProbe = `
import json, sys
from cloudinit import helpers
from cloudinit.handlers import type_from_starts_with
from cloudinit.sources.DataSourceNoCloud import DataSourceNoCloud, _quick_read_instance_id

cloud_dir, run_dir = sys.argv[1], sys.argv[2]
paths = helpers.Paths({"cloud_dir": cloud_dir, "run_dir": run_dir})
ds = DataSourceNoCloud(sys_cfg={"datasource": {"NoCloud": {"fs_label": None}}}, distro=None, paths=paths)
if not ds._get_data():
    sys.exit("NoCloud did not claim the seed directory")
text = lambda b: b.decode("utf-8", "surrogateescape") if isinstance(b, bytes) else b
json.dump({
    "seed": ds.seed,
    "instance_id": ds.get_instance_id(),
    "quick_instance_id": _quick_read_instance_id(ds.seed_dirs),
    "local_hostname": ds.metadata.get("local-hostname"),
    "user_data": text(ds.userdata_raw),
    "vendor_data": text(ds.vendordata_raw),
    "vendor_data_type": type_from_starts_with(text(ds.vendordata_raw) or ""),
    "network_config": ds.network_config,
}, sys.stdout)
`

// cloudInitBinary is Debian's cloud-init, under cloudInitPython's rule: a
// missing one fails the test unless it is skipped explicitly.
func cloudInitBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("cloud-init")
	if err != nil {
		for _, skip := range []string{"SKIP_CLOUDINIT_TESTS", "SKIP_ISO_TESTS"} {
			if os.Getenv(skip) == "1" {
				t.Skipf("cloud-init is not installed and %s=1", skip)
			}
		}
		t.Fatal("cloud-init is not installed: run hack/install-test-deps.sh, or set SKIP_CLOUDINIT_TESTS=1 to skip the real cloud-init checks")
	}
	return bin
}

type noCloudClaim struct {
	Seed            string         `json:"seed"`
	InstanceID      string         `json:"instance_id"`
	QuickInstanceID string         `json:"quick_instance_id"`
	LocalHostname   string         `json:"local_hostname"`
	UserData        string         `json:"user_data"`
	VendorData      string         `json:"vendor_data"`
	VendorDataType  *string        `json:"vendor_data_type"`
	NetworkConfig   map[string]any `json:"network_config"`
}

func TestNoCloudSeed_CloudInitReadsTheSeed(t *testing.T) {
	python := cloudInitPython(t)
	xorriso := requireTool(t, "xorriso")
	blkid := requireTool(t, "blkid")
	full := fullSeed()
	full.UserData = "#cloud-config\npackages: [squid]\n" // cloud-init hands user-data on as text
	static := staticAddr("192.0.2.77/24", "192.0.2.1", "192.0.2.53")
	netcfg, err := NetworkConfig(static, "52:54:00:12:34:56")
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Seed{
		"all four files":               full,
		"user-data and meta-data only": {InstanceID: "i-1", LocalHostname: "h-1", UserData: "#cloud-config\n{}\n"},
		"a static address":             {InstanceID: "i-2", LocalHostname: "h-2", UserData: "#cloud-config\n{}\n", NetworkConfig: provider.Sensitive(netcfg)},
	} {
		t.Run(name, func(t *testing.T) {
			img, err := Build(s)
			if err != nil {
				t.Fatal(err)
			}
			iso := writeImage(t, img)
			probe := run(t, blkid, "-p", "-o", "export", iso)
			if !strings.Contains(probe, "\nLABEL="+VolumeLabel+"\n") || !strings.Contains(probe, "\nTYPE=iso9660\n") {
				t.Fatalf("blkid does not see an iso9660 labelled %s (cloud-init's device scan):\n%s", VolumeLabel, probe)
			}

			cloudDir := filepath.Join(t.TempDir(), "cloud")
			seedDir := filepath.Join(cloudDir, "seed", "nocloud")
			run(t, xorriso, "-read_fs", "nojoliet", "-indev", iso, "-osirrox", "on", "-extract", "/", seedDir)
			t.Cleanup(func() {
				_ = filepath.Walk(seedDir, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o700) })
			})

			cmd := exec.Command(python, "-c", noCloudProbe, cloudDir, filepath.Join(t.TempDir(), "run"))
			out, err := cmd.Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				t.Fatalf("cloud-init's NoCloud datasource: %v\n%s", err, stderr)
			}
			var got noCloudClaim
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("probe output %q: %v", out, err)
			}
			if got.Seed != seedDir || got.InstanceID != s.InstanceID || got.QuickInstanceID != s.InstanceID || got.LocalHostname != s.LocalHostname {
				t.Errorf("NoCloud claims seed %q instance-id %q (quick %q) local-hostname %q, want %q %q %q", got.Seed, got.InstanceID, got.QuickInstanceID, got.LocalHostname, seedDir, s.InstanceID, s.LocalHostname)
			}
			if got.UserData != s.UserData.Reveal() || got.VendorData != s.VendorData.Reveal() {
				t.Errorf("NoCloud's user-data or vendor-data differ from the seed's")
			}
			// cloud-init runs a vendor-data part of this type as a script.
			if s.VendorData != "" && (got.VendorDataType == nil || *got.VendorDataType != "text/x-shellscript") {
				t.Errorf("cloud-init types the vendor-data as %v, want text/x-shellscript", got.VendorDataType)
			}
			if wantNet := s.NetworkConfig != ""; wantNet != (got.NetworkConfig != nil) || (wantNet && got.NetworkConfig["version"] != float64(2)) {
				t.Errorf("NoCloud's network config = %v, want one of version 2: %v", got.NetworkConfig, wantNet)
			}
			if name == "a static address" {
				claimed, err := json.Marshal(got.NetworkConfig)
				if err != nil {
					t.Fatal(err)
				}
				if addr, match, err := ParseNetworkConfig(claimed); err != nil || !reflect.DeepEqual(addr, static) || match.MAC != "52:54:00:12:34:56" {
					t.Errorf("NoCloud claims the network config %s: %+v %+v %v, want %+v by MAC", claimed, addr, match, err, static)
				}
			}
		})
	}
}
