package proxmox

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// IDs are vms/<vmid>/<name>: no node (VMs migrate), a VMID PVE accepts,
// a name without "/".
func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		vmid int
		name string
		ok   bool
	}{
		{"vms/20001/proxy-a", 20001, "proxy-a", true},
		{"vms/100/p", 100, "p", true},
		{"vms/999999999/p", 999999999, "p", true},
		{"vms/99/p", 0, "", false},         // below PVE's VMIDs
		{"vms/1000000000/p", 0, "", false}, // above
		{"vms/020001/p", 0, "", false},     // leading zero
		{"vms/20001/", 0, "", false},       // no name
		{"vms/20001/a/b", 0, "", false},    // a node-qualified or nested form
		{"nodes/pve1/qemu/20001", 0, "", false},
		{"vms/abc/p", 0, "", false},
		{"", 0, "", false},
		{"vms/20001/web.example.com", 20001, "web.example.com", true}, // PVE's dns-name
		// Mangled names: refused before any request (a VM mid-clone has no
		// name to compare with; the conformance case IDsRoundTrip caught
		// Get of "<id>\x00" reading such a VM as Stopped, one run in 12).
		{"vms/20001/proxy-a\x00", 0, "", false},
		{"vms/20001/proxy-a\n", 0, "", false},
		{"vms/20001/-proxy", 0, "", false},
		{"vms/20001/proxy-", 0, "", false},
		{"vms/20001/pro xy", 0, "", false},
	} {
		vmid, name, err := parseID(tc.id)
		if (err == nil) != tc.ok || vmid != tc.vmid || name != tc.name {
			t.Errorf("parseID(%q) = %d, %q, %v; want %d, %q, ok %t", tc.id, vmid, name, err, tc.vmid, tc.name, tc.ok)
		}
		if err != nil && !errors.Is(err, provider.ErrPermanent) {
			t.Errorf("parseID(%q): %v is not Permanent", tc.id, err)
		}
		if tc.ok && formatID(vmid, name) != tc.id {
			t.Errorf("formatID(parseID(%q)) = %q", tc.id, formatID(vmid, name))
		}
	}
}

// The VMID probe sequence stays inside the range, starts at the UID's
// hash and moves forward (wrapping).
func TestVMIDFor(t *testing.T) {
	p := &Provider{cfg: Config{VMIDMin: 20000, VMIDMax: 20009}}
	first := p.vmidFor("uid-1", 0)
	seen := map[int]bool{}
	for i := 0; i < 10; i++ {
		v := p.vmidFor("uid-1", i)
		if v < 20000 || v > 20009 {
			t.Fatalf("probe %d = %d, outside the range", i, v)
		}
		if want := 20000 + (first-20000+i)%10; v != want {
			t.Errorf("probe %d = %d, want %d (forward from %d)", i, v, want, first)
		}
		seen[v] = true
	}
	if len(seen) != 10 {
		t.Errorf("10 probes cover %d VMIDs, want the whole range", len(seen))
	}
	if p.vmidFor("uid-1", 0) != first {
		t.Error("the probe sequence is not a function of the UID")
	}
}

// The description carries the mark in key=value lines (humans read it in
// the GUI); tags carry it for /cluster/resources.
func TestMarks(t *testing.T) {
	p := &Provider{opts: provider.Options{InstallationID: "inst-a"}}
	d := p.description("UID-1")
	for _, line := range []string{provider.MarkManaged + "=" + provider.MarkManagedValue, provider.MarkUID + "=UID-1", provider.MarkInstallation + "=inst-a"} {
		if !strings.Contains(d, line+"\n") {
			t.Errorf("description %q lacks the line %q", d, line)
		}
	}
	for _, tc := range []struct {
		desc string
		want provider.Marks
	}{
		{d, provider.Marks{Managed: true, UID: "UID-1", Installation: "inst-a"}},
		{"  " + strings.ReplaceAll(d, "\n", " \n  "), provider.Marks{Managed: true, UID: "UID-1", Installation: "inst-a"}},
		{"a human's notes\n" + d + "more notes = here\n", provider.Marks{Managed: true, UID: "UID-1", Installation: "inst-a"}},
		{"", provider.Marks{}},
		{provider.MarkUID + "=u\n", provider.Marks{UID: "u"}},
	} {
		if got := marksFromDescription(tc.desc); got != tc.want {
			t.Errorf("marksFromDescription(%q) = %+v, want %+v", tc.desc, got, tc.want)
		}
	}
	created := time.Unix(1764074432, 0)
	tags := p.tags("ABC-1", created, true)
	for _, tc := range []struct {
		tags string
		want provider.Marks
	}{
		{tags, provider.Marks{Managed: true, UID: "abc-1", Installation: "inst-a"}},
		{strings.ReplaceAll(tags, ";", ","), provider.Marks{Managed: true, UID: "abc-1", Installation: "inst-a"}},
		{tagManaged + ";" + installTag("inst-b"), provider.Marks{Managed: true, Installation: installTag("inst-b")}},
		{"egress-template", provider.Marks{}},
		{"", provider.Marks{}},
	} {
		if got := p.marksFromTags(tc.tags); got != tc.want {
			t.Errorf("marksFromTags(%q) = %+v, want %+v", tc.tags, got, tc.want)
		}
	}
	if got := createdFromTags(tags); !got.Equal(created) {
		t.Errorf("createdFromTags(%q) = %v, want %v", tags, got, created)
	}
	if got := createdFromTags("proxy-operator;poc-x"); !got.IsZero() {
		t.Errorf("createdFromTags of a malformed poc- tag = %v, want zero", got)
	}
	for _, tg := range strings.Split(tags, ";") {
		for _, c := range tg {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("_+.-", c)) {
				t.Errorf("tag %q holds %q, which PVE's tag format refuses", tg, c)
			}
		}
	}
}
