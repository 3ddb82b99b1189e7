package gcp

import (
	"errors"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// FuzzParseID: an instance ID (zones/<zone>/instances/<name>) never panics
// the parser, a refusal is Permanent, and an accepted ID is canonical:
// formatting what it parsed to gives the input back.
func FuzzParseID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		zone, name, err := parseID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if got := formatID(zone, name); got != id {
			t.Fatalf("parseID(%q) = %q, %q, which formats as %q", id, zone, name, got)
		}
		if regionOf(zone) == "" {
			t.Fatalf("parseID(%q) accepted zone %q, which has no region", id, zone)
		}
	})
}

// FuzzParseRuleID: a firewall rule's secondary ID
// (firewalls/<name>/<numeric id>) never panics the parser, a refusal is
// Permanent, and an accepted one formats back to the input, so one rule
// has one ID (an ID that named rule 12 as "012" would not be the one
// ListSecondary gave out).
func FuzzParseRuleID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		name, n, err := parseRuleID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseRuleID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if n == 0 {
			t.Fatalf("parseRuleID(%q) accepted rule id 0", id)
		}
		if got := formatRuleID(name, n); got != id {
			t.Fatalf("parseRuleID(%q) = %q, %d, which formats as %q", id, name, n, got)
		}
	})
}
