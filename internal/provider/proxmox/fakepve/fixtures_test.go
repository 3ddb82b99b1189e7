package fakepve

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// The fixtures (testdata/fixtures, a copy of ../shared/recipes/proxmox/fixtures)
// are request/response pairs with their sources. Each is replayed against a
// fake seeded for it, over a raw TLS connection, and the answer compared
// byte for byte: the status line, the headers the fixture names, and the
// body with the fixture's body compacted (key order kept). Only what
// varies per run is normalised: the pid, pstart and starttime of UPIDs and
// task status.
//
// Where PVE's sources disagree with a fixture (most were recorded from
// go-proxmox's mocks, not a PVE), the fake follows the source and the test
// holds the fixture with a named patch: the fake must then match the
// patched bytes exactly. Fixtures whose answer the fake only gives when a
// test asks for it (a fault) say so in via.

type fixtureFile struct {
	Request struct {
		Method string            `json:"method"`
		Path   string            `json:"path"`
		Query  string            `json:"query"`
		Form   map[string]string `json:"form"`
	} `json:"request"`
	Response struct {
		Status  int               `json:"status"`
		Reason  string            `json:"reason"`
		Headers map[string]string `json:"headers"`
		Body    json.RawMessage   `json:"body"`
	} `json:"response"`
}

// replay is how one fixture is set up and where it differs from PVE.
type replay struct {
	world func(w *World)
	// setup runs on the started fake before the request; it returns the
	// path to request when the fixture's path holds a UPID of its own.
	setup func(t *testing.T, e *env) string
	// patch turns the fixture's expected body (and status line) into PVE's
	// where the sources say otherwise; why cites them.
	patch  func(body []byte) []byte
	bare   bool // PVE sends no body and no Content-Type
	noAuth bool // the request goes without a token
	why    string
	via    string // "fault": the answer is injected; "knob": a test knob makes it
}

var vm101Config = []KV{
	{"name", "egress-a"}, {"agent", "1"}, {"boot", "order=scsi0;ide2;net0"}, {"cores", "2"}, {"sockets", "1"},
	{"cpu", "x86-64-v2-AES"}, {"memory", "2048"}, {"ostype", "l26"}, {"scsihw", "virtio-scsi-single"},
	{"scsi0", "local-lvm:vm-101-disk-0,iothread=1,size=20G"}, {"ide2", "local:iso/cidata-101.iso,media=cdrom,size=364K"},
	{"net0", "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1"}, {"serial0", "socket"}, {"vga", "serial0"},
	{"smbios1", "uuid=6f0f7e36-4c1e-4d55-9a3f-0b8a4b2b9c11"}, {"vmgenid", "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"},
	{"meta", "creation-qemu=9.2.0,ctime=1764057600"}, {"tags", "egress-operator;ns-default"}, {"onboot", "1"},
}

// statusWorld has 101 running (the fixtures' numbers) and 102 stopped and
// clone-locked, both without a serial console or vga (their status
// fixtures show neither).
func statusWorld(w *World) {
	w.VMs = append(w.VMs,
		VM{VMID: 101, Node: "pve1", Running: true, Config: []KV{{"name", "egress-a"}, {"agent", "1"}, {"cores", "2"},
			{"memory", "2048"}, {"scsi0", "local-lvm:vm-101-disk-0,size=20G"}, {"net0", "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0"},
			{"tags", "egress-operator;ns-default"}},
			Stats: &Stats{PID: 1563102, Uptime: 874350, CPU: 0.0249060195469461, Mem: 842551296, FreeMem: 1201758208,
				Balloon: 2147483648, DiskRead: 4510777856, DiskWrite: 6059209728, NetIn: 2456116121, NetOut: 545248946}},
		VM{VMID: 102, Node: "pve1", Config: []KV{{"name", "egress-b"}, {"agent", "1"}, {"cores", "2"}, {"memory", "2048"},
			{"scsi0", "local-lvm:vm-102-disk-0,size=20G"}, {"lock", "clone"}}},
	)
}

func withVM101(running bool) func(w *World) {
	return func(w *World) {
		w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Running: running, Config: vm101Config})
	}
}

func withVM101NoAgent(w *World) {
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Running: true, Config: []KV{{"name", "egress-a"},
		{"scsi0", "local-lvm:vm-101-disk-0,size=20G"}}})
}

// resourcesWorld is statusWorld with 102 tagged and the template tagged
// "egress-template", and local-lvm's use set to the fixture's.
func resourcesWorld(w *World) {
	statusWorld(w)
	w.VMs[2].Config = append(w.VMs[2].Config, KV{"tags", "egress-operator;ns-default"})
	w.Storages[1].Used = 48318382080 - 3221225472 - 2*21474836480
}

// cloneTask starts a full clone 9000 -> 101 with polls and returns the
// status path of its task.
func cloneTask(polls int, outcome *TaskOutcome) func(t *testing.T, e *env) string {
	return func(t *testing.T, e *env) string {
		e.s.FailNext(Fault{Method: "POST", Path: "nodes/pve1/qemu/9000/clone", TaskPolls: polls, Task: outcome})
		upid := e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "101", "name", "egress-a", "full", "1")).dataString(t)
		return "/api2/json/nodes/pve1/tasks/" + upid + "/status"
	}
}

// prependLogLine adds a first line to a task log body and renumbers.
func prependLogLine(body []byte, line string) []byte {
	var d struct {
		Total int
		Data  []struct {
			N int    `json:"n"`
			T string `json:"t"`
		}
	}
	if err := json.Unmarshal(body, &d); err != nil {
		panic(err)
	}
	out := []any{obj{{"n", 1}, {"t", line}}}
	for i, l := range d.Data {
		out = append(out, obj{{"n", i + 2}, {"t", l.T}})
	}
	return encodeJSON(obj{{"total", d.Total + 1}, {"data", out}})
}

// reorderData rewrites a {"data":[...]} body with its elements in the order
// of their "id" as keyOrder returns it.
func reorderData(body []byte, less func(a, b string) bool) []byte {
	var d struct{ Data []json.RawMessage }
	if err := json.Unmarshal(body, &d); err != nil {
		panic(err)
	}
	ids := make([]string, len(d.Data))
	for i, el := range d.Data {
		var x struct{ ID string }
		_ = json.Unmarshal(el, &x)
		ids[i] = x.ID
	}
	idx := make([]int, len(d.Data))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return less(ids[idx[a]], ids[idx[b]]) })
	parts := make([]string, len(idx))
	for i, j := range idx {
		parts[i] = string(d.Data[j])
	}
	return []byte(`{"data":[` + strings.Join(parts, ",") + `]}`)
}

// resourceOrder is Cluster.pm resources' order: pools, VMs (sort keys, a
// string sort), nodes, storages.
func resourceOrder(a, b string) bool {
	rank := func(id string) int {
		switch {
		case strings.HasPrefix(id, "qemu/"), strings.HasPrefix(id, "lxc/"):
			return 1
		case strings.HasPrefix(id, "node/"):
			return 2
		case strings.HasPrefix(id, "storage/"):
			return 3
		}
		return 0
	}
	if rank(a) != rank(b) {
		return rank(a) < rank(b)
	}
	if rank(a) == 1 {
		return a[strings.Index(a, "/")+1:] < b[strings.Index(b, "/")+1:]
	}
	return false
}

// reportAt is the serving report the agent-file-read fixture holds.
var reportAt = servingreport.Report{Serving: true, Checked: time.Unix(1764057600, 0), Answered: time.Unix(1764057600, 0),
	Version: "5.7", CloudInit: servingreport.CloudInitDone}

var replays = map[string]replay{
	"agent-file-read.json": {world: withVM101(true), via: "knob",
		setup: func(t *testing.T, e *env) string { e.s.SetGuestReport(101, reportAt); return "" }},
	"agent-file-read-missing.json": {world: withVM101(true), via: "knob",
		setup: func(t *testing.T, e *env) string { e.s.RemoveGuestFile(101, servingreport.ReportPath); return "" }},
	"agent-file-read-not-running.json": {world: withVM101(true), via: "knob",
		setup: func(t *testing.T, e *env) string { e.s.SetAgent(101, Agent{Mode: AgentNotRunning}); return "" }},
	"agent-network-get-interfaces-not-configured.json": {world: withVM101NoAgent},
	"agent-network-get-interfaces-not-running.json": {world: withVM101(true), via: "knob",
		setup: func(t *testing.T, e *env) string { e.s.SetAgent(101, Agent{Mode: AgentNotRunning}); return "" }},
	"agent-network-get-interfaces-qmp-timeout.json": {world: withVM101(true), via: "knob",
		setup: func(t *testing.T, e *env) string { e.s.SetAgent(101, Agent{Mode: AgentQMPTimeout}); return "" }},
	"agent-network-get-interfaces-vm-not-running.json": {world: statusWorld},
	"agent-network-get-interfaces.json": {world: withVM101(true), via: "knob",
		setup: func(t *testing.T, e *env) string {
			e.s.SetAgent(101, Agent{Interfaces: []Interface{
				{Name: "lo", MAC: "00:00:00:00:00:00", Addresses: []IPAddress{{"127.0.0.1", "ipv4", 8}, {"::1", "ipv6", 128}},
					Stats: &InterfaceStats{RxBytes: 9280, RxPackets: 92, TxBytes: 9280, TxPackets: 92}},
				{Name: "eth0", MAC: "bc:24:11:2e:c5:4a", Addresses: []IPAddress{{"192.0.2.194", "ipv4", 24}, {linkLocal("bc:24:11:2e:c5:4a"), "ipv6", 64}},
					Stats: &InterfaceStats{RxBytes: 2456116121, RxPackets: 1864513, TxBytes: 545248946, TxPackets: 977431}},
			}})
			return ""
		}},
	"auth-no-ticket.json": {bare: true, noAuth: true,
		why: "pve-http-server AnyEvent.pm answers an auth_handler error with HTTP::Response->new(401, $err) and no " +
			"content (no JSON formatter for login); real captures: theforeman/foreman_fog_proxmox#55 (body \"\", no " +
			"Content-Type), proxmoxer/proxmoxer#31 (b'')"},
	"auth-permission-denied.json": {world: withVM101(false), via: "knob",
		setup: func(t *testing.T, e *env) string { e.s.Revoke(DefaultTokenID, "/vms/101", "VM.Audit"); return "" }},
	"clone-config-file-exists.json": {world: withVM101(false)},
	"clone-ok.json":                 {},
	"cluster-nextid-taken.json":     {world: withVM101(false)},
	"cluster-resources-type-vm.json": {world: resourcesWorld,
		patch: func(b []byte) []byte { return reorderData(b, resourceOrder) },
		why:   "Cluster.pm resources lists VMs by `sort keys %$idlist`, a string sort: 101, 102, 9000"},
	"cluster-resources.json": {world: resourcesWorld,
		patch: func(b []byte) []byte { return reorderData(b, resourceOrder) },
		why:   "Cluster.pm resources appends VMs (string-sorted), then nodes, then storages"},
	"config-does-not-exist.json": {},
	"config-update-async.json": {world: func(w *World) {
		withVM101(false)(w)
		w.VMs[1].Digest = "4b1f2b9e4f0c0d8a6c8e0a7b1d3e5f7a9b0c1d2e"
	}},
	"delete-purge.json":   {world: withVM101(false)},
	"delete-running.json": {world: withVM101(true)},
	"lock-timeout.json": {world: withVM101(false), via: "fault",
		setup: func(t *testing.T, e *env) string {
			e.s.FailNext(Fault{Method: "POST", Path: "nodes/*/qemu/*/config", Err: LockTimeout(101)})
			return ""
		},
		why: "a POST config takes the lock in its qmconfig worker (update_vm_api), so its lock timeout is the task's " +
			"exitstatus; the synchronous 500 is PUT's (TestLockTimeouts)"},
	"param-verification-failed.json": {
		patch: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"value must have a minimum value of 100"`),
				[]byte(`"invalid format - value does not look like a valid VM ID\n"`), 1)
		},
		why: "pve-vmid has format => 'pve-vmid' (JSONSchema.pm pve_verify_vmid, since 2016) checked before the " +
			"minimum, so 42 fails the format; a format error is \"invalid format - \" plus the die text with its newline"},
	"qemu-config.json": {world: func(w *World) {
		withVM101(false)(w)
		w.VMs[1].Digest = "4b1f2b9e4f0c0d8a6c8e0a7b1d3e5f7a9b0c1d2e"
	}},
	"qemu-status-current-running.json": {world: statusWorld},
	"qemu-status-current-stopped.json": {world: statusWorld},
	"resize-ok.json": {world: withVM101(false),
		patch: func(b []byte) []byte { return bytes.Replace(b, []byte(":qmresize:"), []byte(":resize:"), 1) },
		why:   "qemu-server resize_vm forks its worker as 'resize' (606d9d76, 2023); there never was a 'qmresize'"},
	"status-start.json": {world: withVM101(false)},
	"status-stop.json":  {world: withVM101(true)},
	"storage-upload-content-not-enabled.json": {world: func(w *World) {
		w.Storages = append(w.Storages, Storage{ID: "nfs-templates", Type: "nfs", Path: "/mnt/pve/nfs-templates",
			Content: []string{"vztmpl", "backup"}, Shared: true, Capacity: 1 << 40})
	}},
	"storage-upload-iso.json":             {},
	"storage-upload-not-file-based.json":  {},
	"storage-upload-wrong-extension.json": {},
	"task-log.json": {setup: func(t *testing.T, e *env) string {
		p := cloneTask(1, nil)(t, e)
		e.ok("GET", strings.TrimPrefix(p, "/api2/json"), nil)
		return strings.TrimSuffix(p, "/status") + "/log"
	},
		patch: func(b []byte) []byte {
			return prependLogLine(b, "creating a clone of VM 9000 with ID 101")
		},
		why: "clone_vm prints \"creating a clone of VM <vmid> with ID <newid>\" first (qemu-server 980dffe2, 2026-03)"},
	"task-status-failed-clone.json": {via: "fault",
		setup: cloneTask(1, &TaskOutcome{Error: "clone failed: unable to create VM 101: config file already exists"}),
		why: "the natural lost race is exitstatus \"unable to create VM 101: config file already exists\" " +
			"(clonefn's $load_and_check runs outside the eval that adds \"clone failed: \"); the fixture's text is injected"},
	"task-status-failed-start.json": {world: withVM101(true), setup: func(t *testing.T, e *env) string {
		upid := e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t)
		return "/api2/json/nodes/pve1/tasks/" + upid + "/status"
	}},
	"task-status-ok.json":       {setup: cloneTask(1, nil)},
	"task-status-running.json":  {setup: cloneTask(100, nil)},
	"task-status-warnings.json": {setup: cloneTask(1, &TaskOutcome{Warnings: 2}), via: "fault"},
}

var (
	reUPIDNums   = regexp.MustCompile(`UPID:([^:]+):[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8,9}:[0-9A-Fa-f]{8}:`)
	reTaskNumber = regexp.MustCompile(`"(pid|pstart|starttime)":\d+`)
)

func normalise(b []byte) []byte {
	b = reUPIDNums.ReplaceAll(b, []byte("UPID:$1:PID:PSTART:STARTTIME:"))
	return reTaskNumber.ReplaceAll(b, []byte(`"$1":N`))
}

// rawDo sends req on its own TLS connection and returns the status line,
// the headers and the body exactly as read.
func rawDo(t *testing.T, e *env, req *http.Request) (string, http.Header, []byte) {
	t.Helper()
	conn, err := tls.Dial("tcp", e.s.Host(), &tls.Config{RootCAs: e.s.CertPool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(conn, &raw))
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("reading the answer: %v (raw %q)", err, raw.String())
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(raw.String(), "\r\n")
	return line, resp.Header, body
}

func fixtureRequest(t *testing.T, e *env, f fixtureFile, path string, noAuth bool) *http.Request {
	t.Helper()
	u := "https://" + e.s.Host() + path
	if f.Request.Query != "" {
		u += "?" + f.Request.Query
	}
	var body io.Reader
	ctype := ""
	if strings.HasSuffix(f.Request.Path, "/upload") {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		_ = mw.WriteField("content", f.Request.Form["content"])
		name := strings.TrimPrefix(strings.Fields(f.Request.Form["filename"])[0], "@")
		fw, _ := mw.CreateFormFile("filename", name)
		_, _ = fw.Write(bytes.Repeat([]byte{0}, 372736))
		_ = mw.Close()
		body, ctype = &b, mw.FormDataContentType()
	} else if len(f.Request.Form) > 0 {
		vals := form()
		for k, v := range f.Request.Form {
			vals.Set(k, v)
		}
		body, ctype = strings.NewReader(vals.Encode()), "application/x-www-form-urlencoded"
	}
	req, err := http.NewRequest(f.Request.Method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if !noAuth {
		req.Header.Set("Authorization", e.tok)
	}
	return req
}

func TestFixturesByteForByte(t *testing.T) {
	files, err := filepath.Glob("testdata/fixtures/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	var deviations, injected []string
	for _, file := range files {
		name := filepath.Base(file)
		rp, known := replays[name]
		t.Run(name, func(t *testing.T) {
			if !known {
				t.Fatalf("no replay for fixture %s: add one", name)
			}
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var f fixtureFile
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatal(err)
			}
			w := DefaultWorld()
			if rp.world != nil {
				rp.world(&w)
			}
			e := newEnv(t, WithWorld(w))
			path := f.Request.Path
			if rp.setup != nil {
				if p := rp.setup(t, e); p != "" {
					path = p
				}
			}
			line, hdr, body := rawDo(t, e, fixtureRequest(t, e, f, path, rp.noAuth))

			wantLine := "HTTP/1.1 " + itoa(f.Response.Status) + " " + f.Response.Reason
			if line != wantLine {
				t.Errorf("status line\n got %q\nwant %q", line, wantLine)
			}
			var want bytes.Buffer
			if err := json.Compact(&want, f.Response.Body); err != nil {
				t.Fatal(err)
			}
			wantBody := want.Bytes()
			if rp.patch != nil {
				wantBody = rp.patch(wantBody)
			}
			if rp.bare {
				wantBody = nil
				if ct := hdr.Get("Content-Type"); ct != "" {
					t.Errorf("Content-Type %q on a bare answer", ct)
				}
			} else {
				for k, v := range f.Response.Headers {
					if got := hdr.Get(k); got != v {
						t.Errorf("header %s: %q, want %q", k, got, v)
					}
				}
			}
			if !bytes.Equal(normalise(body), normalise(wantBody)) {
				t.Errorf("body\n got %s\nwant %s", normalise(body), normalise(wantBody))
			}
		})
		if rp.why != "" {
			deviations = append(deviations, name+": "+rp.why)
		}
		if rp.via != "" {
			injected = append(injected, name+" ("+rp.via+")")
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("matched every fixture; answers given only through a test knob or fault: %s", strings.Join(injected, ", "))
	for _, d := range deviations {
		t.Logf("differs from the fixture as PVE does: %s", d)
	}
}
