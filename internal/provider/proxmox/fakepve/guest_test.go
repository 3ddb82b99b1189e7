package fakepve

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

func fileRead(e *env, vmid string, kv ...string) reply {
	e.t.Helper()
	return e.do("GET", "/nodes/pve1/qemu/"+vmid+"/agent/file-read", form(kv...))
}

// file-read's parameters as qemu-server 9.2.6 declares them: file
// required; count 1..16 MiB; decode a boolean; offset from 0; nothing else.
func TestFileReadParameters(t *testing.T) {
	w := DefaultWorld()
	withVM101(true)(&w)
	e := newEnv(t, WithWorld(w))
	for _, c := range []struct {
		form       []string
		param, msg string
	}{
		{nil, "file", "property is missing and it is not optional"},
		{[]string{"file", "/etc/hostname", "count", "0"}, "count", "value must have a minimum value of 1"},
		{[]string{"file", "/etc/hostname", "count", "16777217"}, "count", "value must have a maximum value of 16777216"},
		{[]string{"file", "/etc/hostname", "offset", "-1"}, "offset", "value must have a minimum value of 0"},
		{[]string{"file", "/etc/hostname", "decode", "yes"}, "decode", "type check ('boolean') failed - got 'yes'"},
		{[]string{"file", "/etc/hostname", "mode", "r"}, "mode", "property is not defined in schema and the schema does not allow additional properties"},
	} {
		errs := paramErrors(t, fileRead(e, "101", c.form...))
		if errs[c.param] != c.msg {
			t.Errorf("file-read %v: errors %q, want %s: %q", c.form, errs, c.param, c.msg)
		}
	}
}

// What file-read answers, as PVE: the content and bytes-read, truncated
// when the reads stopped before the end (16 MiB, count, or a file of
// exactly count bytes); offset and decode=0; each byte one character;
// the agent's and the guest's errors.
func TestFileRead(t *testing.T) {
	w := DefaultWorld()
	withVM101(true)(&w)
	now := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	e := newEnv(t, WithWorld(w), WithClock(func() time.Time { return now }))
	read := func(kv ...string) map[string]any {
		t.Helper()
		r := fileRead(e, "101", kv...)
		if r.status != 200 {
			t.Fatalf("file-read %v: %s %s", kv, r.line, r.body)
		}
		return r.dataMap(t)
	}

	// The default guest runs the reporter: a serving report at the clock.
	rep, err := servingreport.Parse(read("file", servingreport.ReportPath)["content"].(string))
	if err != nil || !rep.Serving || !rep.Checked.Equal(now) || !rep.Answered.Equal(now) || rep.CloudInit != "done" {
		t.Fatalf("default report = %+v, %v; want serving, checked and answered at %s, cloud-init done", rep, err, now)
	}
	if r := fileRead(e, "101", "file", "/etc/egress-proxy.conf"); r.line != "500 Agent error: failed to open file '/etc/egress-proxy.conf' (mode: 'r'): No such file or directory" {
		t.Fatalf("missing file: %s", r.line)
	}
	e.s.RemoveGuestFile(101, servingreport.ReportPath)
	if r := fileRead(e, "101", "file", servingreport.ReportPath); r.status != 500 || r.json(t)["message"] != "Agent error: failed to open file '/run/egress-proxy/report' (mode: 'r'): No such file or directory\n" {
		t.Fatalf("removed report: %s %s", r.line, r.body)
	}

	e.s.SetGuestFile(101, "/etc/hostname", []byte("egress-a\n"))
	if d := read("file", "/etc/hostname"); d["content"] != "egress-a\n" || d["bytes-read"] != float64(9) || d["truncated"] != nil {
		t.Errorf("small file: %v", d)
	}
	if d := read("file", "/etc/hostname", "count", "9"); d["content"] != "egress-a\n" || d["truncated"] != float64(1) {
		t.Errorf("a file of exactly count bytes reads as truncated (qemu-ga sees no EOF): %v", d)
	}
	if d := read("file", "/etc/hostname", "count", "3", "offset", "2"); d["content"] != "res" || d["bytes-read"] != float64(3) || d["truncated"] != float64(1) {
		t.Errorf("count 3 at offset 2: %v", d)
	}
	if d := read("file", "/etc/hostname", "offset", "100"); d["content"] != "" || d["bytes-read"] != float64(0) || d["truncated"] != nil {
		t.Errorf("offset past the end: %v", d)
	}
	if d := read("file", "/etc/hostname", "decode", "0"); d["content"] != base64.StdEncoding.EncodeToString([]byte("egress-a\n")) {
		t.Errorf("decode=0: %v", d)
	}
	e.s.SetGuestFile(101, "/etc/latin", []byte{'a', 0xff})
	if r := fileRead(e, "101", "file", "/etc/latin"); !bytes.Contains(r.body, []byte("\"a\xc3\xbf\"")) {
		t.Errorf("a byte above 0x7f is one character, as Perl encodes a string of octets: %s", r.body)
	}

	big := bytes.Repeat([]byte("x"), maxReadSize+1)
	e.s.SetGuestFile(101, "/var/log/big", big)
	d := read("file", "/var/log/big")
	if c := d["content"].(string); len(c) != maxReadSize || d["bytes-read"] != float64(maxReadSize) || d["truncated"] != float64(1) {
		t.Errorf("a file over 16 MiB: %d bytes, bytes-read %v, truncated %v; want 16 MiB and truncated", len(c), d["bytes-read"], d["truncated"])
	}

	// A stop empties /run (a tmpfs) and keeps the disk's files; the
	// removed report stays removed.
	e.s.SetGuestReport(101, servingreport.Report{Serving: false, Checked: now})
	e.s.SetVMRunning(101, "")
	if r := fileRead(e, "101", "file", "/etc/hostname"); r.line != "500 VM 101 is not running" {
		t.Fatalf("stopped VM: %s", r.line)
	}
	e.s.SetVMRunning(101, "running")
	if r := fileRead(e, "101", "file", servingreport.ReportPath); !strings.Contains(r.line, "No such file or directory") {
		t.Errorf("the report after a restart: %s, want gone with /run", r.line)
	}
	if d := read("file", "/etc/hostname"); d["content"] != "egress-a\n" {
		t.Errorf("/etc after a restart: %v", d)
	}

	e.s.SetAgent(101, Agent{Mode: AgentNotRunning})
	if r := fileRead(e, "101", "file", "/etc/hostname"); r.line != "500 QEMU guest agent is not running" {
		t.Errorf("agent not running: %s", r.line)
	}
	e.s.SetAgent(101, Agent{Mode: AgentQMPTimeout})
	if r := fileRead(e, "101", "file", "/etc/hostname"); r.line != "500 qmp command 'guest-file-open' failed - got timeout" {
		t.Errorf("agent timeout: %s", r.line)
	}
	e.s.SetAgent(101, Agent{})

	// Either privilege will do.
	e.s.Revoke(DefaultTokenID, "/vms/101", "VM.GuestAgent.FileRead")
	if r := fileRead(e, "101", "file", "/etc/hostname"); r.status != 200 {
		t.Errorf("with VM.GuestAgent.Unrestricted: %s", r.line)
	}
	e.s.Revoke(DefaultTokenID, "/vms/101", "VM.GuestAgent.Unrestricted")
	if r := fileRead(e, "101", "file", "/etc/hostname"); r.line != "403 Permission check failed (/vms/101, VM.GuestAgent.FileRead|VM.GuestAgent.Unrestricted)" {
		t.Errorf("without either: %s", r.line)
	}
}
