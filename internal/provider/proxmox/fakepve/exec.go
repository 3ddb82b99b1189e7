package fakepve

import (
	"slices"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// Commands in the guest, as POST .../agent/exec and GET
// .../agent/exec-status reach them through qemu-ga's guest-exec and
// guest-exec-status.
//
// The guest runs only what the fake models: vrrp.ApplyPeers() (the argv
// compared exactly) writes its standard input (input-data) to
// vrrp.PeersPath and exits 0. Any other command exits 127 with the "not
// found" dash (Debian's /bin/sh) prints: for "sh -c <script>" it names
// the script's first word, for any other argv its argv[0], as if a shell
// had been asked to run it (the fake's simplification: the guest has no
// other program). Agent.Exec makes every command end otherwise, with no
// effect (a guest where the command fails).
//
// A command runs for SetExecPolls exec-status reads of its pid (default
// 1: the first read sees it exited) or Advance steps, and its effect is
// applied when it ends. qemu-ga forgets a command once a read has seen it
// exited, so a second read of its pid, like a read of a pid it never
// started, answers "Agent error: Invalid parameter 'pid'". A stop ends the
// guest's commands with the agent (and a restarted guest numbers its
// processes from the start again).

// ExecResult is how a command in the guest ends.
type ExecResult struct {
	ExitCode int
	// Signal, when > 0, killed the command: exec-status then says so
	// instead of an exit code.
	Signal int
	Stdout string
	Stderr string
}

// process is one command qemu-ga started (guest-exec) and has not yet
// been asked about after its end.
type process struct {
	pid    int
	left   int // status reads or Advance steps until it ends
	ended  bool
	result ExecResult
	effect func() // what the command does to the guest, applied when it ends
}

// firstGuestPID is the pid of a guest's first command after a boot (the
// fake's own number: a booted Debian has used a few hundred).
const firstGuestPID = 1187

// SetExecPolls sets how many exec-status reads (or Advance steps) a guest
// command runs for; n < 1 is 1, the default.
func (s *Server) SetExecPolls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.execPolls = max(n, 1)
}

// agentExec is POST .../agent/exec: the VM's config, then qemu_exec: the
// argv as guest-exec's path and arg, input-data base64 for qemu-ga (Perl's
// encode_base64 takes the decoded parameter's characters as octets, and
// dies on one above U+00FF), at least a command or input-data, then
// agent_cmd (assert_agent_available, guest-exec). The answer is
// {"pid": n}.
//
// Source: qemu-server src/PVE/API2/Qemu/Agent.pm exec and
// src/PVE/QemuServer/Agent.pm qemu_exec (2026-08-17 snapshot: command an
// array since 8.0, "api: switch agent api call to 'array' type";
// VM.GuestAgent.Unrestricted since 9.0, VM.Monitor before); qemu
// qga/commands.c qmp_guest_exec.
func (s *Server) agentExec(c *call) (any, *Error) {
	v, e := s.vmOn(c)
	if e != nil {
		return nil, e
	}
	argv := make([]string, 0, len(c.lists["command"]))
	for _, it := range c.lists["command"] {
		argv = append(argv, it.v)
	}
	input, hasInput := c.p["input-data"]
	var stdin []byte
	if hasInput {
		for _, r := range input {
			if r > 0xff {
				return nil, ExecWideCharacter()
			}
			stdin = append(stdin, byte(r))
		}
	}
	if len(argv) == 0 && !hasInput {
		return nil, ExecNothing()
	}
	if e := s.agentReady(v, "guest-exec"); e != nil {
		return nil, e
	}
	if len(argv) == 0 {
		// qemu_exec sends "path": null; QAPI's input visitor refuses it.
		return nil, AgentError("Invalid parameter type for 'path', expected: string")
	}
	p := s.spawn(v, argv, stdin)
	return obj{{"pid", p.pid}}, nil
}

// agentExecStatus is GET .../agent/exec-status: the VM's config, then
// agent_cmd (assert_agent_available, guest-exec-status). qemu-ga answers
// {"exited": false} while the command runs; once it ended, exited true,
// exitcode (or signal), and out-data and err-data (base64) when the
// command wrote any (out-truncated and err-truncated only past qemu-ga's
// 16 MiB, which the fake never reaches), and forgets the command. PVE
// decodes the outputs (octets, each one character in the JSON) and turns
// JSON booleans into 1 and 0.
//
// Source: qemu-server src/PVE/QemuServer/Agent.pm qemu_exec_status; qemu
// 7.2 qga/commands.c qmp_guest_exec_status (Debian 12's qemu-guest-agent;
// QERR_INVALID_PARAMETER "Invalid parameter '%s'" for an unknown pid).
func (s *Server) agentExecStatus(c *call) (any, *Error) {
	v, e := s.agentCommand(c, "guest-exec-status")
	if e != nil {
		return nil, e
	}
	pid := atoi(c.p["pid"])
	p := v.procs[pid]
	if p == nil {
		return nil, ExecPIDUnknown()
	}
	if !p.ended {
		s.tick(p)
	}
	if !p.ended {
		return obj{{"exited", 0}}, nil
	}
	delete(v.procs, pid)
	out := obj{{"exited", 1}}
	if p.result.Signal > 0 {
		out = append(out, field{"signal", p.result.Signal})
	} else {
		out = append(out, field{"exitcode", p.result.ExitCode})
	}
	if p.result.Stdout != "" {
		out = append(out, field{"out-data", octets([]byte(p.result.Stdout))})
	}
	if p.result.Stderr != "" {
		out = append(out, field{"err-data", octets([]byte(p.result.Stderr))})
	}
	return out, nil
}

// spawn starts argv in v's guest with stdin on its standard input.
func (s *Server) spawn(v *vm, argv []string, stdin []byte) *process {
	if v.procs == nil {
		v.procs = map[int]*process{}
		v.nextPID = firstGuestPID
	}
	p := &process{pid: v.nextPID, left: s.knobs.execPolls}
	v.nextPID++
	v.procs[p.pid] = p
	switch {
	case v.agent.Exec != nil:
		p.result = *v.agent.Exec
	case slices.Equal(argv, vrrp.ApplyPeers()):
		p.effect = func() { v.writeFile(vrrp.PeersPath, stdin) }
	default:
		p.result = notFound(argv)
	}
	return p
}

// tick counts one status read or Advance step of a running command; the
// one that reaches its count ends it.
func (s *Server) tick(p *process) {
	p.left--
	if p.left > 0 {
		return
	}
	p.ended = true
	if p.effect != nil {
		p.effect()
	}
}

// notFound is how dash ends a command it cannot find: exit 127 and
// "$0: <line>: <name>: not found"; an empty script does nothing.
func notFound(argv []string) ExecResult {
	name, shell := argv[0], "/bin/sh"
	if len(argv) >= 3 && (argv[0] == "/bin/sh" || argv[0] == "sh" || argv[0] == "/usr/bin/sh") && argv[1] == "-c" {
		words := strings.Fields(argv[2])
		if len(words) == 0 {
			return ExecResult{}
		}
		name, shell = words[0], argv[0]
	}
	return ExecResult{ExitCode: 127, Stderr: shell + ": 1: " + name + ": not found\n"}
}

// octets is a string of bytes as Perl's JSON encoder writes one it did not
// decode: each byte one character.
func octets(b []byte) string {
	var out strings.Builder
	for _, c := range b {
		out.WriteRune(rune(c))
	}
	return out.String()
}
