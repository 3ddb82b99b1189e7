package fakehttp

import "strings"

// Pattern selects calls. Method "" is any method, matched without regard
// to case. Path is matched segment by segment against the call's path
// below the API's base (the fake strips the base): "*" matches one
// segment, a final "**" any rest, none included. Slashes at either end
// are ignored on both sides.
type Pattern struct {
	Method string
	Path   string
}

// Matches says whether a call of method on path (below the API's base)
// is one p selects.
func (p Pattern) Matches(method, path string) bool {
	if p.Method != "" && !strings.EqualFold(p.Method, method) {
		return false
	}
	return MatchPath(strings.Trim(p.Path, "/"), strings.Trim(path, "/"))
}

// MatchPath matches path against pattern segment by segment (see
// Pattern); neither has slashes at its ends.
func MatchPath(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	for i, p := range ps {
		if p == "**" && i == len(ps)-1 {
			return len(xs) >= i
		}
		if i >= len(xs) || (p != "*" && p != xs[i]) {
			return false
		}
	}
	return len(ps) == len(xs)
}
