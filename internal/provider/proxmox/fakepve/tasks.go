package fakepve

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Tasks. Every asynchronous call forks a worker in PVE and answers its
// UPID (pve-common UPID.pm encode):
//
//	UPID:<node>:<pid %08X>:<pstart %08X>:<starttime %08X>:<type>:<id>:<user>:
//
// with the API token as user ("root@pam!egress-operator"); the status call
// splits it into user and tokenid (pve-manager API2/Tasks.pm
// $convert_token_task). A task runs for a number of polls: each GET of its
// status and each Advance step counts one, and the poll that reaches the
// number answers it stopped, with exitstatus "OK", "WARNINGS: <n>" (a
// success) or the error: the worker's die message on one line, as
// fork_worker writes "TASK ERROR: <msg>" and read_status reads it back.
//
// A worker that dies on its first checks (start of a running VM, destroy
// of a locked one, ...) has ended before the first poll. A worker that
// needs the VM's config lock while another task holds it waits; after
// lockWaitPolls polls (10, lock_file_full's 10 s at a poll per second) it
// ends "can't lock file ... - got timeout".

// TaskOutcome is how a task ends; the zero value is "OK".
type TaskOutcome struct {
	Warnings int    // > 0: "WARNINGS: <n>", a success, with n WARN lines in the log
	Error    string // non-empty: the exitstatus; the task's effect is not applied
}

type taskState int

const (
	taskWaiting taskState = iota // for the VM's config lock
	taskRunning
	taskDone
)

type task struct {
	upid            string
	node            string
	pid, pstart     int64
	start           int64
	typ, id, authID string
	vmid            int // whose config lock it takes (0: none)
	polls           int // polls left
	state           taskState
	waitLeft        int
	exit            string
	lines           []string
	outcome         TaskOutcome
	check           func() string // the worker's first checks; a message fails it at once
	onStart         func()
	onEnd           func() // the effect, on success
	onFail          func() // the cleanup, on failure after onStart
	progress        func(done, total int)
	total           int
	okLine          string
	started         bool
}

func (t *task) log(line string) { t.lines = append(t.lines, line) }

// newTask makes a task of the call (not started: set its hooks, then
// launch it). polls 0 takes the type's knob (or an injected TaskPolls).
func (s *Server) newTask(c *call, typ, id string, vmid int) *task {
	s.pidSeq++
	pid := int64(s.pidSeq)
	t := &task{node: c.node, pid: pid, pstart: 0x06E0D1C1 + s.step*100 + pid%97, start: s.now().Unix(),
		typ: typ, id: id, authID: c.req.authID, vmid: vmid}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", t.node, t.pid, t.pstart, t.start, typ, id, t.authID)
	t.polls = 2
	if n, ok := s.knobs.taskPolls[typ]; ok {
		t.polls = n
	}
	if o, ok := s.knobs.taskOutcome[typ]; ok {
		t.outcome = o
	}
	if f := c.fault; f != nil {
		if f.TaskPolls > 0 {
			t.polls = f.TaskPolls
		}
		if f.Task != nil {
			t.outcome = *f.Task
		}
	}
	t.total = t.polls
	s.tasks[t.upid] = t
	return t
}

// launch starts t (or queues it behind the VM's lock holder) and returns
// its UPID.
func (s *Server) launch(t *task) string {
	s.running = append(s.running, t)
	if v := s.vms[t.vmid]; t.vmid != 0 && v != nil && v.flock != nil && v.flock != t && v.flock.state != taskDone {
		t.state = taskWaiting
		t.waitLeft = s.knobs.lockWaitPolls
		return t.upid
	}
	s.begin(t)
	return t.upid
}

func (s *Server) begin(t *task) {
	t.state = taskRunning
	if t.check != nil {
		if msg := t.check(); msg != "" {
			s.end(t, msg)
			return
		}
	}
	if v := s.vms[t.vmid]; t.vmid != 0 && v != nil {
		v.flock = t
	}
	t.started = true
	if t.onStart != nil {
		t.onStart()
	}
	if t.polls <= 0 {
		s.finish(t)
	}
}

// poll moves t one poll on.
func (s *Server) poll(t *task) {
	switch t.state {
	case taskWaiting:
		v := s.vms[t.vmid]
		if v == nil || v.flock == nil || v.flock.state == taskDone {
			s.begin(t)
			return
		}
		t.waitLeft--
		if t.waitLeft <= 0 {
			t.log("trying to acquire lock...")
			s.end(t, strings.TrimSuffix(LockTimeout(t.vmid).Message, "\n"))
		}
	case taskRunning:
		t.polls--
		if t.progress != nil {
			t.progress(t.total-t.polls, t.total)
		}
		if t.polls <= 0 {
			s.finish(t)
		}
	}
}

// finish ends a task that ran its polls, with its outcome.
func (s *Server) finish(t *task) {
	if t.outcome.Error != "" {
		if t.onFail != nil {
			t.onFail()
		}
		s.end(t, t.outcome.Error)
		return
	}
	if t.onEnd != nil {
		t.onEnd()
	}
	if t.okLine != "" {
		t.log(t.okLine)
	}
	for i := 1; i <= t.outcome.Warnings; i++ {
		t.log(fmt.Sprintf("WARN: warning %d raised by the fake", i))
	}
	s.end(t, "")
}

// end marks t stopped with an error message ("" for success) and releases
// its lock.
func (s *Server) end(t *task, errMsg string) {
	switch {
	case errMsg != "":
		t.exit = strings.ReplaceAll(strings.TrimRight(errMsg, "\n"), "\n", " ")
		t.log("TASK ERROR: " + t.exit)
	case t.outcome.Warnings > 0:
		t.exit = fmt.Sprintf("WARNINGS: %d", t.outcome.Warnings)
		t.log("TASK " + t.exit)
	default:
		t.exit = "OK"
		t.log("TASK OK")
	}
	t.state = taskDone
	for i, r := range s.running {
		if r == t {
			s.running = append(s.running[:i:i], s.running[i+1:]...)
			break
		}
	}
	if v := s.vms[t.vmid]; t.vmid != 0 && v != nil && v.flock == t {
		v.flock = nil
		for _, w := range append([]*task(nil), s.running...) {
			if w.state == taskWaiting && w.vmid == t.vmid {
				s.begin(w)
				break
			}
		}
	}
}

// waitBriefly is the background_delay/delay parameter of config updates and
// volume deletes: PVE waits up to that many seconds (a poll each here) and
// answers null when the task ended well, dies with its status when it
// failed, and answers the UPID when it still runs. failFmt wraps the
// status ("%s" for none).
func (s *Server) waitBriefly(t *task, delay string, failFmt string) (any, *Error) {
	n := atoi(delay)
	for i := 0; i < n && t.state != taskDone; i++ {
		s.poll(t)
	}
	if t.state != taskDone {
		return t.upid, nil
	}
	if t.exit == "OK" || strings.HasPrefix(t.exit, "WARNINGS: ") {
		return nil, nil
	}
	return nil, die(failFmt+"\n", t.exit)
}

// ---- knobs ----

// SetTaskPolls sets how many polls tasks of type (qmclone, qmconfig,
// resize, qmstart, qmstop, qmshutdown, qmpause, qmsuspend, qmresume,
// qmdestroy, imgcopy, imgdel) started from now on run; 0 ends them when
// they start. Default 2.
func (s *Server) SetTaskPolls(typ string, polls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.taskPolls[typ] = polls
}

// SetTaskOutcome makes every task of type started from now on end with o.
func (s *Server) SetTaskOutcome(typ string, o TaskOutcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.taskOutcome[typ] = o
}

// SetLockWaitPolls sets how many polls a task waits for a VM's config lock
// before it fails with the lock timeout. Default 10.
func (s *Server) SetLockWaitPolls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.lockWaitPolls = n
}

// Advance moves the fake steps on: every task one poll per step, agents
// booting, /cluster/resources statistics (SetStatsInterval), VM uptimes,
// and calls held by a Hold fault.
func (s *Server) Advance(steps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < steps; i++ {
		s.step++
		for _, t := range append([]*task(nil), s.running...) {
			if t.state != taskDone {
				s.poll(t)
			}
		}
		for _, v := range s.vms {
			if v.running {
				v.stats.Uptime++
				if v.agentWait > 0 {
					v.agentWait--
				}
				for _, p := range v.procs {
					if !p.ended {
						s.tick(p)
					}
				}
			}
		}
		if n := s.knobs.statsInterval; n > 0 && s.step%int64(n) == 0 {
			s.snapshotStatsLocked()
		}
	}
	s.cond.Broadcast()
}

// EndSoon makes every running task of type typ end at its next poll: a
// test holds tasks (a large SetTaskPolls) until it saw what it waits for,
// then lets them go, instead of racing a fixed number of polls.
func (s *Server) EndSoon(typ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.running {
		if t.typ == typ && t.state == taskRunning && t.polls > 1 {
			t.polls = 1
		}
	}
}

// Settle runs every task to its end.
func (s *Server) Settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for guard := 0; len(s.running) > 0 && guard < 100000; guard++ {
		for _, t := range append([]*task(nil), s.running...) {
			if t.state != taskDone {
				s.poll(t)
			}
		}
	}
}

// StartClock advances the fake one step every interval until stop is
// called: for tests (a reconciler against envtest) that cannot step the
// fake in lockstep. Assertions never depend on it.
func (s *Server) StartClock(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				s.Advance(1)
			}
		}
	}()
	var once bool
	return func() {
		if !once {
			once = true
			close(done)
		}
	}
}

// TaskInfo is a task as the fake keeps it.
type TaskInfo struct {
	UPID, Node, Type, ID, User string
	Running                    bool
	ExitStatus                 string
	Log                        []string
}

// Tasks lists every task, oldest first.
func (s *Server) Tasks() []TaskInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ts []*task
	for _, t := range s.tasks {
		ts = append(ts, t)
	}
	sortTasks(ts)
	out := make([]TaskInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, TaskInfo{UPID: t.upid, Node: t.node, Type: t.typ, ID: t.id, User: t.authID,
			Running: t.state != taskDone, ExitStatus: t.exit, Log: append([]string(nil), t.lines...)})
	}
	return out
}

func sortTasks(ts []*task) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].pid < ts[j-1].pid; j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// ---- handlers ----

var reUPID = regexp.MustCompile(`^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$`)

// taskFor finds the call's task: a UPID that parses, of a task on this node.
func (s *Server) taskFor(c *call, needFile bool) (*task, *Error) {
	upid := c.p["upid"]
	if !reUPID.MatchString(upid) {
		return nil, ParamErrors(map[string]string{"upid": "unable to parse worker upid"})
	}
	t := s.tasks[upid]
	if t == nil || t.node != c.node {
		if needFile {
			return nil, ParamErrors(map[string]string{"upid": "no such task"})
		}
		return nil, nil
	}
	if e := s.checkTaskUser(c, t); e != nil {
		return nil, e
	}
	return t, nil
}

// checkTaskUser is Tasks.pm $check_task_user: a token sees its own tasks,
// others need Sys.Audit on the node.
func (s *Server) checkTaskUser(c *call, t *task) *Error {
	if t.authID == c.req.authID {
		return nil
	}
	return s.check(c.req.authID, "/nodes/"+c.node, false, "Sys.Audit")
}

func (s *Server) taskStatus(c *call) (any, *Error) {
	t, e := s.taskFor(c, true)
	if e != nil {
		return nil, e
	}
	if t.state != taskDone {
		s.poll(t)
	}
	user, token := splitTokenID(t.authID)
	o := obj{{"upid", t.upid}, {"node", t.node}, {"pid", t.pid}, {"pstart", t.pstart}, {"starttime", t.start},
		{"type", t.typ}, {"id", t.id}, {"user", user}}
	if token != "" {
		o = append(o, field{"tokenid", token})
	}
	if t.state == taskDone {
		o = append(o, field{"status", "stopped"}, field{"exitstatus", t.exit})
	} else {
		o = append(o, field{"status", "running"})
	}
	return o, nil
}

func (s *Server) taskLog(c *call) (any, *Error) {
	t, e := s.taskFor(c, false)
	if e != nil {
		return nil, e
	}
	if c.p["download"] == "1" {
		if _, ok := c.p["start"]; ok {
			return nil, die("'download' cannot be used together with 'start' or 'limit' parameters\n")
		}
		if _, ok := c.p["limit"]; ok {
			return nil, die("'download' cannot be used together with 'start' or 'limit' parameters\n")
		}
	}
	var lines []string
	if t == nil {
		lines = []string{"unable to open file - No such file or directory"}
	} else {
		lines = t.lines
	}
	start, limit := 0, 50
	if v, ok := c.p["start"]; ok {
		start, _ = strconv.Atoi(v)
	}
	if v, ok := c.p["limit"]; ok {
		limit, _ = strconv.Atoi(v)
	}
	out := []any{}
	count := 0
	for _, l := range lines {
		count++
		if count <= start {
			continue
		}
		if limit != 0 {
			if len(out) >= limit {
				continue
			}
		}
		out = append(out, obj{{"n", count}, {"t", l}})
	}
	if count == 0 {
		count = 1
		out = append(out, obj{{"n", 1}, {"t", "no content"}})
	}
	c.total = &count
	return out, nil
}
