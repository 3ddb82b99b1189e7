package kubernetes

import (
	"errors"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// FuzzParseID: an instance ID (<namespace>/<name>) never panics the parser,
// a refusal is Permanent, and an accepted ID is canonical: formatting what
// it parsed to gives the input back.
func FuzzParseID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		ns, name, err := parseID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if got := instanceID(ns, name); got != id {
			t.Fatalf("parseID(%q) = %q, %q, which formats as %q", id, ns, name, got)
		}
		again, againName, err := parseID(instanceID(ns, name))
		if err != nil || again != ns || againName != name {
			t.Fatalf("round trip of %q: %q, %q, %v", id, again, againName, err)
		}
	})
}

// FuzzParseSecondaryID: a secondary ID (<kind>/<namespace>/<name>/<uid>)
// never panics the parser, a refusal is Permanent, an accepted one names a
// secondary kind (never a Pod: the instance itself is not the collector's
// to delete) and formats back to the input.
func FuzzParseSecondaryID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		k, ns, name, uid, err := parseSecondaryID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseSecondaryID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if k.kind == podKind.kind {
			t.Fatalf("parseSecondaryID(%q) accepted a Pod", id)
		}
		if got := secondaryID(k.kind, ns, name, uid); got != id {
			t.Fatalf("parseSecondaryID(%q) = %q %q %q %q, which formats as %q", id, k.kind, ns, name, uid, got)
		}
	})
}
