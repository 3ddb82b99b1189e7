package libvirt

import (
	"errors"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// FuzzParseID: an instance ID (hosts/<host>/domains/<name>) never panics
// the parser, a refusal is Permanent, and an accepted ID is canonical:
// formatting what it parsed to gives the input back.
func FuzzParseID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		host, name, err := parseID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if got := formatID(host, name); got != id {
			t.Fatalf("parseID(%q) = %q, %q, which formats as %q", id, host, name, got)
		}
	})
}

// FuzzParseSecondaryID: a volume's secondary ID
// (hosts/<host>/pools/<pool>/volumes/<volume>) never panics the parser, a
// refusal is Permanent, an accepted one formats back to the input, and its
// volume is an instance volume whose parts spell its name again.
func FuzzParseSecondaryID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		host, pool, vol, err := parseSecondaryID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseSecondaryID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if got := formatSecondaryID(host, pool, vol); got != id {
			t.Fatalf("parseSecondaryID(%q) = %q %q %q, which formats as %q", id, host, pool, vol, got)
		}
		v, ok := parseVolumeName(vol)
		if !ok {
			t.Fatalf("parseSecondaryID(%q) accepted volume %q that parseVolumeName refuses", id, vol)
		}
		suffix := diskSuffix
		if v.Kind == kindSeed {
			suffix = seedSuffix
		}
		if got := v.Instance + volumeSep + v.Tag + volumeSep + v.UID + volumeSep + suffix; got != vol {
			t.Fatalf("volume %q parses to %+v, which spells %q", vol, v, got)
		}
	})
}

// FuzzParseMetadata: the instance element as a host returns it (anything:
// somebody may have edited it) never panics the parser; an element it reads
// says "managed" only for the exact mark value, and the marks and creation
// time it read, written back by buildMetadata, read back the same, so a
// rewrite never changes whose instance it is.
func FuzzParseMetadata(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		md, err := parseMetadata(s)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseMetadata(%q): %v, want Permanent", s, err)
			}
			return
		}
		out, err := buildMetadata(md.Marks, md.CreatedAt, "ns", "name", md.ServingReport)
		if err != nil {
			t.Fatalf("buildMetadata of what %q parsed to: %v", s, err)
		}
		back, err := parseMetadata(out)
		if err != nil {
			t.Fatalf("parseMetadata of its own %q: %v", out, err)
		}
		if back.Marks != md.Marks || back.ServingReport != md.ServingReport {
			t.Fatalf("marks of %q: %+v, rewritten as %q: %+v", s, md.Marks, out, back.Marks)
		}
		// RFC 3339 has four-digit years: a hand-written time whose UTC
		// year leaves 0000-9999 cannot be written back (buildMetadata is
		// only ever given a creation time of now).
		if y := md.CreatedAt.UTC().Year(); y < 0 || y > 9999 {
			return
		}
		if want := md.CreatedAt.Truncate(time.Second); !back.CreatedAt.Equal(want) {
			t.Fatalf("createdAt of %q: %v, rewritten as %q: %v", s, md.CreatedAt, out, back.CreatedAt)
		}
	})
}
