package gcp

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

var entryPath = field.NewPath("providers").Index(0).Child("gcp")

func parse(t *testing.T, block string) (Config, string) {
	t.Helper()
	cfg, errs := Parse(json.RawMessage(block), entryPath)
	if len(errs) == 0 {
		return cfg, ""
	}
	return cfg, errs.ToAggregate().Error()
}

// The defaults, all decided in Default: what an entry naming only its
// project gets.
func TestConfigDefaults(t *testing.T) {
	cfg, errs := Parse(json.RawMessage(`{"project": "my-project"}`), entryPath)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for what, pair := range map[string][2]any{
		"network":            {cfg.Network, DefaultNetwork},
		"networkTagPrefix":   {cfg.NetworkTagPrefix, DefaultNetworkTagPrefix},
		"diskSizeGb":         {cfg.DiskSizeGB, int64(DefaultDiskSizeGB)},
		"diskType":           {cfg.DiskType, DefaultDiskType},
		"addressMode":        {cfg.AddressMode, AddressExternal},
		"defaultMachineType": {cfg.DefaultMachineType, DefaultMachineType},
		"defaultImage":       {cfg.DefaultImage, DefaultImage},
		"manageFirewall":     {*cfg.ManageFirewall, true},
		"firewallPriority":   {*cfg.FirewallPriority, int32(DefaultFirewallPriority)},
		"serviceAccount":     {cfg.ServiceAccount, ""},
		"credentialsFile":    {cfg.CredentialsFile, ""},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s = %v, want %v", what, pair[0], pair[1])
		}
	}
	again := cfg
	again.Default()
	if again.DefaultImage != cfg.DefaultImage || *again.ManageFirewall != *cfg.ManageFirewall {
		t.Error("Default is not idempotent")
	}
	one, errs := Parse(json.RawMessage(`{"project": "my-project", "zones": ["europe-west4-a"], "machineTypes": {"small": "e2-small"},
		"images": {"ubuntu": {"image": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"}}}`), entryPath)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if one.DefaultZone != "europe-west4-a" || one.DefaultMachineType != "small" || one.DefaultImage != "ubuntu" {
		t.Errorf("a one-entry catalogue or zone list is its default: %+v", one)
	}
}

// Strict decoding and validation, every message naming its field.
func TestConfigRefusals(t *testing.T) {
	for _, tc := range []struct{ block, want string }{
		{`{}`, "providers[0].gcp.project: Required value"},
		{`{"project": "My_Project"}`, "providers[0].gcp.project: Invalid value"},
		{`{"project": "my-project", "zone": "us-central1-a"}`, "providers[0].gcp.zone: Forbidden: unknown field"},
		{`{"project": "my-project", "credentialsFile": "key.json"}`, "providers[0].gcp.credentialsFile: Invalid value"},
		{`{"project": "my-project", "endpoint": "ftp://x"}`, "providers[0].gcp.endpoint: Invalid value"},
		{`{"project": "my-project", "endpoint": "https://user:pw@x"}`, "must not carry credentials"},
		{`{"project": "my-project", "zones": ["us-central1"]}`, "providers[0].gcp.zones[0]: Invalid value"},
		{`{"project": "my-project", "zones": ["us-central1-a", "us-central1-a"]}`, "providers[0].gcp.zones[1]: Duplicate value"},
		{`{"project": "my-project", "zones": ["us-central1-a"], "defaultZone": "us-east1-b"}`, "providers[0].gcp.defaultZone: Invalid value: \"us-east1-b\": must be one of zones"},
		{`{"project": "my-project", "network": "a/b"}`, "providers[0].gcp.network: Invalid value"},
		{`{"project": "my-project", "subnetwork": "regions/x/subnetworks/y"}`, "providers[0].gcp.subnetwork: Invalid value"},
		{`{"project": "my-project", "networkTagPrefix": "Egress"}`, "providers[0].gcp.networkTagPrefix: Invalid value"},
		{`{"project": "my-project", "diskSizeGb": 5}`, "providers[0].gcp.diskSizeGb: Invalid value: 5: must be 10-65536 (GB)"},
		{`{"project": "my-project", "addressMode": "ipv6"}`, `providers[0].gcp.addressMode: Unsupported value: "ipv6"`},
		{`{"project": "my-project", "machineTypes": {"Small": "e2-small"}}`, "providers[0].gcp.machineTypes[Small]: Invalid value"},
		{`{"project": "my-project", "machineTypes": {"a": "e2-small", "b": "e2-medium"}, "defaultMachineType": "c"}`, "providers[0].gcp.defaultMachineType: Not found"},
		{`{"project": "my-project", "images": {"deb": {"image": "projects/debian-cloud/global/images/family/debian-12"}}}`, "providers[0].gcp.images[deb].image: Invalid value: \"projects/debian-cloud/global/images/family/debian-12\": images of project debian-cloud do not run cloud-init"},
		{`{"project": "my-project", "images": {"u": {"image": "ubuntu-2404"}}}`, "providers[0].gcp.images[u].image: Invalid value"},
		{`{"project": "my-project", "images": {"u": {"image": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64", "family": "suse"}}}`, "providers[0].gcp.images[u].family: Invalid value"},
		{`{"project": "my-project", "defaultImage": "projects/debian-cloud/global/images/family/debian-12"}`, "providers[0].gcp.defaultImage: Invalid value"},
		{`{"project": "my-project", "scopes": ["https://www.googleapis.com/auth/logging.write"]}`, "providers[0].gcp.scopes: Invalid value"},
		{`{"project": "my-project", "serviceAccount": "not-an-email"}`, "providers[0].gcp.serviceAccount: Invalid value"},
		{`{"project": "my-project", "labels": {"proxy-operator-uid": "x"}}`, "providers[0].gcp.labels[proxy-operator-uid]: Forbidden"},
		{`{"project": "my-project", "labels": {"team": "Platform"}}`, "providers[0].gcp.labels[team]: Invalid value"},
		{`{"project": "my-project", "firewallPriority": 70000}`, "providers[0].gcp.firewallPriority: Invalid value"},
		{`{"project": "my-project", "allowedDestinations": ["10.0.0.1/8"]}`, "providers[0].gcp.allowedDestinations[0]"},
	} {
		_, got := parse(t, tc.block)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s:\n got %s\nwant %s", tc.block, got, tc.want)
		}
	}
}

// A full entry parses, and the references in it are read as the API's
// paths.
func TestConfigReferences(t *testing.T) {
	cfg, got := parse(t, `{"project": "svc-project", "network": "projects/host-project/global/networks/shared",
		"subnetwork": "projects/host-project/regions/europe-west1/subnetworks/proxies", "zones": ["europe-west1-b"],
		"serviceAccount": "proxy-vm@svc-project.iam.gserviceaccount.com", "scopes": ["https://www.googleapis.com/auth/logging.write"],
		"labels": {"team": "platform"}, "manageFirewall": false, "addressMode": "internal",
		"endpoint": "https://compute-psc.p.googleapis.com"}`)
	if got != "" {
		t.Fatal(got)
	}
	p, err := New(testName, cfg, provider.Options{InstallationID: testInstallation})
	if err != nil {
		t.Fatal(err)
	}
	if p.netProject != "host-project" || p.netPath != "projects/host-project/global/networks/shared" ||
		p.sub.path("svc-project", "europe-west1") != "projects/host-project/regions/europe-west1/subnetworks/proxies" {
		t.Errorf("network %s %s, subnetwork %+v", p.netProject, p.netPath, p.sub)
	}
	if p.endpointHost() != "compute-psc.p.googleapis.com" {
		t.Errorf("endpoint host %s", p.endpointHost())
	}
}
