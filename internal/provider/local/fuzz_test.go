package local

import (
	"errors"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// FuzzParseID: an instance ID (instances/<name>) never panics the parser, a
// refusal is Permanent, and an accepted ID is canonical: formatting what it
// parsed to gives the input back.
func FuzzParseID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		name, err := parseID(id)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) {
				t.Fatalf("parseID(%q): %v, want Permanent", id, err)
			}
			return
		}
		if got := instanceID(name); got != id {
			t.Fatalf("parseID(%q) = %q, which formats as %q", id, name, got)
		}
	})
}
