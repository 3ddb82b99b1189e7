package fakecompute

import (
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/internal/fakehttp"
)

// Always as a Fault's Times keeps the fault until Reset or ClearFaults.
const Always = fakehttp.Always

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

// apiPath is a request path below /compute/v1/, as Fault paths are.
func apiPath(path string) string { return strings.TrimPrefix(path, apiPrefix) }

// requestTarget is where a logged call went, for Count.
func requestTarget(r Request) (string, string, bool) { return r.Method, apiPath(r.Path), true }

// FailNext queues f: the next f.Times calls matching it fail. Faults are
// tried in the order queued.
func (s *Server) FailNext(f Fault) {
	if (f.Err == nil) == (f.Async == nil) {
		panic("fakecompute: a Fault needs exactly one of Err and Async")
	}
	s.faults.Add(fakehttp.Pattern{Method: f.Method, Path: f.Path}, f.Times, &f)
}

// ClearFaults drops every queued fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// takeFault pops the first sync (async=false) or async fault matching the
// request, counting one use. Callers hold s.mu.
func (s *Server) takeFault(method, path string, async bool) *Fault {
	return s.faults.Take(method, apiPath(path), func(f *Fault) bool { return (f.Async != nil) == async })
}

// failWithFault fails op with an injected async fault; a quota fault quotes
// the limit of its metric in the operation's region.
func (s *Server) failWithFault(op *operation, e *AsyncError, c opContext) {
	c.limit = s.regionLimit(c.region, e.metric)
	op.fail(e, c)
}
