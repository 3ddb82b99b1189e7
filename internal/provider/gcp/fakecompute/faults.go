package fakecompute

import "strings"

// Always as a Fault's Times keeps the fault until Reset or ClearFaults.
const Always = -1

// Fault is a failure injected for the calls matching Method and Path.
//
// Path is matched segment by segment against the request path without
// "/compute/v1/": "*" matches one segment, a final "**" any rest, so
// "projects/*/zones/*/instances" is every insert and list of instances and
// "projects/*/zones/*/instances/**" every call on one. Method "" is any.
//
// Exactly one of Err and Async is set. Err answers the call at once (and
// changes nothing). Async lets a call that starts an operation pass the
// API's synchronous checks and then fail its operation: an insert creates
// no instance, a delete deletes nothing. A call that starts no operation
// ignores an Async fault.
type Fault struct {
	Method string
	Path   string
	Times  int // how many calls it hits; 0 is 1, Always is every call
	Err    *APIError
	Async  *AsyncError
}

func (f *Fault) matches(method, path string) bool {
	if f.Method != "" && !strings.EqualFold(f.Method, method) {
		return false
	}
	return matchPath(strings.Trim(f.Path, "/"), strings.Trim(strings.TrimPrefix(path, apiPrefix), "/"))
}

func matchPath(pattern, path string) bool {
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

// takeFault pops the first sync (async=false) or async fault matching the
// request, counting one use. Callers hold s.mu.
func (s *Server) takeFault(method, path string, async bool) *Fault {
	for i, f := range s.faults {
		if (f.Async != nil) != async || !f.matches(method, path) {
			continue
		}
		if f.Times != Always {
			f.Times--
			if f.Times <= 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return f
	}
	return nil
}
