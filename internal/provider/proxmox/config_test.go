package proxmox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

const validBlock = `{"url": "https://pve.example:8006/api2/json", "tokenFile": "/etc/proxy-operator/proxmox/token",
 "nodes": ["pve1"], "templates": {"debian-12": 9000}, "isoStorage": "local"}`

// with returns validBlock with key set to the JSON value v (or removed
// when v is "").
func with(t *testing.T, key, v string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	must(t, json.Unmarshal([]byte(validBlock), &m))
	if v == "" {
		delete(m, key)
	} else {
		m[key] = json.RawMessage(v)
	}
	b, err := json.Marshal(m)
	must(t, err)
	return b
}

var blockPath = field.NewPath("providers").Index(0).Child("proxmox")

// Every refusal names its field under the block's path.
func TestConfigErrorsArePathQualified(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		path       string // the error's field, under providers[0].proxmox
	}{
		{"url", `"http://pve:8006/api2/json"`, "url"},
		{"url", `"pve:8006"`, "url"},
		{"tokenFile", ``, "tokenFile"},
		{"caFile", `"/ca.pem"`, ""}, // valid alone
		{"insecureSkipTLSVerify", `true`, ""},
		{"nodes", ``, "nodes"},
		{"nodes", `["pve 1"]`, "nodes[0]"},
		{"nodes", `["pve1", "pve1"]`, "nodes[1]"},
		{"nodes", `"pve1"`, "nodes"},
		{"isoStorage", ``, "isoStorage"},
		{"isoStorage", `"lo/cal"`, "isoStorage"},
		{"templates", ``, "templates"},
		{"templates", `{"debian-12": 5}`, "templates[debian-12].vmid"},
		{"templates", `{"debian-12": {"vmid": 9000, "family": "suse"}}`, "templates[debian-12].family"},
		{"templates", `{"debian-12": {"vmid": 9000, "famly": "rhel"}}`, "templates[debian-12].famly"},
		{"templates", `{"debian-12": "9000"}`, "templates[debian-12]"},
		{"templates", `{"debian-12": {"family": "rhel"}}`, "templates[debian-12].vmid"},
		{"templates", `{"debian-12": {"vmid": 9000, "family": "rhel"}}`, ""},
		{"defaultTemplate", `"ubuntu"`, "defaultTemplate"},
		{"machineTypes", `{"small": {"cores": 0, "memoryMB": 1024}}`, "machineTypes[small]"},
		{"machineTypes", `{"small": {"cores": 1, "memoryMB": 1024, "disk": 3}}`, "machineTypes[small].disk"},
		{"defaultMachineType", `"huge"`, "defaultMachineType"},
		{"vmidMin", `30000`, "vmidMin"},
		{"vmidMin", `50`, "vmidMin"},
		{"vlanTag", `5000`, "vlanTag"},
		{"diskGiB", `-1`, "diskGiB"},
		{"requestTimeoutSeconds", `-1`, "requestTimeoutSeconds"},
		{"allowedDestinations", `["10.0.0.1/8"]`, "allowedDestinations[0]"},
		{"allowedDestinations", `["0.0.0.0/0"]`, "allowedDestinations[0]"},
		{"allowedDestinations", `["10.20.0.0/16"]`, ""},
		{"connectPorts", `[443, 0]`, "connectPorts[1]"},
		{"connectPorts", `[443, 443]`, "connectPorts[1]"},
		{"bridgee", `"vmbr0"`, "bridgee"},
	} {
		_, errs := Parse(with(t, tc.key, tc.value), blockPath)
		name := tc.key + "=" + tc.value
		if tc.path == "" {
			if len(errs) > 0 {
				t.Errorf("%s: %v, want valid", name, errs)
			}
			continue
		}
		want := blockPath.String() + "." + tc.path
		found := false
		for _, e := range errs {
			found = found || e.Field == want
		}
		if !found {
			t.Errorf("%s: %v, want an error on %s", name, errs, want)
		}
	}
	// Both conflicting TLS settings together are refused.
	b := with(t, "caFile", `"/ca.pem"`)
	var m map[string]json.RawMessage
	must(t, json.Unmarshal(b, &m))
	m["insecureSkipTLSVerify"] = json.RawMessage(`true`)
	b, _ = json.Marshal(m)
	if _, errs := Parse(b, blockPath); len(errs) != 1 || errs[0].Field != blockPath.Child("insecureSkipTLSVerify").String() {
		t.Errorf("caFile with insecureSkipTLSVerify: %v, want one error on insecureSkipTLSVerify", errs)
	}
}

// The defaults are decided in Default only, and the short template form
// is the object form with the debian family.
func TestConfigDefaults(t *testing.T) {
	c, errs := Parse(json.RawMessage(validBlock), blockPath)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := Config{URL: "https://pve.example:8006/api2/json", TokenFile: "/etc/proxy-operator/proxmox/token", Nodes: []string{"pve1"},
		Templates: map[string]Template{"debian-12": {VMID: 9000, Family: "debian"}}, DefaultTemplate: "debian-12",
		MachineTypes: map[string]MachineType{DefaultMachineTypeName: DefaultMachineType}, DefaultMachine: DefaultMachineTypeName,
		ISOStorage: "local", VMIDMin: DefaultVMIDMin, VMIDMax: DefaultVMIDMax, RequestTimeoutSeconds: DefaultRequestTimeoutSeconds}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Parse(minimal) =\n%+v\nwant\n%+v", c, want)
	}
	long, errs := Parse(with(t, "templates", `{"debian-12": {"vmid": 9000}}`), blockPath)
	if len(errs) > 0 || !reflect.DeepEqual(long, c) {
		t.Errorf("the object form = %+v, %v; want the short form's %+v", long, errs, c)
	}
	// Default is idempotent and leaves the caller's maps alone.
	tpls := map[string]Template{"a": {VMID: 9000}, "b": {VMID: 9001, Family: "rhel"}}
	d := Config{Templates: tpls}
	d.Default()
	again := d
	again.Default()
	if !reflect.DeepEqual(d, again) {
		t.Errorf("Default is not idempotent: %+v then %+v", d, again)
	}
	if tpls["a"].Family != "" {
		t.Errorf("Default wrote the caller's templates map: %+v", tpls)
	}
	if d.DefaultTemplate != "" || d.Templates["a"].Family != "debian" || d.Templates["b"].Family != "rhel" {
		t.Errorf("Default with two templates = %+v", d)
	}
}

// The sample entry in the docs parses (the block as written there).
func TestDocsSampleBlockParses(t *testing.T) {
	raw := `{"url": "https://pve.example:8006/api2/json", "tokenFile": "/etc/proxy-operator/proxmox/token",
	 "caFile": "/etc/proxy-operator/proxmox/ca.pem", "nodes": ["pve1", "pve2"],
	 "templates": {"debian-12": 9000, "rocky-9": {"vmid": 9001, "family": "rhel"}}, "defaultTemplate": "debian-12",
	 "machineTypes": {"small": {"cores": 1, "memoryMB": 1024}}, "isoStorage": "local", "bridge": "vmbr0",
	 "allowedDestinations": ["10.20.30.40/32"], "connectPorts": [443, 8443]}`
	c, errs := Parse(json.RawMessage(raw), blockPath)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if c.Templates["rocky-9"].family() != "rhel" || c.Templates["debian-12"].family() != "debian" {
		t.Errorf("families: %+v", c.Templates)
	}
	if p := c.Settings.Policy(); len(p.Allowed()) != 1 || !strings.Contains(p.Allowed()[0].String(), "10.20.30.40/32") {
		t.Errorf("policy allowed = %v", p.Allowed())
	}
}
