package controller

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func proxyFor(spec egressv1.ProxySpec) *egressv1.Proxy {
	return &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"}, Spec: spec}
}

func TestCreateRequestShape(t *testing.T) {
	base := egressv1.ProxySpec{Provider: "local", Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8", "192.0.2.0/24"}}
	baseName := createRequest(proxyFor(base), "", "", inPlace{}, "").Name

	cases := []struct {
		name     string
		mutate   func(s *egressv1.ProxySpec)
		ci       provider.Sensitive
		sameName bool
	}{
		{"identical", func(*egressv1.ProxySpec) {}, "", true},
		{"range order does not matter", func(s *egressv1.ProxySpec) {
			s.AllowedSourceRanges = []string{"192.0.2.0/24", "10.0.0.0/8"}
		}, "", true},
		{"provider name is not shape", func(s *egressv1.ProxySpec) { s.Provider = "other" }, "", true},
		{"port reshapes", func(s *egressv1.ProxySpec) { s.Port = 8080 }, "", false},
		{"zone reshapes", func(s *egressv1.ProxySpec) { s.Placement.Zone = "z" }, "", false},
		{"machine type reshapes", func(s *egressv1.ProxySpec) { s.Placement.MachineType = "m" }, "", false},
		{"image reshapes", func(s *egressv1.ProxySpec) { s.Placement.Image = "i" }, "", false},
		{"ranges reshape", func(s *egressv1.ProxySpec) { s.AllowedSourceRanges = []string{"10.0.0.0/8"} }, "", false},
		{"cloud-init reshapes", func(*egressv1.ProxySpec) {}, "#cloud-config\n", false},
		{"destination rules reshape", func(s *egressv1.ProxySpec) {
			s.Destinations = []egressv1.DestinationRule{{Domains: []string{"api.partner.example"}, Ports: []int32{443}}}
		}, "", false},
		{"an empty rule list is no rules", func(s *egressv1.ProxySpec) { s.Destinations = []egressv1.DestinationRule{} }, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := base
			spec.AllowedSourceRanges = append([]string(nil), base.AllowedSourceRanges...)
			tc.mutate(&spec)
			got := createRequest(proxyFor(spec), tc.ci, "", inPlace{}, "").Name
			if (got == baseName) != tc.sameName {
				t.Errorf("name %q vs base %q: same=%v, want same=%v", got, baseName, got == baseName, tc.sameName)
			}
		})
	}
}

// The rules reach the provider as written.
func TestCreateRequestCarriesDestinations(t *testing.T) {
	rules := []egressv1.DestinationRule{{Domains: []string{"api.partner.example", ".cdn.example"}, Ports: []int32{443}}, {CIDRs: []string{"203.0.114.0/24"}}}
	req := createRequest(proxyFor(egressv1.ProxySpec{Provider: "local", Destinations: rules}), "", "", inPlace{}, "")
	if len(req.Destinations) != 2 || !slices.Equal(req.Destinations[0].Domains, rules[0].Domains) ||
		!slices.Equal(req.Destinations[0].Ports, rules[0].Ports) || !slices.Equal(req.Destinations[1].CIDRs, rules[1].CIDRs) {
		t.Errorf("Destinations = %+v, want %+v", req.Destinations, rules)
	}
}

func TestCreateRequestFields(t *testing.T) {
	const sentinel = "SENTINEL-shape-cloud-init"
	px := proxyFor(egressv1.ProxySpec{Provider: "local", AllowedSourceRanges: []string{"10.0.0.0/8"},
		Placement: egressv1.Placement{Zone: "z", Region: "r", MachineType: "m", Image: "i"}})
	req := createRequest(px, provider.Sensitive(sentinel), "", inPlace{}, "")
	if req.Port != defaultPort {
		t.Errorf("Port = %d, want default %d", req.Port, defaultPort)
	}
	if req.Namespace != "ns" || req.ProxyName != "p" || req.UID != "uid-1" {
		t.Errorf("identity = %q/%q/%q", req.Namespace, req.ProxyName, req.UID)
	}
	if req.Placement != (provider.Placement{Zone: "z", Region: "r", MachineType: "m", Image: "i"}) {
		t.Errorf("Placement = %+v", req.Placement)
	}
	if req.CloudInit.Reveal() != sentinel {
		t.Error("cloud-init not carried")
	}
	if !strings.HasPrefix(req.Name, "proxy-ns-p-") {
		t.Errorf("Name = %q", req.Name)
	}
	// The shape hash stands for the cloud-init; it must not contain it.
	if strings.Contains(shapeOf(px.Spec, provider.Sensitive(sentinel), "", inPlace{}, 0, ""), sentinel) {
		t.Error("shape carries the cloud-init")
	}
	// The request must not alias the Proxy's slice.
	req.AllowedSourceRanges[0] = "changed"
	if px.Spec.AllowedSourceRanges[0] != "10.0.0.0/8" {
		t.Error("request aliases the spec")
	}
}

// TestShapeGolden (issue 7, item 8): the shape hash is a stored format. It
// goes into every instance name (provider.InstanceName), and Create adopts
// by name, so a change to shapeOf (a field renamed or reordered, a new
// field that is not omitted when empty, another encoding, nil ranges
// encoded as []) would rename every instance: the whole fleet replaced on
// upgrade. The expected values were computed once, on the code as
// released, and must never change; a field added to the shape must leave
// the hash of every existing spec as it is.
func TestShapeGolden(t *testing.T) {
	const uid = "3f1c9f4e-8a0b-4c7e-9d2a-6b5e4f3a2c1d"
	for _, tc := range []struct {
		name      string
		spec      egressv1.ProxySpec
		cloudInit provider.Sensitive
		wantShape string
		wantName  string
	}{
		{"defaults, no ranges", egressv1.ProxySpec{Provider: "local", Port: 3128}, "",
			"9a3589aa4c10da2bbc71ef2e0cf07b5eea8f836fb085177cc82310cf4f60f280", "proxy-team-a-egress-eu-9fc4ba29d7"},
		{"ranges", egressv1.ProxySpec{Provider: "local", Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8", "192.0.2.0/24"}}, "",
			"7113dadebcad5388c1bbfc7bd94e2da28bcf685599375d2f6d04bf349aee7f8f", "proxy-team-a-egress-eu-86bbbca195"},
		{"ranges in another order", egressv1.ProxySpec{Provider: "local", Port: 3128, AllowedSourceRanges: []string{"192.0.2.0/24", "10.0.0.0/8"}}, "",
			"7113dadebcad5388c1bbfc7bd94e2da28bcf685599375d2f6d04bf349aee7f8f", "proxy-team-a-egress-eu-86bbbca195"},
		{"placement and port", egressv1.ProxySpec{Provider: "gcp", Port: 8080, AllowedSourceRanges: []string{"10.0.0.0/8"},
			Placement: egressv1.Placement{Zone: "europe-west1-b", Region: "europe-west1", MachineType: "e2-micro", Image: "debian-12"}}, "",
			"699dc2d5950bebf6d5e8a10b310ac39554b50d5c27ac1473d5c0d2e53b8a9375", "proxy-team-a-egress-eu-d421ea0d1c"},
		{"cloud-init", egressv1.ProxySpec{Provider: "local", Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8"}}, "#cloud-config\npackages: [squid]\n",
			"ebe795f145739e8febe185d0bcaca8e1fef72b064c893403fa495a861a74c298", "proxy-team-a-egress-eu-73ae775222"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shapeOf(tc.spec, tc.cloudInit, "", inPlace{}, 0, ""); got != tc.wantShape {
				t.Errorf("shapeOf = %q, want %q: a changed shape hash renames every instance of a fleet", got, tc.wantShape)
			}
			px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "egress.eu", UID: uid}, Spec: tc.spec}
			if got := createRequest(px, tc.cloudInit, "", inPlace{}, "").Name; got != tc.wantName {
				t.Errorf("instance name = %q, want %q: a changed name renames every instance of a fleet", got, tc.wantName)
			}
		})
	}
	// A Proxy stored before the CRD defaulted the port is named as one
	// with the default port.
	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "egress.eu", UID: uid}, Spec: egressv1.ProxySpec{Provider: "local"}}
	if got, want := createRequest(px, "", "", inPlace{}, "").Name, "proxy-team-a-egress-eu-9fc4ba29d7"; got != want {
		t.Errorf("instance name with port 0 = %q, want %q (the name of port %d)", got, want, defaultPort)
	}
}

// TestCreateRequestGroup: a member's request names its group (a
// GroupFronter selects the member's instance by it); anything else's names
// none, and the group is no part of the instance's name (its shape).
func TestCreateRequestGroup(t *testing.T) {
	g := &egressv1.ProxyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web"},
		Spec: egressv1.ProxyGroupSpec{Members: 2, Template: egressv1.ProxyTemplate{Spec: egressv1.ProxySpec{Provider: "local", Port: 3128}}}}
	member := desiredMember(g, 1, groupAddressing{})
	member.UID = "uid-member"
	notMember := member.DeepCopy()
	notMember.OwnerReferences = nil
	otherController := member.DeepCopy()
	otherController.OwnerReferences[0].Kind = "ReplicaSet"
	otherController.OwnerReferences[0].APIVersion = "apps/v1"
	wrongLabels := member.DeepCopy()
	wrongLabels.Labels[egressv1.LabelGroup] = "other"

	cases := []struct {
		name string
		px   *egressv1.Proxy
		want *provider.GroupRef
	}{
		{"a member", member, &provider.GroupRef{Namespace: "ns", Name: "web", UID: "uid-web"}},
		{"no controller", notMember, nil},
		{"another kind's controller", otherController, nil},
		{"a member label of another group", wrongLabels, nil},
		{"a plain Proxy", proxyFor(egressv1.ProxySpec{Provider: "local"}), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := createRequest(c.px, "", "", inPlace{}, "").Group
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Group = %+v, want %+v", got, c.want)
			}
		})
	}
	if a, b := createRequest(member, "", "", inPlace{}, "").Name, createRequest(notMember, "", "", inPlace{}, "").Name; a != b {
		t.Errorf("the group changes the instance name: %s and %s", a, b)
	}
}
