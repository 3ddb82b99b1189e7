package controller

import (
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
	baseName := createRequest(proxyFor(base), "").Name

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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := base
			spec.AllowedSourceRanges = append([]string(nil), base.AllowedSourceRanges...)
			tc.mutate(&spec)
			got := createRequest(proxyFor(spec), tc.ci).Name
			if (got == baseName) != tc.sameName {
				t.Errorf("name %q vs base %q: same=%v, want same=%v", got, baseName, got == baseName, tc.sameName)
			}
		})
	}
}

func TestCreateRequestFields(t *testing.T) {
	const sentinel = "SENTINEL-shape-cloud-init"
	px := proxyFor(egressv1.ProxySpec{Provider: "local", AllowedSourceRanges: []string{"10.0.0.0/8"},
		Placement: egressv1.Placement{Zone: "z", Region: "r", MachineType: "m", Image: "i"}})
	req := createRequest(px, provider.Sensitive(sentinel))
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
	if strings.Contains(shapeOf(px.Spec, provider.Sensitive(sentinel)), sentinel) {
		t.Error("shape carries the cloud-init")
	}
	// The request must not alias the Proxy's slice.
	req.AllowedSourceRanges[0] = "changed"
	if px.Spec.AllowedSourceRanges[0] != "10.0.0.0/8" {
		t.Error("request aliases the spec")
	}
}
