package libvirt

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The element is a stored format: every instance on every host carries
// it, whichever type name (kvm or kvm2) wrote it. A change here would make
// existing instances look unmarked (never adopted, never collected).
func TestMetadataGolden(t *testing.T) {
	created := time.Date(2026, 12, 1, 10, 20, 30, 0, time.FixedZone("CET", 3600))
	got, err := buildMetadata(provider.Marks{Managed: true, UID: "5b1f0c1e-7f34-4c55-9d0e-1b2a3c4d5e6f", Installation: "inst-1"},
		created, "default", "web", false)
	if err != nil {
		t.Fatal(err)
	}
	const want = `<instance xmlns="https://egress.proxy-operator.dev/libvirt/instance/v1"><managed>true</managed>` +
		`<uid>5b1f0c1e-7f34-4c55-9d0e-1b2a3c4d5e6f</uid><installation>inst-1</installation>` +
		`<createdAt>2026-12-01T09:20:30Z</createdAt><proxy namespace="default" name="web"></proxy></instance>`
	if got != want {
		t.Fatalf("metadata element changed:\n got %s\nwant %s", got, want)
	}
	if metadataURI != "https://egress.proxy-operator.dev/libvirt/instance/v1" || metadataKey != "egressproxy" {
		t.Fatalf("the metadata namespace changed: %s %s", metadataURI, metadataKey)
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	created := time.Date(2026, 12, 1, 9, 20, 30, 0, time.UTC)
	marks := provider.Marks{Managed: true, UID: "u-1", Installation: "inst-<&>"}
	s, err := buildMetadata(marks, created, "ns", "name", false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseMetadata(s)
	if err != nil || got.Marks != marks || !got.CreatedAt.Equal(created) || got.ServingReport {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	// A domain whose guest runs the serving reporter says so.
	s, err = buildMetadata(marks, created, "ns", "name", true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, "<servingReport>file</servingReport>") {
		t.Errorf("metadata with the reporter: %s", s)
	}
	if got, err := parseMetadata(s); err != nil || !got.ServingReport || got.Marks != marks {
		t.Fatalf("round trip with the reporter: %+v, %v", got, err)
	}
}

func TestParseMetadata(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    parsedMetadata
		invalid bool
	}{
		{"as libvirt returns it, prefixed", `<egressproxy:instance xmlns:egressproxy="https://egress.proxy-operator.dev/libvirt/instance/v1">` +
			`<egressproxy:managed>true</egressproxy:managed><egressproxy:uid>u</egressproxy:uid>` +
			`<egressproxy:installation>i</egressproxy:installation><egressproxy:createdAt>2026-01-02T03:04:05Z</egressproxy:createdAt></egressproxy:instance>`,
			parsedMetadata{Marks: provider.Marks{Managed: true, UID: "u", Installation: "i"}, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, false},
		{"empty UID", `<instance><managed>true</managed><installation>i</installation></instance>`,
			parsedMetadata{Marks: provider.Marks{Managed: true, Installation: "i"}}, false},
		{"not managed", `<instance><managed>yes</managed><uid>u</uid></instance>`,
			parsedMetadata{Marks: provider.Marks{UID: "u"}}, false},
		{"bad createdAt is unknown age", `<instance><managed>true</managed><createdAt>yesterday</createdAt></instance>`,
			parsedMetadata{Marks: provider.Marks{Managed: true}}, false},
		{"another element", `<other><managed>true</managed></other>`, parsedMetadata{}, true},
		{"not XML", `<instance><managed>`, parsedMetadata{}, true},
		{"empty", ``, parsedMetadata{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMetadata(tc.in)
			if tc.invalid {
				if !errors.Is(err, provider.ErrPermanent) {
					t.Fatalf("%+v, %v: want Permanent", got, err)
				}
				return
			}
			if err != nil || got.Marks != tc.want.Marks || !got.CreatedAt.Equal(tc.want.CreatedAt) {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
