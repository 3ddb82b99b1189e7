package fakehttp

import (
	"net/url"
	"strings"
	"testing"
)

type entry struct{ method, path string }

func TestLog(t *testing.T) {
	l := Log[entry]{Target: func(e entry) (string, string, bool) {
		rel, ok := strings.CutPrefix(e.path, "/api/")
		return e.method, rel, ok
	}}
	l.Add(entry{"GET", "/api/a/1"})
	l.Add(entry{"POST", "/api/a/2"})
	l.Add(entry{"GET", "/other/a/3"})

	all := l.All()
	if len(all) != 3 || all[0].path != "/api/a/1" || all[2].path != "/other/a/3" {
		t.Fatalf("All: %v", all)
	}
	all[0].path = "changed"
	if l.All()[0].path != "/api/a/1" {
		t.Error("All shares the log's memory")
	}
	for _, c := range []struct {
		method, pattern string
		want            int
	}{
		{"", "a/*", 2},
		{"get", "a/*", 1},
		{"", "**", 2}, // the call outside the API is never counted
		{"", "b/*", 0},
	} {
		if n := l.Count(c.method, c.pattern); n != c.want {
			t.Errorf("Count(%q, %q) = %d, want %d", c.method, c.pattern, n, c.want)
		}
	}
	l.Clear()
	if n := len(l.All()); n != 0 {
		t.Errorf("after Clear: %d entries", n)
	}
}

func TestLine(t *testing.T) {
	if got := Line("GET", "/a", nil, "", 200); got != "GET /a -> 200" {
		t.Errorf("no query: %q", got)
	}
	if got := Line("POST", "/a", url.Values{"b": {"1"}, "a": {"x y"}}, " [k1,k2]", 400); got != "POST /a?a=x+y&b=1 [k1,k2] -> 400" {
		t.Errorf("query and note: %q", got)
	}
}
