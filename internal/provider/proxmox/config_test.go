package proxmox

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
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
		{"templates", `{"debian-12": 5}`, "templates[debian-12]"},
		{"templates", `{"debian-12": "9000"}`, "templates[debian-12]"},
		{"templates", `{"debian-12": {"vmid": 9000}}`, "templates[debian-12]"},
		{"templateFamilies", `{"debian-12": "suse"}`, "templateFamilies[debian-12]"},
		{"templateFamilies", `{"rocky-9": "rhel"}`, "templateFamilies[rocky-9]"},
		{"templateFamilies", `{"debian-12": 1}`, "templateFamilies[debian-12]"},
		{"templateFamilies", `{"debian-12": "rhel"}`, ""},
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

// The defaults are decided in Default only; every template's family is
// resolved there (debian unless templateFamilies says otherwise).
func TestConfigDefaults(t *testing.T) {
	c, errs := Parse(json.RawMessage(validBlock), blockPath)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := Config{URL: "https://pve.example:8006/api2/json", TokenFile: "/etc/proxy-operator/proxmox/token", Nodes: []string{"pve1"},
		Templates: map[string]int{"debian-12": 9000}, TemplateFamilies: map[string]string{"debian-12": "debian"}, DefaultTemplate: "debian-12",
		MachineTypes: map[string]MachineType{DefaultMachineTypeName: DefaultMachineType}, DefaultMachine: DefaultMachineTypeName,
		ISOStorage: "local", VMIDMin: DefaultVMIDMin, VMIDMax: DefaultVMIDMax, RequestTimeoutSeconds: DefaultRequestTimeoutSeconds}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Parse(minimal) =\n%+v\nwant\n%+v", c, want)
	}
	// Default is idempotent and leaves the caller's maps alone.
	fams := map[string]string{"b": "rhel"}
	d := Config{Templates: map[string]int{"a": 9000, "b": 9001}, TemplateFamilies: fams}
	d.Default()
	again := d
	again.Default()
	if !reflect.DeepEqual(d, again) {
		t.Errorf("Default is not idempotent: %+v then %+v", d, again)
	}
	if len(fams) != 1 {
		t.Errorf("Default wrote the caller's templateFamilies map: %+v", fams)
	}
	if d.DefaultTemplate != "" || d.family("a") != "debian" || d.family("b") != "rhel" {
		t.Errorf("Default with two templates = %+v", d)
	}
}

// The config entry in docs/proxmox-provider.md parses, with the values
// it shows.
func TestDocsConfigEntryParses(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/proxmox-provider.md")
	must(t, err)
	text := string(doc)
	start := strings.Index(text, "```yaml\n- name: proxmox-home")
	if start < 0 {
		t.Fatal("docs/proxmox-provider.md has no ```yaml block with the proxmox-home entry")
	}
	block := text[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	js, err := yaml.YAMLToJSONStrict([]byte(block))
	must(t, err)
	var entries []struct {
		Proxmox json.RawMessage `json:"proxmox"`
	}
	must(t, json.Unmarshal(js, &entries))
	if len(entries) != 1 {
		t.Fatalf("%d entries in the docs' block", len(entries))
	}
	c, errs := Parse(entries[0].Proxmox, blockPath)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if c.family("rocky-9") != "rhel" || c.family("debian-12") != "debian" || c.Templates["rocky-9"] != 9001 {
		t.Errorf("templates %+v, families %+v", c.Templates, c.TemplateFamilies)
	}
	if p := c.Settings.Policy(); len(p.ConnectPorts()) != 1 || p.ConnectPorts()[0] != 443 {
		t.Errorf("policy connect ports = %v", p.ConnectPorts())
	}
}
