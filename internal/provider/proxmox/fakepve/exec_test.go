package fakepve

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// execForm is agent/exec's form: the command as repeated values (an
// array since pve-http-server 2023-06), input-data when given.
func execForm(argv []string, input ...string) url.Values {
	v := url.Values{"command": argv}
	for _, in := range input {
		v.Set("input-data", in)
	}
	return v
}

func (e *env) exec(vmid string, form url.Values) reply {
	e.t.Helper()
	return e.do("POST", "/nodes/pve1/qemu/"+vmid+"/agent/exec", form)
}

func (e *env) execStatus(vmid string, pid any) reply {
	e.t.Helper()
	return e.do("GET", "/nodes/pve1/qemu/"+vmid+"/agent/exec-status", form("pid", fmt.Sprint(pid)))
}

// postJSON posts body as application/json.
func (e *env) postJSON(path, body string) reply {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.s.URL()+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", e.tok)
	req.Header.Set("Content-Type", "application/json")
	return e.send(req)
}

// exec's and exec-status' parameters as qemu-server declares them, and
// arrays as pve-http-server and RESTHandler take them: repeated form
// keys and JSON arrays are arrays, one value given for an array is an
// array of one unless Perl calls it false, an array given for a string
// is refused.
func TestExecParameters(t *testing.T) {
	w := DefaultWorld()
	withVM101(true)(&w)
	e := newEnv(t, WithWorld(w))
	exec := "/nodes/pve1/qemu/101/agent/exec"
	for _, c := range []struct {
		name       string
		send       func() reply
		param, msg string
	}{
		{"no command", func() reply { return e.exec("101", url.Values{"input-data": {"x"}}) },
			"command", "property is missing and it is not optional"},
		{"an empty command", func() reply { return e.exec("101", url.Values{"command": {""}}) },
			"command", "type check ('array') failed"},
		{"command 0", func() reply { return e.exec("101", url.Values{"command": {"0"}}) },
			"command", "type check ('array') failed"},
		{"an unknown parameter", func() reply { return e.exec("101", url.Values{"command": {"ls"}, "timeout": {"5"}}) },
			"timeout", "property is not defined in schema and the schema does not allow additional properties"},
		{"repeated input-data", func() reply { return e.exec("101", url.Values{"command": {"ls"}, "input-data": {"a", "b"}}) },
			"input-data", "type check ('string') failed - got ARRAY"},
		{"a JSON boolean element", func() reply { return e.postJSON(exec, `{"command":["/bin/sh",true]}`) },
			"command[1]", "type check ('string') failed - got JSON::PP::Boolean"},
		{"a JSON array element", func() reply { return e.postJSON(exec, `{"command":[["ls"]]}`) },
			"command[0]", "type check ('string') failed - got ARRAY"},
		{"a JSON null element", func() reply { return e.postJSON(exec, `{"command":["ls",null]}`) },
			"command[1]", "property is missing and it is not optional"},
		{"no pid", func() reply { return e.do("GET", "/nodes/pve1/qemu/101/agent/exec-status", nil) },
			"pid", "property is missing and it is not optional"},
		{"a pid that is no integer", func() reply { return e.execStatus("101", "abc") },
			"pid", "type check ('integer') failed - got 'abc'"},
		{"two pids", func() reply {
			return e.do("GET", "/nodes/pve1/qemu/101/agent/exec-status", url.Values{"pid": {"1", "2"}})
		}, "pid", "type check ('integer') failed - got ARRAY"},
		// The same rules on an older endpoint: a repeated string.
		{"a repeated name", func() reply {
			return e.do("POST", "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"101"}, "name": {"a", "b"}})
		}, "name", "type check ('string') failed - got ARRAY"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := paramErrors(t, c.send())
			if errs[c.param] != c.msg || len(errs) != 1 {
				t.Errorf("errors %q, want only %s: %q", errs, c.param, c.msg)
			}
		})
	}
	if n := e.s.Count("POST", "nodes/*/qemu/*/agent/exec"); n == 0 {
		t.Fatal("the exec calls were not logged")
	}
}

// What exec and exec-status answer, as PVE with a Debian 12 guest: the
// pid; {"exited":0} while the command runs; its end (exit code or
// signal, the outputs decoded) once, then the pid is unknown. The guest
// runs vrrp.ApplyPeers (its stdin becomes the peers file); everything
// else is not found. The agent's and the VM's states answer as every
// agent call does.
func TestExec(t *testing.T) {
	peers := "unicast_src_ip 192.0.2.11\nunicast_peer {\n    192.0.2.12\n}\n"
	apply := execForm(vrrp.ApplyPeers(), peers)
	type read struct {
		line, body string // body "" is not compared
	}
	ok := func(body string) read { return read{"200 OK", body} }
	unknownPID := read{"500 Agent error: Invalid parameter 'pid'", ""}
	for _, c := range []struct {
		name     string
		setup    func(e *env)
		form     url.Values
		execLine string // exec's status line; "" is 200 and then the reads
		reads    []read // exec-status of the pid exec answered, in order
		advance  int    // Advance steps between exec and the reads
		file     string // vrrp.PeersPath afterwards; "-" none
	}{
		{name: "ApplyPeers writes its input", form: apply,
			reads: []read{ok(`{"data":{"exited":1,"exitcode":0}}`), unknownPID}, file: peers},
		{name: "ApplyPeers without input writes an empty file", form: execForm(vrrp.ApplyPeers()),
			reads: []read{ok(`{"data":{"exited":1,"exitcode":0}}`)}, file: ""},
		{name: "a command that runs for three reads",
			setup: func(e *env) { e.s.SetExecPolls(3) }, form: apply,
			reads: []read{ok(`{"data":{"exited":0}}`), ok(`{"data":{"exited":0}}`), ok(`{"data":{"exited":1,"exitcode":0}}`), unknownPID},
			file:  peers},
		{name: "Advance steps count as reads",
			setup: func(e *env) { e.s.SetExecPolls(3) }, form: apply, advance: 3,
			reads: []read{ok(`{"data":{"exited":1,"exitcode":0}}`)}, file: peers},
		{name: "another script is not found", form: execForm([]string{"/bin/sh", "-c", "frobnicate --now"}),
			reads: []read{ok(`{"data":{"exited":1,"exitcode":127,"err-data":"/bin/sh: 1: frobnicate: not found\n"}}`)}, file: "-"},
		{name: "another program is not found", form: execForm([]string{"ls", "/"}),
			reads: []read{ok(`{"data":{"exited":1,"exitcode":127,"err-data":"/bin/sh: 1: ls: not found\n"}}`)}, file: "-"},
		{name: "ApplyPeers' argv with one more argument is another command",
			form:  execForm(append(vrrp.ApplyPeers(), "x"), peers),
			reads: []read{ok("")}, file: "-"},
		{name: "an empty script does nothing", form: execForm([]string{"/bin/sh", "-c", " "}),
			reads: []read{ok(`{"data":{"exited":1,"exitcode":0}}`)}, file: "-"},
		{name: "a command that fails in the guest",
			setup: func(e *env) {
				e.s.SetAgent(101, Agent{Exec: &ExecResult{ExitCode: 2, Stdout: "a\xff", Stderr: "cannot create x: Read-only file system\n"}})
			},
			form:  apply,
			reads: []read{ok("{\"data\":{\"exited\":1,\"exitcode\":2,\"out-data\":\"a\u00ff\",\"err-data\":\"cannot create x: Read-only file system\\n\"}}")},
			file:  "-"},
		{name: "a command killed by a signal",
			setup: func(e *env) { e.s.SetAgent(101, Agent{Exec: &ExecResult{Signal: 9}}) }, form: apply,
			reads: []read{ok(`{"data":{"exited":1,"signal":9}}`)}, file: "-"},
		{name: "a stop ends the command",
			setup: func(e *env) { e.s.SetExecPolls(2) }, form: apply, advance: -1,
			reads: []read{{"500 VM 101 is not running", ""}}, file: "-"},
		{name: "a VM that does not run", setup: func(e *env) { e.s.SetVMRunning(101, "") }, form: apply,
			execLine: "500 VM 101 is not running", file: "-"},
		{name: "an agent that does not run", setup: func(e *env) { e.s.SetAgent(101, Agent{Mode: AgentNotRunning}) }, form: apply,
			execLine: "500 QEMU guest agent is not running", file: "-"},
		{name: "an agent that times out", setup: func(e *env) { e.s.SetAgent(101, Agent{Mode: AgentQMPTimeout}) }, form: apply,
			execLine: "500 qmp command 'guest-exec' failed - got timeout", file: "-"},
		{name: "without VM.GuestAgent.Unrestricted",
			setup: func(e *env) { e.s.Revoke(DefaultTokenID, "/vms/101", "VM.GuestAgent.Unrestricted") }, form: apply,
			execLine: "403 Permission check failed (/vms/101, VM.GuestAgent.Unrestricted)", file: "-"},
		{name: "input-data beyond Latin-1", form: execForm(vrrp.ApplyPeers(), "peer \u2603\n"),
			execLine: "500 Wide character in subroutine entry at /usr/share/perl5/PVE/QemuServer/Agent.pm line 135.", file: "-"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := DefaultWorld()
			withVM101(true)(&w)
			e := newEnv(t, WithWorld(w))
			if c.setup != nil {
				c.setup(e)
			}
			r := e.exec("101", c.form)
			if c.execLine != "" {
				if r.line != c.execLine {
					t.Fatalf("exec: %s %s, want %s", r.line, r.body, c.execLine)
				}
			} else {
				if r.status != 200 || string(r.body) != fmt.Sprintf(`{"data":{"pid":%d}}`, firstGuestPID) {
					t.Fatalf("exec: %s %s, want the guest's first pid", r.line, r.body)
				}
				switch {
				case c.advance > 0:
					e.s.Advance(c.advance)
				case c.advance < 0:
					e.s.SetVMRunning(101, "")
				}
				for i, want := range c.reads {
					r := e.execStatus("101", firstGuestPID)
					if r.line != want.line || want.body != "" && string(r.body) != want.body {
						t.Fatalf("exec-status read %d: %s %s, want %s %s", i+1, r.line, r.body, want.line, want.body)
					}
				}
			}
			got, found := e.s.GuestFile(101, vrrp.PeersPath)
			switch {
			case c.file == "-" && found:
				t.Errorf("%s written: %q", vrrp.PeersPath, got)
			case c.file != "-" && (!found || string(got) != c.file):
				t.Errorf("%s = %q (found %v), want %q", vrrp.PeersPath, got, found, c.file)
			}
		})
	}
}

// exec-status' own refusals: a pid the agent never started, a missing
// VM, a stopped one, an agent that does not answer or times out, the
// privilege; pids count up and start again after a reboot.
func TestExecStatus(t *testing.T) {
	cases := []struct {
		name  string
		setup func(e *env)
		vmid  string
		pid   int
		line  string
	}{
		{"an unknown pid", nil, "101", 4242, "500 Agent error: Invalid parameter 'pid'"},
		{"a missing VM", nil, "999", firstGuestPID, "500 Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"},
		{"a VM without an agent", nil, "102", firstGuestPID, "500 No QEMU guest agent configured"},
		{"a stopped VM", func(e *env) { e.s.SetVMRunning(101, "") }, "101", firstGuestPID, "500 VM 101 is not running"},
		{"an agent that does not run", func(e *env) { e.s.SetAgent(101, Agent{Mode: AgentNotRunning}) }, "101", firstGuestPID,
			"500 QEMU guest agent is not running"},
		{"an agent that times out", func(e *env) { e.s.SetAgent(101, Agent{Mode: AgentQMPTimeout}) }, "101", firstGuestPID,
			"500 qmp command 'guest-exec-status' failed - got timeout"},
		{"without VM.GuestAgent.Unrestricted", func(e *env) {
			e.s.Revoke(DefaultTokenID, "/vms/101", "VM.GuestAgent.Unrestricted")
		}, "101", firstGuestPID, "403 Permission check failed (/vms/101, VM.GuestAgent.Unrestricted)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := DefaultWorld()
			withVM101(true)(&w)
			withVM101NoAgent(&w)
			w.VMs[len(w.VMs)-1].VMID = 102
			e := newEnv(t, WithWorld(w))
			e.s.SetExecPolls(5)
			if r := e.exec("101", execForm(vrrp.ApplyPeers(), "x")); r.status != 200 {
				t.Fatalf("exec: %s", r.line)
			}
			if c.setup != nil {
				c.setup(e)
			}
			if r := e.execStatus(c.vmid, c.pid); r.line != c.line {
				t.Errorf("exec-status: %s %s, want %s", r.line, r.body, c.line)
			}
		})
	}

	t.Run("pids", func(t *testing.T) {
		w := DefaultWorld()
		withVM101(true)(&w)
		e := newEnv(t, WithWorld(w))
		pid := func() float64 {
			t.Helper()
			r := e.exec("101", execForm([]string{"true"}))
			if r.status != 200 {
				t.Fatalf("exec: %s", r.line)
			}
			return r.dataMap(t)["pid"].(float64)
		}
		if a, b := pid(), pid(); a != firstGuestPID || b != firstGuestPID+1 {
			t.Fatalf("pids %v, %v; want %d, %d", a, b, firstGuestPID, firstGuestPID+1)
		}
		e.s.SetVMRunning(101, "")
		e.s.SetVMRunning(101, "running")
		if r := e.execStatus("101", firstGuestPID+1); r.line != "500 Agent error: Invalid parameter 'pid'" {
			t.Fatalf("a command from before the reboot: %s", r.line)
		}
		if p := pid(); p != firstGuestPID {
			t.Fatalf("the first pid after a reboot: %v", p)
		}
	})

	t.Run("a JSON body", func(t *testing.T) {
		w := DefaultWorld()
		withVM101(true)(&w)
		e := newEnv(t, WithWorld(w))
		if r := e.postJSON("/nodes/pve1/qemu/101/agent/exec", `{"command":[]}`); r.line != "500 command or input-data (or both) required" {
			t.Fatalf("an empty command: %s", r.line)
		}
		r := e.postJSON("/nodes/pve1/qemu/101/agent/exec", `{"command":["/bin/sh","-c",`+fmt.Sprintf("%q", vrrp.ApplyPeers()[2])+`],"input-data":"peers\n"}`)
		if r.status != 200 {
			t.Fatalf("exec with a JSON body: %s %s", r.line, r.body)
		}
		if r := e.execStatus("101", firstGuestPID); string(r.body) != `{"data":{"exited":1,"exitcode":0}}` {
			t.Fatalf("exec-status: %s %s", r.line, r.body)
		}
		if got, _ := e.s.GuestFile(101, vrrp.PeersPath); string(got) != "peers\n" {
			t.Fatalf("peers file %q", got)
		}
	})
}
