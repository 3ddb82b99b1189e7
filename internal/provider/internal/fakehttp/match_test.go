package fakehttp

import "testing"

// The tables are those of the fakes' own tests (fakecompute's and
// fakepve's), from before the matching moved here.
func TestMatchPath(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		ok            bool
	}{
		{"projects/*/zones/*/instances", "projects/p/zones/z/instances", true},
		{"projects/*/zones/*/instances", "projects/p/zones/z/instances/x", false},
		{"projects/*/zones/*/instances/*", "projects/p/zones/z/instances/x", true},
		{"projects/*/zones/*/instances/**", "projects/p/zones/z/instances/x/start", true},
		{"projects/*/zones/*/instances/**", "projects/p/zones/z/instances", true},
		{"**", "projects/p", true},
		{"projects/p/global/firewalls/x", "projects/p/global/firewalls/y", false},
		{"nodes/*/qemu/*/status/*", "nodes/pve1/qemu/101/status/start", true},
		{"nodes/*/qemu/**", "nodes/pve1/qemu/101/agent/network-get-interfaces", true},
		{"nodes/*/qemu/**", "nodes/pve1/qemu", true},
		{"nodes/*/qemu/*", "nodes/pve1/qemu/101/config", false},
		{"version", "version", true},
	} {
		if got := MatchPath(c.pattern, c.path); got != c.ok {
			t.Errorf("%q ~ %q: %v, want %v", c.pattern, c.path, got, c.ok)
		}
	}
}

func TestPatternMatches(t *testing.T) {
	for _, c := range []struct {
		p            Pattern
		method, path string
		ok           bool
	}{
		{Pattern{Method: "get", Path: "/projects/*"}, "GET", "projects/p", true},
		{Pattern{Method: "get", Path: "/projects/*"}, "POST", "projects/p", false},
		{Pattern{Path: "projects/*/"}, "DELETE", "/projects/p/", true},
		{Pattern{Path: "nodes/*/qemu/**"}, "POST", "/nodes/pve1/qemu/101/status/start", true},
		{Pattern{Path: "nodes/*/qemu/*"}, "GET", "/nodes/pve1/qemu/101/config", false},
	} {
		if got := c.p.Matches(c.method, c.path); got != c.ok {
			t.Errorf("%+v ~ %s %q: %v, want %v", c.p, c.method, c.path, got, c.ok)
		}
	}
}
