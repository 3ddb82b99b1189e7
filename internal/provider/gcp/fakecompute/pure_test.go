package fakecompute

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseFilter(t *testing.T) {
	labels := map[string]string{"managed": "true", "inst": "blue"}
	get := func(field string) (string, bool, bool) {
		if k, ok := strings.CutPrefix(field, "labels."); ok {
			v, set := labels[k]
			return v, set, true
		}
		if field == "name" {
			return "egress-a", true, true
		}
		return "", false, false
	}
	cases := []struct {
		expr  string
		match bool
		bad   bool
	}{
		{`labels.managed = "true"`, true, false},
		{`labels.managed="true"`, true, false},
		{`labels.managed=true`, true, false},
		{`labels.managed = 'true'`, true, false},
		{`labels.managed = "false"`, false, false},
		{`labels.missing != "x"`, true, false},
		{`labels.missing:*`, false, false},
		{`labels.inst:*`, true, false},
		{`(labels.managed = "true") AND (labels.inst = "blue")`, true, false},
		{`(labels.managed = "true") AND (labels.inst = "green")`, false, false},
		{`(labels.managed = "true") (labels.inst = "green")`, false, false},
		{`labels.inst = "green" OR labels.inst = "blue"`, true, false},
		{`labels.managed = "false" AND labels.inst = "green" OR labels.inst = "blue"`, false, false}, // OR binds tighter
		{`name eq "egress-.*"`, true, false},
		{`name eq "egress"`, false, false}, // the whole field
		{`name ne "other-.*"`, true, false},
		{`(name eq "egress-.*") (labels.inst eq "bl.e")`, true, false},
		{`name eq "a" OR name eq "b"`, false, true},
		{`name eq "a" labels.managed = "true"`, false, true},
		{`labels.managed = `, false, true},
		{`labels.managed = "true`, false, true},
		{`(labels.managed = "true"`, false, true},
		{`labels.managed > "a"`, false, true},
		{`AND`, false, true},
		{`name eq "["`, false, true},
	}
	for _, c := range cases {
		f, err := parseFilter(c.expr)
		if c.bad {
			if err == nil {
				t.Errorf("%q parsed, want Invalid list filter expression", c.expr)
			} else if !strings.Contains(err.Message, "Invalid list filter expression.") {
				t.Errorf("%q: %s", c.expr, err.Message)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		if got := f.match(get); got != c.match {
			t.Errorf("%q matched %v, want %v", c.expr, got, c.match)
		}
	}
	if f, _ := parseFilter(`cpuPlatform = "x"`); f.check(get) {
		t.Error("a filter on a field the resource lacks passed check")
	}
}

func TestLabelRules(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, c := range []struct {
		key, value string
		ok         bool
	}{
		{"egress-operator-managed", "true", true},
		{"k", "", true},
		{long, long, true},
		{long + "a", "v", false},
		{"k", long + "a", false},
		{"", "v", false},
		{"Key", "v", false},
		{"1key", "v", false},
		{"_key", "v", false},
		{"key", "Value", false},
		{"key", "a.b", false},
		{"key", "a b", false},
		{"clé", "réseau", true},
		{"ключ", "значение", true},
		{"key", "Ünïcode", false}, // an upper-case international letter
		{"key_1-x", "v_1-2", true},
	} {
		e := validateLabels("resource.labels", map[string]string{c.key: c.value})
		if (e == nil) != c.ok {
			t.Errorf("%q=%q: %v, want ok=%v", c.key, c.value, e, c.ok)
		}
	}
	many := map[string]string{}
	for i := 0; i < 64; i++ {
		many[fmt.Sprintf("k%d", i)] = ""
	}
	if e := validateLabels("labels", many); e != nil {
		t.Errorf("64 labels: %v", e)
	}
	many["one-more"] = ""
	if e := validateLabels("labels", many); e == nil {
		t.Error("65 labels accepted")
	}
}

// The path patterns' table is fakehttp's TestMatchPath; here a Fault's
// method and path meet a request path under /compute/v1/.
func TestMatchPath(t *testing.T) {
	s := New()
	s.FailNext(Fault{Method: "get", Path: "/projects/*", Err: BackendError()})
	if s.takeFault("POST", "/compute/v1/projects/p", false) != nil || s.takeFault("GET", "/compute/v1/projects/p", false) == nil {
		t.Error("method match")
	}
}

func TestResourcePath(t *testing.T) {
	for ref, want := range map[string]string{
		"zones/z/machineTypes/e2-small":                                           "projects/p/zones/z/machineTypes/e2-small",
		"https://www.googleapis.com/compute/v1/projects/q/zones/z/machineTypes/t": "projects/q/zones/z/machineTypes/t",
		"https://compute.googleapis.com/compute/v1/projects/q/global/networks/n":  "projects/q/global/networks/n",
		"projects/debian-cloud/global/images/family/debian-12":                    "projects/debian-cloud/global/images/family/debian-12",
		"global/networks/default":                                                 "projects/p/global/networks/default",
		"e2-small":                                                                "",
		"family/debian-12":                                                        "",
	} {
		got, ok := resourcePath("p", ref)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", ref, got, ok, want)
		}
	}
}
