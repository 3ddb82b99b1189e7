package fakepve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

func taskStatus(t *testing.T, e *env, upid string) map[string]any {
	t.Helper()
	return e.ok("GET", "/nodes/pve1/tasks/"+upid+"/status", nil).dataMap(t)
}

func TestTaskRunsForItsPolls(t *testing.T) {
	e := newEnv(t)
	e.s.SetTaskPolls("qmclone", 3)
	upid := e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "101", "full", "1")).dataString(t)
	var seen []string
	for i := 0; i < 3; i++ {
		seen = append(seen, fmt.Sprint(taskStatus(t, e, upid)["status"]))
	}
	if fmt.Sprint(seen) != "[running running stopped]" {
		t.Fatalf("statuses %v: the third poll ends a 3-poll task", seen)
	}
	st := taskStatus(t, e, upid)
	user, tokenid := st["user"], st["tokenid"]
	if user != "root@pam" || tokenid != "egress-operator" || st["type"] != "qmclone" || st["id"] != "9000" || st["node"] != "pve1" {
		t.Fatalf("status fields %v", st)
	}
	if st["pid"] == nil || st["pstart"] == nil || fmt.Sprintf("%08X", int64(st["starttime"].(float64))) != strings.Split(upid, ":")[4] {
		t.Fatalf("pid/pstart/starttime %v do not match the UPID %s", st, upid)
	}

	// Advance counts as polls for every running task.
	a := e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t)
	e.s.SetTaskPolls("qmstop", 5)
	e.s.Advance(1)
	if taskStatus(t, e, a)["status"] != "stopped" {
		t.Fatalf("a 2-poll task after one step and one poll")
	}
	// Progress: a full clone logs qemu-img's transferred lines, one per poll.
	e.s.SetTaskPolls("qmclone", 4)
	c := e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "102", "full", "1")).dataString(t)
	e.waitOK("pve1", c)
	var progress []string
	for _, l := range e.ok("GET", "/nodes/pve1/tasks/"+c+"/log", nil).data(t).([]any) {
		if s := l.(map[string]any)["t"].(string); strings.HasPrefix(s, "transferred ") {
			progress = append(progress, s)
		}
	}
	if strings.Join(progress, "|") != "transferred 768.0 MiB of 3.0 GiB (25.00%)|transferred 1.5 GiB of 3.0 GiB (50.00%)|"+
		"transferred 2.2 GiB of 3.0 GiB (75.00%)|transferred 3.0 GiB of 3.0 GiB (100.00%)" {
		t.Fatalf("progress lines %q", progress)
	}
}

func TestTaskOutcomesAndLog(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "egress-a"}}})
	e := newEnv(t, WithWorld(w))
	e.s.SetTaskOutcome("qmstart", TaskOutcome{Error: "start failed: QEMU exited with code 1"})
	up := e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t)
	if ex := e.wait("pve1", up); ex != "start failed: QEMU exited with code 1" {
		t.Fatalf("exitstatus %q", ex)
	}
	if v, _ := e.s.VM(101); v.Running {
		t.Fatalf("a failed start started the VM")
	}
	e.s.SetTaskOutcome("qmstart", TaskOutcome{Warnings: 3})
	up = e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t)
	if ex := e.wait("pve1", up); ex != "WARNINGS: 3" {
		t.Fatalf("exitstatus %q", ex)
	}
	if v, _ := e.s.VM(101); !v.Running {
		t.Fatalf("WARNINGS is a success: the VM runs")
	}
	log := e.ok("GET", "/nodes/pve1/tasks/"+up+"/log", form("start", "1", "limit", "2")).json(t)
	lines := log["data"].([]any)
	if log["total"] != float64(4) || len(lines) != 2 || lines[0].(map[string]any)["n"] != float64(2) {
		t.Fatalf("log page: %v", log)
	}
	all := e.ok("GET", "/nodes/pve1/tasks/"+up+"/log", form("limit", "0")).data(t).([]any)
	if last := all[len(all)-1].(map[string]any)["t"]; len(all) != 4 || last != "TASK WARNINGS: 3" {
		t.Fatalf("whole log %v", all)
	}
	missing := "UPID:pve1:00000001:00000002:00000003:qmstart:101:root@pam!egress-operator:"
	if r := e.do("GET", "/nodes/pve1/tasks/"+missing+"/status", nil); paramErrors(t, r)["upid"] != "no such task" {
		t.Fatalf("unknown task: %s", r.body)
	}
	if l := e.ok("GET", "/nodes/pve1/tasks/"+missing+"/log", nil).json(t); fmt.Sprint(l["data"]) != "[map[n:1 t:unable to open file - No such file or directory]]" {
		t.Fatalf("log of an unknown task: %v", l)
	}

	// Another token sees the task only with Sys.Audit on the node.
	secret := e.s.SetTokenACL("ops@pve!ci", ACE{Path: "/", Privs: []string{"VM.Audit"}})
	r := e.doAuth("GET", "/nodes/pve1/tasks/"+up+"/status", nil, "PVEAPIToken=ops@pve!ci="+secret)
	if r.line != "403 Permission check failed (/nodes/pve1, Sys.Audit)" {
		t.Fatalf("foreign task: %s", r.line)
	}
}

// Faults: an error for the next N matching calls, a task outcome, and a
// hold that keeps the answer until Advance (the client may give up first).
func TestFaults(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "egress-a"}}})
	e := newEnv(t, WithWorld(w))
	e.s.FailNext(Fault{Method: "GET", Path: "nodes/*/qemu/*/config", Times: 2, Err: LockTimeout(0)})
	e.s.FailNext(Fault{Method: "GET", Path: "nodes/*/qemu/**", Err: &Error{Status: 500, Message: "VM {vmid} on {node}: injected\n"}})
	for i := 0; i < 2; i++ {
		if r := e.do("GET", "/nodes/pve1/qemu/101/config", nil); r.line != "500 can't lock file '/var/lock/qemu-server/lock-0.conf' - got timeout" {
			t.Fatalf("call %d: %s", i, r.line)
		}
	}
	if r := e.do("GET", "/nodes/pve1/qemu/101/status/current", nil); r.line != "500 VM 101 on pve1: injected" {
		t.Fatalf("placeholders: %s", r.line)
	}
	e.ok("GET", "/nodes/pve1/qemu/101/config", nil)

	e.s.FailNext(Fault{Path: "version", Times: Always, Err: Unreachable(596, "Connection timed out")})
	for i := 0; i < 3; i++ {
		if r := e.do("GET", "/version", nil); r.line != "596 Connection timed out" {
			t.Fatalf("Always, call %d: %s", i, r.line)
		}
	}
	e.s.ClearFaults()
	e.ok("GET", "/version", nil)

	e.s.FailNext(Fault{Method: "POST", Path: "nodes/pve1/qemu/101/status/start", Task: &TaskOutcome{Error: "boom"}, TaskPolls: 4})
	up := e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t)
	e.s.Advance(3)
	if st := taskStatus(t, e, up); st["exitstatus"] != "boom" {
		t.Fatalf("injected task outcome: %v", st)
	}

	// Hold: the call blocks until two steps passed; a client whose context
	// ends gets its error, the next held call its answer after Advance.
	e.s.FailNext(Fault{Path: "cluster/resources", Hold: 2, Times: 2})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.s.URL()+"/cluster/resources", nil)
		req.Header.Set("Authorization", e.tok)
		resp, err := e.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testenv.Eventually(t, "the call is held", func() bool { return e.s.Holding() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled held call: %v", err)
	}
	var wg sync.WaitGroup
	var got reply
	wg.Add(1)
	go func() {
		defer wg.Done()
		got = e.do("GET", "/cluster/resources", nil)
	}()
	testenv.Eventually(t, "the second call is held", func() bool { return e.s.Holding() == 2 })
	e.s.Advance(1)
	if e.s.Holding() != 2 {
		t.Fatalf("released after one of two steps")
	}
	e.s.Advance(1)
	wg.Wait()
	if got.status != 200 {
		t.Fatalf("held call after Advance: %s", got.line)
	}
	testenv.Eventually(t, "the abandoned call is released too", func() bool { return e.s.Holding() == 0 })
}
