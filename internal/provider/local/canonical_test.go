package local

import (
	"context"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Item 6: a range with host bits set is refused, naming the canonical one.
func TestCanonicalSourceRanges_Local(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	for _, r := range [][2]string{{"10.0.0.1/8", "10.0.0.0/8"}, {"2001:db8::1/32", "2001:db8::/32"}} {
		_, err := p.Create(context.Background(), request("canon", "127.0.0.0/8", r[0]))
		wantClass(t, r[0], err, provider.ErrPermanent)
		if err == nil || !strings.Contains(err.Error(), "allowedSourceRanges[1]") || !strings.Contains(err.Error(), r[1]) {
			t.Errorf("Create with %s: %v, want an error naming allowedSourceRanges[1] and %s", r[0], err, r[1])
		}
	}
}
