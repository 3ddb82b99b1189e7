package squid

// The generated cloud-config is checked by the real tools a guest runs:
// Debian's cloud-init (`cloud-init schema`) and Squid (`squid -k parse` on
// the squid.conf the cloud-config writes). The same check refuses a
// deliberately broken cloud-config and a broken squid.conf, so a bad
// generator fails `make test`.

import (
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// realCheck runs both tools on one user-data document: cloud-init's schema
// on the whole of it, squid -k parse on the squid.conf it writes.
type realCheck struct {
	schemaOut, parseOut []byte
	schemaErr, parseErr error
}

func checkWithRealTools(t *testing.T, doc string) realCheck {
	t.Helper()
	var rc realCheck
	rc.schemaOut, rc.schemaErr = squidtest.Schema(t, doc)
	rc.parseOut, rc.parseErr = squidtest.Parse(t, embeddedSquidConf(t, doc))
	return rc
}

// embeddedSquidConf finds the squid.conf in a cloud-config, however broken
// the rest of the document's types are.
func embeddedSquidConf(t *testing.T, doc string) string {
	t.Helper()
	var d map[string]any
	if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatalf("the cloud-config is no YAML: %v\n%s", err, doc)
	}
	files, _ := d["write_files"].([]any)
	for _, f := range files {
		if f, ok := f.(map[string]any); ok && f["path"] == "/etc/squid/squid.conf" {
			if c, ok := f["content"].(string); ok {
				return c
			}
		}
	}
	t.Fatalf("no squid.conf in the cloud-config:\n%s", doc)
	return ""
}

// TestCloudConfig_RealCloudInitSchema: every shape of generated
// cloud-config is valid to cloud-init, and its squid.conf to Squid.
func TestCloudConfig_RealCloudInitSchema(t *testing.T) {
	allowing := (&egress.Settings{AllowedDestinations: []string{"10.20.0.0/16", "fd00:1::/64"}, ConnectPorts: []int32{443, 8443}}).Policy(
		egress.Range{Prefix: netip.MustParsePrefix("100.100.0.0/16"), Why: "the site's management network"})
	for _, in := range []CloudConfigParams{
		{Port: 3128},
		{Port: 3128, Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("2001:db8::/32")}},
		{Port: 8080, Family: FamilyDebian, Destinations: allowing, Generator: "egress-proxies-operator (kvm provider)"},
		{Port: 3128, Family: FamilyRHEL, Clients: []netip.Prefix{netip.MustParsePrefix("192.168.10.0/24")}},
		{Port: 3129, Family: FamilyRHEL, Destinations: allowing},
		{Port: 3128, Reporter: servingreport.PublishFile},
		{Port: 3128, Reporter: servingreport.PublishFile, VRRP: &vrrp.Member{
			Interface: "eth0", Self: netip.MustParseAddr("192.0.2.10"), Peers: []netip.Addr{netip.MustParseAddr("192.0.2.11")},
			Virtual: netip.MustParsePrefix("192.0.2.100/24"), RouterID: 7, Priority: 254, Port: 3128,
		}},
	} {
		doc, err := CloudConfig(in)
		if err != nil {
			t.Fatal(err)
		}
		rc := checkWithRealTools(t, doc)
		if rc.schemaErr != nil || !strings.Contains(string(rc.schemaOut), "Valid cloud-config") {
			t.Errorf("cloud-init schema refused the generated cloud-config for %+v: %v\n%s\n%s", in, rc.schemaErr, rc.schemaOut, doc)
		}
		if rc.parseErr != nil {
			t.Errorf("squid -k parse refused the embedded squid.conf for %+v: %v\n%s", in, rc.parseErr, rc.parseOut)
		}
	}
}

// TestCloudConfig_RealChecksRefuseBroken: the same check fails on a
// cloud-config with wrong types (cloud-init 22.4's schema accepts unknown
// top-level keys, so a wrong type is what it rejects), on one without the
// #cloud-config header, and on a squid.conf that names an undefined ACL or
// an unknown directive.
func TestCloudConfig_RealChecksRefuseBroken(t *testing.T) {
	good, err := CloudConfig(CloudConfigParams{Port: 3128, Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	mustReplace := func(old, new string) string {
		t.Helper()
		if !strings.Contains(good, old) {
			t.Fatalf("the generated cloud-config has no %q to break:\n%s", old, good)
		}
		return strings.Replace(good, old, new, 1)
	}
	for _, tc := range []struct {
		name       string
		doc        string
		schemaWant string // in cloud-init's output; empty: the schema passes
		squidBad   bool
	}{
		{"permissions as a number", mustReplace("permissions: '0644'", "permissions: 644"), "write_files.0.permissions: 644 is not of type 'string'", false},
		{"packages as a string", mustReplace("packages:\n  - squid\n", "packages: squid\n"), "packages: 'squid' is not of type 'array'", false},
		{"package_update as a string", mustReplace("package_update: true", "package_update: 'yes'"), "package_update: 'yes' is not of type 'boolean'", false},
		{"no #cloud-config header", strings.TrimPrefix(good, "#cloud-config\n"), `needs to begin with "#cloud-config"`, false},
		{"undefined ACL in squid.conf", mustReplace("http_access allow allowed_clients decided_entry\n", "http_access allow allowed_client decided_entry\n"), "", true},
		{"unknown directive in squid.conf", mustReplace("forwarded_for delete\n", "forwarded_for delete\n      forwarded_for_everything delete\n"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := checkWithRealTools(t, tc.doc)
			if tc.schemaWant != "" {
				if rc.schemaErr == nil || !strings.Contains(string(rc.schemaOut), tc.schemaWant) {
					t.Errorf("cloud-init schema: %v\n%s\nwant a refusal with %q", rc.schemaErr, rc.schemaOut, tc.schemaWant)
				}
			} else if rc.schemaErr != nil {
				t.Errorf("cloud-init schema refused a cloud-config whose only fault is in squid.conf: %v\n%s", rc.schemaErr, rc.schemaOut)
			}
			if tc.squidBad && rc.parseErr == nil {
				t.Errorf("squid -k parse accepted a broken squid.conf:\n%s", rc.parseOut)
			}
			if !tc.squidBad && rc.parseErr != nil {
				t.Errorf("squid -k parse refused a squid.conf that was not broken: %v\n%s", rc.parseErr, rc.parseOut)
			}
		})
	}
}
