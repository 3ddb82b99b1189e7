package config

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

var types = []string{"local", "fake"}

func TestParse(t *testing.T) {
	cases := []struct {
		name    string
		yaml    string
		wantErr []string // substrings; empty means success
		check   func(t *testing.T, es []Entry)
	}{
		{
			name: "valid",
			yaml: "providers:\n- name: dev\n  type: local\n  local:\n    bindCIDR: 127.0.100.0/24\n- name: other\n  type: fake\n",
			check: func(t *testing.T, es []Entry) {
				if len(es) != 2 || es[0].Name != "dev" || es[0].Type != "local" || es[1].Settings != nil {
					t.Fatalf("entries = %+v", es)
				}
				if !strings.Contains(string(es[0].Settings), "127.0.100.0/24") {
					t.Errorf("settings = %s", es[0].Settings)
				}
				if got := es[0].SettingsPath().String(); got != "providers[0].local" {
					t.Errorf("SettingsPath = %q", got)
				}
			},
		},
		{name: "empty list is valid", yaml: "providers: []\n", check: func(t *testing.T, es []Entry) {
			if len(es) != 0 {
				t.Fatalf("entries = %+v", es)
			}
		}},
		{name: "unknown top-level key", yaml: "providers: []\nextra: 1\n", wantErr: []string{"extra: Forbidden: unknown field"}},
		{name: "unknown entry key", yaml: "providers:\n- name: a\n  type: local\n  gcp: {}\n", wantErr: []string{"providers[0].gcp: Forbidden: unknown field"}},
		{name: "unknown type", yaml: "providers:\n- name: a\n  type: aws\n", wantErr: []string{`providers[0].type: Unsupported value: "aws"`, `"fake", "local"`}},
		{name: "missing type", yaml: "providers:\n- name: a\n", wantErr: []string{"providers[0].type: Required value"}},
		{name: "missing name", yaml: "providers:\n- type: local\n", wantErr: []string{"providers[0].name: Required value"}},
		{name: "bad name", yaml: "providers:\n- name: Dev_1\n  type: local\n", wantErr: []string{`providers[0].name: Invalid value: "Dev_1"`}},
		{name: "duplicate name", yaml: "providers:\n- name: a\n  type: local\n- name: a\n  type: fake\n", wantErr: []string{`providers[1].name: Duplicate value: "a (also providers[0])"`}},
		{name: "duplicate yaml key", yaml: "providers:\n- name: a\n  name: b\n  type: local\n", wantErr: []string{"not valid YAML"}},
		{name: "not a list", yaml: "providers: {}\n", wantErr: []string{"providers: Invalid value"}},
		{name: "several errors at once", yaml: "providers:\n- name: a\n  type: aws\n- name: B\n  type: local\n", wantErr: []string{"providers[0].type", "providers[1].name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			es, err := Parse([]byte(tc.yaml), types)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				tc.check(t, es)
				return
			}
			if err == nil {
				t.Fatalf("Parse succeeded, want errors %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

type host struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

type sample struct {
	BindCIDR string            `json:"bindCIDR"`
	Port     int               `json:"port"`
	Hosts    []host            `json:"hosts"`
	Images   map[string]host   `json:"images"`
	Labels   map[string]string `json:"labels"`
}

func TestStrict(t *testing.T) {
	p := field.NewPath("providers").Index(2).Child("local")
	cases := []struct {
		name    string
		json    string
		wantErr []string
	}{
		{name: "valid", json: `{"bindCIDR":"127.0.0.0/8","port":1,"hosts":[{"name":"a"}],"labels":{"x":"y"}}`},
		{name: "unknown top field", json: `{"bindCidr":"x"}`, wantErr: []string{"providers[2].local.bindCidr: Forbidden: unknown field"}},
		{name: "unknown nested in list", json: `{"hosts":[{"name":"a"},{"nme":"b"}]}`, wantErr: []string{"providers[2].local.hosts[1].nme: Forbidden: unknown field"}},
		{name: "unknown nested in map", json: `{"images":{"deb":{"url":"x"}}}`, wantErr: []string{"providers[2].local.images[deb].url: Forbidden: unknown field"}},
		{name: "wrong type", json: `{"port":"many"}`, wantErr: []string{"providers[2].local.port: Invalid value: \"many\": expected a whole number"}},
		{name: "wrong type nested", json: `{"hosts":[{"name":3}]}`, wantErr: []string{"providers[2].local.hosts[0].name: Invalid value: 3: expected a string"}},
		{name: "list where mapping", json: `{"hosts":{"name":"a"}}`, wantErr: []string{"providers[2].local.hosts: Invalid value: \"a mapping\": expected a list"}},
		{name: "fraction for int", json: `{"port":1.5}`, wantErr: []string{"providers[2].local.port: Invalid value: 1.5: expected a whole number"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s sample
			errs := Strict([]byte(tc.json), &s, p)
			if len(tc.wantErr) == 0 {
				if len(errs) > 0 {
					t.Fatalf("Strict: %v", errs)
				}
				if s.BindCIDR != "127.0.0.0/8" || s.Hosts[0].Name != "a" {
					t.Errorf("decoded %+v", s)
				}
				return
			}
			got := errs.ToAggregate()
			if got == nil {
				t.Fatalf("no error, want %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("error %q lacks %q", got, w)
				}
			}
		})
	}
}

type decoded struct {
	Port int `json:"port"`
}

func (d *decoded) Default() {
	if d.Port == 0 {
		d.Port = 3128
	}
}

func (d *decoded) Validate(path *field.Path) field.ErrorList {
	if d.Port > 65535 {
		return field.ErrorList{field.Invalid(path.Child("port"), d.Port, "must be at most 65535")}
	}
	return nil
}

func TestDecode(t *testing.T) {
	p := field.NewPath("providers").Index(0).Child("x")
	cases := []struct {
		name, json string
		want       int
		wantErr    string
	}{
		{"nil gives defaults", "", 3128, ""},
		{"value kept", `{"port":8080}`, 8080, ""},
		{"unknown field refused before defaults", `{"prot":1}`, 0, "providers[0].x.prot: Forbidden: unknown field"},
		{"validated after defaults", `{"port":70000}`, 0, "providers[0].x.port: Invalid value: 70000: must be at most 65535"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := Decode[decoded]([]byte(tc.json), p)
			if tc.wantErr != "" {
				if errs == nil || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
					t.Fatalf("errs = %v, want %q", errs, tc.wantErr)
				}
				return
			}
			if len(errs) > 0 || got.Port != tc.want {
				t.Fatalf("Decode = %+v, %v", got, errs)
			}
		})
	}
}

func TestParse_Autoheal(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		after       time.Duration
		max         int
		err         string
	}{
		{name: "defaults", block: "", after: DefaultReplaceUnhealthyAfter, max: DefaultAutohealMaxConcurrent},
		{name: "set", block: "autoheal: {replaceUnhealthyAfter: 90s, maxConcurrent: 1}", after: 90 * time.Second, max: 1},
		{name: "off", block: "autoheal: {replaceUnhealthyAfter: 0s}", after: 0, max: DefaultAutohealMaxConcurrent},
		{name: "negative", block: "autoheal: {replaceUnhealthyAfter: -1m}", err: "providers[0].autoheal.replaceUnhealthyAfter: Invalid value: \"-1m0s\": must be 0 (off)"},
		{name: "too long", block: "autoheal: {replaceUnhealthyAfter: 25h}", err: "providers[0].autoheal.replaceUnhealthyAfter: Invalid value"},
		{name: "not a duration", block: "autoheal: {replaceUnhealthyAfter: soon}", err: "providers[0].autoheal"},
		{name: "zero at once", block: "autoheal: {maxConcurrent: 0}", err: "providers[0].autoheal.maxConcurrent: Invalid value: 0: must be 1-1000"},
		{name: "unknown key", block: "autoheal: {after: 5m}", err: "providers[0].autoheal.after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := parseEntryWith(tc.block)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a := es[0].Autoheal; a.After() != tc.after || a.Max() != tc.max {
				t.Errorf("autoheal after %v max %d, want %v and %d", a.After(), a.Max(), tc.after, tc.max)
			}
		})
	}
}

// The entry's addressPool is decoded strictly and validated by the pool
// leaf, each error under providers[i].addressPool.
func TestParse_AddressPool(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		addresses   string
		err         string
	}{
		{name: "none", block: ""},
		{name: "ranges", block: "addressPool: {addresses: [192.0.2.10-192.0.2.20, 192.0.2.64/28], prefix: 24, gateway: 192.0.2.1}", addresses: "192.0.2.10-192.0.2.20,192.0.2.64/28"},
		{name: "another IPAM provider's", block: "addressPool: {ipamPoolRef: {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: dmz}}"},
		{name: "unknown key", block: "addressPool: {cidr: 192.0.2.0/24}", err: "providers[0].addressPool.cidr"},
		{name: "not an address", block: "addressPool: {addresses: [192.0.2.300], prefix: 24}", err: "providers[0].addressPool.addresses[0]"},
		{name: "neither", block: "addressPool: {prefix: 24}", err: "providers[0].addressPool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := parseEntryWith(tc.block)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse: %v, want an error with %q", err, tc.err)
				}
				t.Logf("%s", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := es[0].AddressPool
			switch {
			case tc.block == "" && got != nil:
				t.Fatalf("no block, pool %+v", got)
			case tc.block != "" && got == nil:
				t.Fatal("the block was dropped")
			case got != nil && strings.Join(got.Addresses, ",") != tc.addresses:
				t.Fatalf("addresses %v, want %s", got.Addresses, tc.addresses)
			}
		})
	}
}

// parseEntryWith parses one entry of type fake with an entry-level block.
func parseEntryWith(block string) ([]Entry, error) {
	doc := "providers:\n- name: pool\n  type: fake\n"
	if block != "" {
		doc += "  " + block + "\n"
	}
	return Parse([]byte(doc), []string{"fake"})
}
