package fakehttp

import (
	"slices"
	"testing"
)

type fault struct {
	name  string
	async bool
}

func takeName(q *Faults[fault], method, path string, accept func(*fault) bool) string {
	if f := q.Take(method, path, accept); f != nil {
		return f.name
	}
	return ""
}

func TestFaultsTimesAndOrder(t *testing.T) {
	var q Faults[fault]
	q.Add(Pattern{Method: "POST", Path: "a/*"}, 0, &fault{name: "once"})
	q.Add(Pattern{Path: "a/**"}, 2, &fault{name: "twice"})
	q.Add(Pattern{Path: "b"}, Always, &fault{name: "always"})

	var got []string
	for range 4 {
		got = append(got, takeName(&q, "POST", "/a/x", nil))
	}
	if want := []string{"once", "twice", "twice", ""}; !slices.Equal(got, want) {
		t.Errorf("takes of POST a/x: %q, want %q", got, want)
	}
	for i := range 5 {
		if n := takeName(&q, "GET", "b", nil); n != "always" {
			t.Fatalf("take %d of GET b: %q, want always", i, n)
		}
	}
	if n := takeName(&q, "GET", "c", nil); n != "" {
		t.Errorf("GET c took %q, want none", n)
	}
	q.Clear()
	if n := takeName(&q, "GET", "b", nil); n != "" {
		t.Errorf("after Clear GET b took %q, want none", n)
	}
}

func TestFaultsAccept(t *testing.T) {
	var q Faults[fault]
	q.Add(Pattern{Path: "**"}, 0, &fault{name: "sync"})
	q.Add(Pattern{Path: "**"}, 0, &fault{name: "async", async: true})
	isAsync := func(f *fault) bool { return f.async }
	if n := takeName(&q, "POST", "x", isAsync); n != "async" {
		t.Errorf("async take: %q, want async (the sync one skipped)", n)
	}
	if n := takeName(&q, "POST", "x", isAsync); n != "" {
		t.Errorf("second async take: %q, want none", n)
	}
	if n := takeName(&q, "POST", "x", nil); n != "sync" {
		t.Errorf("any take: %q, want sync (still queued)", n)
	}
}
