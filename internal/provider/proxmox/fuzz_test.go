package proxmox

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// FuzzParseID: an instance ID (vms/<vmid>/<name>) never panics the parser,
// a refusal is Permanent, an accepted VMID is in PVE's range, and an
// accepted ID is canonical: formatting what it parsed to gives the input
// back.
func FuzzParseID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		vmid, name, err := parseID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if vmid < 100 || vmid > 999999999 {
			t.Fatalf("parseID(%q) accepted VMID %d", id, vmid)
		}
		if got := formatID(vmid, name); got != id {
			t.Fatalf("parseID(%q) = %d, %q, which formats as %q", id, vmid, name, got)
		}
	})
}

// FuzzParseSecondaryID: a seed ISO's secondary ID
// (nodes/<node>/storage/<storage>/iso/<file>) never panics the parser, a
// refusal is Permanent, an accepted one formats back to the input, and its
// file is a seed name whose parts spell it again.
func FuzzParseSecondaryID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		node, storage, file, err := parseSecondaryID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseSecondaryID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if got := formatSecondaryID(node, storage, file); got != id {
			t.Fatalf("parseSecondaryID(%q) = %q %q %q, which formats as %q", id, node, storage, file, got)
		}
		v, ok := parseSeedName(file)
		if !ok {
			t.Fatalf("parseSecondaryID(%q) accepted file %q that parseSeedName refuses", id, file)
		}
		if got := v.Instance + seedSep + v.Tag + seedSep + v.UID + seedSep + seedSuffix; got != file {
			t.Fatalf("seed %q parses to %+v, which spells %q", file, v, got)
		}
	})
}

// FuzzMarksFromTags: a VM's tags (anything: a person may edit them) never
// panic the reader; "managed" needs the exact tag, and this installation is
// recognised only by its own tag. The tags the provider writes for uid read
// back as managed, ours, uid in lower case and the creation second.
func FuzzMarksFromTags(f *testing.F) {
	f.Fuzz(func(t *testing.T, tags, installation, uid string, created int64) {
		p := &Provider{opts: provider.Options{InstallationID: installation}}
		fields := strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
		m := p.marksFromTags(tags)
		has := func(tag string) bool {
			for _, f := range fields {
				if f == tag {
					return true
				}
			}
			return false
		}
		if m.Managed != has(tagManaged) {
			t.Fatalf("marksFromTags(%q).Managed = %v", tags, m.Managed)
		}
		if m.Installation != "" && m.Installation == installation && !has(installTag(installation)) {
			t.Fatalf("marksFromTags(%q) took installation %q as ours without its tag %s", tags, installation, installTag(installation))
		}
		if strings.ContainsAny(uid, ";, ") || uid == "" {
			return
		}
		at := time.Unix(created, 0)
		written := p.tags(uid, at, true)
		back := p.marksFromTags(written)
		if !back.Managed || back.Installation != installation || back.UID != strings.ToLower(uid) {
			t.Fatalf("tags %q for uid %q read back as %+v", written, uid, back)
		}
		if got := createdFromTags(written); !got.Equal(at) {
			t.Fatalf("tags %q for created %v read back created %v", written, at, got)
		}
	})
}

// FuzzMarksFromDescription: a VM's description (free text a person may
// edit) never panics the reader; the description the provider writes reads
// back as the marks it wrote, whenever the UID and installation fit on a
// line (no newline, no trailing space: a line is trimmed).
func FuzzMarksFromDescription(f *testing.F) {
	f.Fuzz(func(t *testing.T, description, installation, uid string) {
		m := marksFromDescription(description)
		if m.Managed && !strings.Contains(description, provider.MarkManaged+"="+provider.MarkManagedValue) {
			t.Fatalf("marksFromDescription(%q) says managed without the mark", description)
		}
		fits := func(s string) bool {
			return !strings.ContainsAny(s, "\n") && strings.TrimRightFunc(s, unicode.IsSpace) == s
		}
		if !fits(uid) || !fits(installation) {
			return
		}
		p := &Provider{opts: provider.Options{InstallationID: installation}}
		d := p.description(uid)
		want := provider.Marks{Managed: true, UID: uid, Installation: installation}
		if got := marksFromDescription(d); got != want {
			t.Fatalf("description %q read back as %+v, want %+v", d, got, want)
		}
	})
}
