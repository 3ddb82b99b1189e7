package fakepve

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/internal/fakehttp"

// Always as a Fault's Times keeps it until Reset or ClearFaults.
const Always = fakehttp.Always

// Fault changes the next Times calls matching Method and Path.
//
// Path is matched segment by segment against the path below /api2/json:
// "*" matches one segment, a final "**" any rest, so
// "nodes/*/qemu/*/status/*" is every power action and "nodes/*/qemu/**"
// every VM call. Method "" is any. Faults are tried in the order queued;
// the first that matches is used (one per call).
//
// Hold keeps the answer back until that many Advance steps have passed
// (the caller blocks; its context may end meanwhile), so a slow PVE is
// modelled without wall-clock sleeps; Holding says how many calls wait.
// Then Err, if set, is the answer (nothing changes). Otherwise the call
// runs; a task it starts ends with Task (when set) after TaskPolls polls
// (when > 0) instead of the knobs' values.
type Fault struct {
	Method    string
	Path      string
	Times     int // 0 is 1; Always is every call
	Hold      int
	Err       *Error
	Task      *TaskOutcome
	TaskPolls int
}

// FailNext queues f.
func (s *Server) FailNext(f Fault) {
	if f.Hold == 0 && f.Err == nil && f.Task == nil && f.TaskPolls == 0 {
		panic("fakepve: a Fault needs Hold, Err, Task or TaskPolls")
	}
	s.faults.Add(fakehttp.Pattern{Method: f.Method, Path: f.Path}, f.Times, &f)
}

// ClearFaults drops every queued fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// Holding is how many calls a Hold fault keeps waiting now.
func (s *Server) Holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding
}

// takeFault pops the first fault matching the call, counting one use.
// Callers hold s.mu.
func (s *Server) takeFault(method, rel string) *Fault { return s.faults.Take(method, rel, nil) }
