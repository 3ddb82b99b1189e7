package gcp

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func pureProvider(t *testing.T, mutate func(*Config)) *Provider {
	t.Helper()
	cfg := Config{Project: testProject, DefaultZone: testZone}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New(testName, cfg, provider.Options{InstallationID: testInstallation})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The insert body, whole: boot disk with AutoDelete from the image, the
// marks as labels, the shared and the instance's own tag, user-data in
// metadata, one NIC with an external IP or none, no service account by
// default (the VM holds no credentials).
func TestBuildInstance(t *testing.T) {
	for _, mode := range []string{AddressExternal, AddressInternal} {
		t.Run(mode, func(t *testing.T) {
			p := pureProvider(t, func(c *Config) { c.AddressMode = mode; c.Labels = map[string]string{"team": "platform"} })
			req := testRequest("build")
			pl, err := p.resolve(req)
			if err != nil {
				t.Fatal(err)
			}
			in := p.buildInstance(pl, req)
			d := in.GetDisks()[0]
			switch {
			case in.GetName() != req.Name || in.GetMachineType() != "zones/us-central1-a/machineTypes/e2-small":
				t.Errorf("name %s machine type %s", in.GetName(), in.GetMachineType())
			case len(in.GetDisks()) != 1 || !d.GetBoot() || !d.GetAutoDelete():
				t.Errorf("disk %v: want one boot disk with AutoDelete", d)
			case d.GetInitializeParams().GetSourceImage() != DefaultImage || d.GetInitializeParams().GetDiskSizeGb() != 10 ||
				d.GetInitializeParams().GetDiskType() != "zones/us-central1-a/diskTypes/pd-balanced":
				t.Errorf("disk params %v", d.GetInitializeParams())
			case len(in.GetServiceAccounts()) != 0:
				t.Errorf("service accounts %v, want none", in.GetServiceAccounts())
			}
			want := map[string]string{"team": "platform", provider.MarkManaged: "true", provider.MarkUID: req.UID, provider.MarkInstallation: testInstallation}
			if len(in.GetLabels()) != len(want) {
				t.Errorf("labels %v, want %v", in.GetLabels(), want)
			}
			for k, v := range want {
				if in.GetLabels()[k] != v {
					t.Errorf("label %s = %q, want %q", k, in.GetLabels()[k], v)
				}
			}
			if tags := in.GetTags().GetItems(); !slices.Equal(tags, []string{DefaultNetworkTagPrefix, instanceTag(DefaultNetworkTagPrefix, req.Name)}) {
				t.Errorf("tags %v", tags)
			}
			items := in.GetMetadata().GetItems()
			if len(items) != 3 || items[0].GetKey() != "user-data" || !strings.HasPrefix(items[0].GetValue(), "#cloud-config") {
				t.Errorf("metadata %v", items)
			}
			nic := in.GetNetworkInterfaces()
			if len(nic) != 1 || nic[0].GetNetwork() != "projects/proj-1/global/networks/default" {
				t.Fatalf("NICs %v", nic)
			}
			if external := len(nic[0].GetAccessConfigs()) == 1 && nic[0].GetAccessConfigs()[0].GetType() == "ONE_TO_ONE_NAT"; external != (mode == AddressExternal) {
				t.Errorf("access configs %v in mode %s", nic[0].GetAccessConfigs(), mode)
			}
			if s := describeInsert(in); strings.Contains(strings.Join(s["metadata"].([]string), ""), "#cloud-config") {
				t.Errorf("the V(2) description carries the user-data: %v", s)
			}
		})
	}
	t.Run("service account and subnetwork", func(t *testing.T) {
		p := pureProvider(t, func(c *Config) {
			c.ServiceAccount = "vm@proj-1.iam.gserviceaccount.com"
			c.Scopes = []string{"https://www.googleapis.com/auth/logging.write"}
			c.Subnetwork = "proxies"
		})
		req := testRequest("sa")
		pl, err := p.resolve(req)
		if err != nil {
			t.Fatal(err)
		}
		in := p.buildInstance(pl, req)
		if sa := in.GetServiceAccounts(); len(sa) != 1 || sa[0].GetEmail() != "vm@proj-1.iam.gserviceaccount.com" || !slices.Equal(sa[0].GetScopes(), []string{"https://www.googleapis.com/auth/logging.write"}) {
			t.Errorf("service accounts %v", sa)
		}
		if sn := in.GetNetworkInterfaces()[0].GetSubnetwork(); sn != "projects/proj-1/regions/us-central1/subnetworks/proxies" {
			t.Errorf("subnetwork %s", sn)
		}
	})
}

// Everything a request can get wrong is refused before any call,
// Permanent, naming the field.
func TestResolveRefusesBeforeAnyCall(t *testing.T) {
	catalogue := func(c *Config) {
		c.Zones = []string{"us-central1-a", "us-central1-b", "europe-west1-b"}
		c.MachineTypes = map[string]string{"small": "e2-small", "big": "n2-standard-2", "e2-small": "e2-small"}
		c.DefaultMachineType = "small"
		c.Images = map[string]Image{"ubuntu": {Image: DefaultImage}, "cos": {Image: "projects/cos-cloud/global/images/family/cos-stable"}}
		c.DefaultImage = "ubuntu"
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		req    func(*provider.CreateRequest)
		want   string
	}{
		{"zone format", nil, func(r *provider.CreateRequest) { r.Placement.Zone = "central" }, `placement.zone "central" is not a zone name`},
		{"zone not listed", catalogue, func(r *provider.CreateRequest) { r.Placement.Zone = "us-east1-b" }, `placement.zone "us-east1-b" is not one of this entry's zones`},
		{"zone outside region", catalogue, func(r *provider.CreateRequest) { r.Placement.Region = "europe-west1" }, `placement.zone "us-central1-a" is not in placement.region "europe-west1"`},
		{"region without zones", catalogue, func(r *provider.CreateRequest) { r.Placement.Zone, r.Placement.Region = "", "asia-east1" }, `placement.region "asia-east1" alone names no zone`},
		{"no zone", func(c *Config) { c.DefaultZone = "" }, func(r *provider.CreateRequest) { r.Placement.Zone = "" }, "placement.zone is required"},
		{"machine type not in catalogue", catalogue, func(r *provider.CreateRequest) { r.Placement.MachineType = "huge" }, `placement.machineType "huge" is not in this entry's machineTypes (big, e2-small, small)`},
		{"machine type format", nil, func(r *provider.CreateRequest) { r.Placement.MachineType = "E2 Small" }, `placement.machineType "E2 Small" is not a GCE machine type name`},
		{"image not in catalogue", catalogue, func(r *provider.CreateRequest) { r.Placement.Image = "debian" }, `placement.image "debian" is not in this entry's images (cos, ubuntu)`},
		{"image path", nil, func(r *provider.CreateRequest) { r.Placement.Image = "ubuntu-2404" }, `placement.image "ubuntu-2404": must be projects/`},
		{"image without cloud-init", nil, func(r *provider.CreateRequest) {
			r.Placement.Image = "projects/debian-cloud/global/images/family/debian-12"
		}, "images of project debian-cloud do not run cloud-init"},
		{"generated config on COS", catalogue, func(r *provider.CreateRequest) { r.Placement.Image = "cos" }, "no package manager"},
		{"range with host bits", nil, func(r *provider.CreateRequest) { r.AllowedSourceRanges = []string{"10.0.0.1/8"} }, "allowedSourceRanges[0]"},
		{"port", nil, func(r *provider.CreateRequest) { r.Port = 0 }, "port 0 is not a TCP port"},
		{"UID not a label value", nil, func(r *provider.CreateRequest) { r.UID = "UID.With.Dots" }, "cannot be a GCE label value"},
		{"user-data too large", nil, func(r *provider.CreateRequest) { r.CloudInit = provider.Sensitive(strings.Repeat("x", maxUserData+1)) }, "a GCE metadata value holds at most"},
		{"subnetwork in another region", func(c *Config) { c.Subnetwork = "regions/europe-west1/subnetworks/s" }, nil, "the entry's subnetwork is in region europe-west1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pureProvider(t, tc.mutate)
			req := testRequest("refused")
			if tc.req != nil {
				tc.req(&req)
			}
			_, err := p.Create(t.Context(), req)
			if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Create: %v; want Permanent with %q", err, tc.want)
			}
			if p.built != nil {
				t.Error("a request refused before any call built the client")
			}
		})
	}
	t.Run("a region alone picks a listed zone in it", func(t *testing.T) {
		p := pureProvider(t, catalogue)
		req := testRequest("region")
		req.Placement.Zone, req.Placement.Region = "", "europe-west1"
		pl, err := p.resolve(req)
		if err != nil || pl.zone != "europe-west1-b" {
			t.Errorf("resolve: zone %q, %v", pl.zone, err)
		}
	})
	t.Run("own cloud-init on COS", func(t *testing.T) {
		p := pureProvider(t, catalogue)
		req := testRequest("cos")
		req.Placement.Image = "cos"
		req.CloudInit = "#cloud-config\n"
		if _, err := p.resolve(req); err != nil {
			t.Errorf("a Proxy's own cloud-init on COS: %v", err)
		}
	})
}

func TestMapState(t *testing.T) {
	for _, tc := range []struct {
		status, ip string
		deleting   bool
		want       provider.State
	}{
		{"PROVISIONING", "", false, provider.StateProvisioning},
		{"STAGING", "", false, provider.StateProvisioning},
		{"REPAIRING", "203.0.113.1", false, provider.StateProvisioning},
		{"PENDING", "", false, provider.StateProvisioning},
		{"RUNNING", "", false, provider.StateProvisioning},
		{"RUNNING", "203.0.113.1", false, provider.StateRunning},
		{"RUNNING", "203.0.113.1", true, provider.StateTerminated},
		{"STOPPING", "", false, provider.StateStopped},
		{"SUSPENDING", "", false, provider.StateStopped},
		{"SUSPENDED", "", false, provider.StateStopped},
		{"TERMINATED", "", false, provider.StateStopped},
		{"STOPPED", "", false, provider.StateStopped},
		{"DEPROVISIONING", "", false, provider.StateStopped},
		{"SOMETHING_NEW", "203.0.113.1", false, provider.StateStopped},
	} {
		if got := mapState(tc.status, tc.ip, tc.deleting); got != tc.want {
			t.Errorf("mapState(%s, %q, %t) = %s, want %s", tc.status, tc.ip, tc.deleting, got, tc.want)
		}
	}
}

func TestAddressByMode(t *testing.T) {
	in := &computepb.Instance{NetworkInterfaces: []*computepb.NetworkInterface{{
		NetworkIP:     proto.String("10.128.0.7"),
		AccessConfigs: []*computepb.AccessConfig{{NatIP: proto.String("203.0.113.9")}},
	}}}
	if got := address(in, AddressExternal); got != "203.0.113.9" {
		t.Errorf("external: %q", got)
	}
	if got := address(in, AddressInternal); got != "10.128.0.7" {
		t.Errorf("internal: %q", got)
	}
	in.NetworkInterfaces[0].AccessConfigs = nil
	if got := address(in, AddressExternal); got != "" {
		t.Errorf("external without an access config: %q", got)
	}
}

func TestIDs(t *testing.T) {
	id := formatID("us-central1-a", "proxy-a")
	if z, n, err := parseID(id); err != nil || z != "us-central1-a" || n != "proxy-a" {
		t.Errorf("parseID(%q) = %s %s %v", id, z, n, err)
	}
	for _, bad := range []string{"", "zones/us-central1-a/instances/", "zones/x/instances/a", "zones/us-central1-a/instances/A", "projects/p/zones/us-central1-a/instances/a"} {
		if _, _, err := parseID(bad); !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("parseID(%q): %v", bad, err)
		}
	}
	rid := formatRuleID("proxy-a", 42)
	if n, r, err := parseRuleID(rid); err != nil || n != "proxy-a" || r != 42 {
		t.Errorf("parseRuleID(%q) = %s %d %v", rid, n, r, err)
	}
	for _, bad := range []string{"firewalls/proxy-a/0", "firewalls/proxy-a/x", "firewalls//1", "rules/proxy-a/1"} {
		if _, _, err := parseRuleID(bad); !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("parseRuleID(%q): %v", bad, err)
		}
	}
	// Request IDs: UUIDs, the same for the same insert, another for the
	// next attempt or another Proxy.
	a := insertRequestID("i", "p", "z", "n", "u", 0)
	if a != insertRequestID("i", "p", "z", "n", "u", 0) || a == insertRequestID("i", "p", "z", "n", "u", 1) ||
		a == insertRequestID("i", "p", "z", "n", "v", 0) || len(a) != 36 || a[14] != '8' {
		t.Errorf("request IDs: %s", a)
	}
}
