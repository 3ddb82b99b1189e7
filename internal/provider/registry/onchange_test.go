package registry

import (
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// TestConfigChangeReportsOnlyChangedEntries: item 10, "a providers-config
// change enqueues only the Proxies of the entries that changed". OnChange
// is told the sorted names of the entries an Apply added, rebuilt or
// removed, never those it kept, and is not called when nothing changed.
func TestConfigChangeReportsOnlyChangedEntries(t *testing.T) {
	var built []*stub
	r := New(testTypes(&built), provider.Options{})
	var got []string
	r.OnChange(func(changed []string) { got = append(got, strings.Join(changed, ",")) })

	for _, step := range []struct{ what, config, want string }{
		{"first load", "providers:\n- {name: b, type: plain}\n- {name: a, type: plain}\n- {name: k, type: plain}\n", "a,b,k"},
		{"b changed, c added, a removed, k kept", "providers:\n- {name: k, type: plain}\n- {name: c, type: plain}\n- {name: b, type: plain, plain: {size: 2}}\n", "b,c,a"},
		{"the same again", "providers:\n- {name: k, type: plain}\n- {name: c, type: plain}\n- {name: b, type: plain, plain: {size: 2}}\n", ""},
		{"only k's type changed", "providers:\n- {name: k, type: checking}\n- {name: c, type: plain}\n- {name: b, type: plain, plain: {size: 2}}\n", "k"},
	} {
		got = nil
		if err := r.Apply(entries(t, r, step.config)); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		want := []string{}
		if step.want != "" {
			want = []string{sortedCSV(step.want)}
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: OnChange told %q, want %q", step.what, got, want)
		}
	}
	// A refused config changes nothing and tells nothing.
	got = nil
	if err := r.Apply(entries(t, r, "providers:\n- {name: k, type: plain, plain: {size: 0}}\n")); err == nil {
		t.Fatal("an invalid config was applied")
	}
	if len(got) != 0 {
		t.Errorf("a refused config told %q", got)
	}
}

func sortedCSV(s string) string {
	parts := strings.Split(s, ",")
	for i := range parts {
		for j := i + 1; j < len(parts); j++ {
			if parts[j] < parts[i] {
				parts[i], parts[j] = parts[j], parts[i]
			}
		}
	}
	return strings.Join(parts, ",")
}
