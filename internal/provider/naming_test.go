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
	// The UID and the shape are hashed with a separator, so moving a
	// character from one to the other is another name.
	if InstanceName("ns", "p", "ab", "c") == InstanceName("ns", "p", "a", "bc") {
		t.Error("UID \"ab\" with shape \"c\" and UID \"a\" with shape \"bc\" gave the same name")
	}
}

// TestInstanceNameUniquenessComesFromTheHash: namespace "a-b" with name "c"
// and namespace "a" with name "b-c" give the same readable body, so the body
// cannot tell two Proxies apart; their UIDs differ, and so do their names.
func TestInstanceNameUniquenessComesFromTheHash(t *testing.T) {
	x := InstanceName("a-b", "c", "uid-x", "s")
	y := InstanceName("a", "b-c", "uid-y", "s")
	if body := "proxy-a-b-c-"; !strings.HasPrefix(x, body) || !strings.HasPrefix(y, body) {
		t.Fatalf("names %q and %q, want both to start with the shared body %q", x, y, body)
	}
	if x == y {
		t.Errorf("two Proxies with coinciding bodies and different UIDs share the name %q", x)
	}
}

// TestInstanceNameGolden (issue 7, item 8): instance names are a stored
// format. Every backend holds its instances under these names and Create
// adopts by name, so an operator whose InstanceName changed would not find
// a single existing instance: it would create a replacement for every
// Proxy, and the collector would delete the old fleet. The expected names
// were computed once, on the code as released, and must never change; a
// new naming scheme needs a migration, not a new golden value.
func TestInstanceNameGolden(t *testing.T) {
	long := strings.Repeat("a", 253)
	for _, tc := range []struct {
		ns, name, uid, shape string
		want                 string
	}{
		{"default", "web", "u1", "s1", "proxy-default-web-4bbb6a0cad"},
		{"team-a", "egress.eu.1", "u1", "s1", "proxy-team-a-egress-eu-1-4bbb6a0cad"},
		{"NS", "A_B", "u1", "s1", "proxy-ns-a-b-4bbb6a0cad"},
		{long, long, "u1", "s1", "proxy-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-4bbb6a0cad"},
		{"ns", "x-" + long, "u1", "s1", "proxy-ns-x-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-4bbb6a0cad"},
		{"default", "web", "3f1c9f4e-8a0b-4c7e-9d2a-6b5e4f3a2c1d",
			"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "proxy-default-web-5df8a79048"},
		{"default", "web", "u1", "", "proxy-default-web-36c81e7529"},
		{"default", "web", "", "s1", "proxy-default-web-e4098525c9"},
		{"a-b", "c", "u", "s", "proxy-a-b-c-06741ed599"},
	} {
		if got := InstanceName(tc.ns, tc.name, tc.uid, tc.shape); got != tc.want {
			t.Errorf("InstanceName(%.20q, %.20q, %q, %q) = %q, want %q: a changed name renames every instance of a fleet",
				tc.ns, tc.name, tc.uid, tc.shape, got, tc.want)
		}
	}
}
