package nocloud

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func TestNoCloudSeed_MetaData(t *testing.T) {
	tests := []struct {
		name       string
		instanceID string
		hostname   string
		want       string
		wantErr    error
	}{
		{name: "instance name", instanceID: "proxy-ns-a-0123456789", hostname: "proxy-ns-a-0123456789",
			want: "instance-id: proxy-ns-a-0123456789\nlocal-hostname: proxy-ns-a-0123456789\n"},
		{name: "id with uid suffix and dots", instanceID: "proxy-a.5f0c1e2a-7b3d-4c1f-9e8a-2b6d4c3a1f00", hostname: "proxy-a.example",
			want: "instance-id: proxy-a.5f0c1e2a-7b3d-4c1f-9e8a-2b6d4c3a1f00\nlocal-hostname: proxy-a.example\n"},
		{name: "numeric id stays a string", instanceID: "12345", hostname: "h1",
			want: "instance-id: \"12345\"\nlocal-hostname: h1\n"},
		{name: "boolean-looking id stays a string", instanceID: "yes", hostname: "on",
			want: "instance-id: \"yes\"\nlocal-hostname: \"on\"\n"},
		{name: "empty id", instanceID: "", hostname: "h", wantErr: provider.ErrPermanent},
		{name: "id with slash (a path under /var/lib/cloud/instances)", instanceID: "a/b", hostname: "h", wantErr: provider.ErrPermanent},
		{name: "id dot-dot", instanceID: "..", hostname: "h", wantErr: provider.ErrPermanent},
		{name: "id with newline", instanceID: "a\nlocal-hostname: evil", hostname: "h", wantErr: provider.ErrPermanent},
		{name: "id with space", instanceID: "a b", hostname: "h", wantErr: provider.ErrPermanent},
		{name: "id too long", instanceID: strings.Repeat("a", 256), hostname: "h", wantErr: provider.ErrPermanent},
		{name: "empty hostname", instanceID: "i", hostname: "", wantErr: provider.ErrPermanent},
		{name: "hostname with underscore", instanceID: "i", hostname: "a_b", wantErr: provider.ErrPermanent},
		{name: "hostname uppercase", instanceID: "i", hostname: "Proxy", wantErr: provider.ErrPermanent},
		{name: "hostname label too long", instanceID: "i", hostname: strings.Repeat("a", 64), wantErr: provider.ErrPermanent},
		{name: "hostname with newline", instanceID: "i", hostname: "a\nb", wantErr: provider.ErrPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MetaData(tt.instanceID, tt.hostname)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("MetaData(%q, %q) error = %v, want class %v", tt.instanceID, tt.hostname, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("MetaData: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("MetaData =\n%q\nwant\n%q", got, tt.want)
			}
			// What cloud-init's NoCloud reads: a YAML map with exactly these two string keys.
			var m map[string]any
			if err := yaml.Unmarshal(got, &m); err != nil {
				t.Fatalf("meta-data is not YAML: %v", err)
			}
			if len(m) != 2 || m["instance-id"] != tt.instanceID || m["local-hostname"] != tt.hostname {
				t.Fatalf("meta-data parses to %#v, want instance-id %q and local-hostname %q", m, tt.instanceID, tt.hostname)
			}
		})
	}
}

func TestNoCloudSeed_FileSet(t *testing.T) {
	meta := "instance-id: i-1\nlocal-hostname: h-1\n"
	tests := []struct {
		name string
		seed Seed
		want []string // name=content
	}{
		{name: "user-data only",
			seed: Seed{InstanceID: "i-1", LocalHostname: "h-1", UserData: "#cloud-config\n"},
			want: []string{"meta-data=" + meta, "user-data=#cloud-config\n"}},
		{name: "empty user-data is still a file (NoCloud needs it)",
			seed: Seed{InstanceID: "i-1", LocalHostname: "h-1"},
			want: []string{"meta-data=" + meta, "user-data="}},
		{name: "network-config when passed",
			seed: Seed{InstanceID: "i-1", LocalHostname: "h-1", UserData: "u", NetworkConfig: "version: 2\n"},
			want: []string{"meta-data=" + meta, "user-data=u", "network-config=version: 2\n"}},
		{name: "vendor-data when passed",
			seed: Seed{InstanceID: "i-1", LocalHostname: "h-1", UserData: "u", VendorData: GuestAgentVendorData},
			want: []string{"meta-data=" + meta, "user-data=u", "vendor-data=" + GuestAgentVendorData.Reveal()}},
		{name: "all four",
			seed: Seed{InstanceID: "i-1", LocalHostname: "h-1", UserData: "u", NetworkConfig: "n", VendorData: "v"},
			want: []string{"meta-data=" + meta, "user-data=u", "network-config=n", "vendor-data=v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := tt.seed.Files()
			if err != nil {
				t.Fatalf("Files: %v", err)
			}
			var got []string
			for _, f := range files {
				got = append(got, f.Name+"="+f.Content.Reveal())
			}
			if strings.Join(got, "\x00") != strings.Join(tt.want, "\x00") {
				t.Fatalf("Files =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestNoCloudSeed_FileSetRejectsBadMetaData(t *testing.T) {
	for _, s := range []Seed{
		{InstanceID: "", LocalHostname: "h", UserData: "u"},
		{InstanceID: "i", LocalHostname: "not_a_host", UserData: "u"},
	} {
		if _, err := s.Files(); !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("Files(%+v) error = %v, want Permanent", s, err)
		}
		if _, err := Build(s); !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("Build(%+v) error = %v, want Permanent", s, err)
		}
	}
}

func TestNoCloudSeed_FilePrintsRedacted(t *testing.T) {
	const sentinel = "SENTINEL-file-print-4711"
	s := Seed{InstanceID: "i", LocalHostname: "h", UserData: sentinel, NetworkConfig: sentinel, VendorData: sentinel}
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprintf("%v", files), fmt.Sprintf("%+v", files), fmt.Sprintf("%#v", files), fmt.Sprintf("%+v", s)} {
		if strings.Contains(out, sentinel) {
			t.Fatalf("printing the seed leaks its content: %s", out)
		}
	}
}
