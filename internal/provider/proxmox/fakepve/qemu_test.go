package fakepve

import (
	"fmt"
	"strings"
	"testing"
)

func paramErrors(t *testing.T, r reply) map[string]any {
	t.Helper()
	if r.status != 400 || r.line != "400 Parameter verification failed." {
		t.Fatalf("%s %s, want 400 Parameter verification failed.", r.line, r.body)
	}
	m := r.json(t)
	if m["message"] != "Parameter verification failed.\n" {
		t.Fatalf("message %q", m["message"])
	}
	return m["errors"].(map[string]any)
}

// The fake disagrees with a client as PVE does: parameters are verified
// against the method's schema, with PVE's texts in the errors map.
func TestParameterVerification(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		method, path string
		form         []string
		param, msg   string
	}{
		{"POST", "/nodes/pve1/qemu/9000/clone", []string{"newid", "42"}, "newid", "invalid format - value does not look like a valid VM ID\n"},
		{"POST", "/nodes/pve1/qemu/9000/clone", []string{"newid", "abc"}, "newid", "type check ('integer') failed - got 'abc'"},
		{"POST", "/nodes/pve1/qemu/9000/clone", []string{}, "newid", "property is missing and it is not optional"},
		{"POST", "/nodes/pve1/qemu/9000/clone", []string{"newid", "101", "name", "egress_a"}, "name", "invalid format - value does not look like a valid DNS name\n"},
		{"POST", "/nodes/pve1/qemu/9000/clone", []string{"newid", "101", "full", "true"}, "full", "type check ('boolean') failed - got 'true'"},
		{"POST", "/nodes/pve1/qemu/9000/clone", []string{"newid", "101", "linked", "1"}, "linked", "property is not defined in schema and the schema does not allow additional properties"},
		{"POST", "/nodes/pve1/qemu/9000/clone", []string{"newid", "101", "storage", "1st"}, "storage", "invalid format - storage ID '1st' contains illegal characters\n"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"cores", "0"}, "cores", "value must have a minimum value of 1"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"memory", "lots"}, "memory", "invalid format - format error\nmemory.current: type check ('integer') failed - got 'lots'\n"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"memory", "8"}, "memory", "invalid format - format error\nmemory.current: value must have a minimum value of 16\n"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"agent", "enabled=1,bogus=2"}, "agent", "invalid format - invalid key in comma-separated list property: bogus\n"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"net0", "virtio,bridge=vmbr0,tag=5000"}, "net0", "invalid format - format error\nnet0.tag: value must have a maximum value of 4094\n"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"tags", "egress operator!"}, "tags", "invalid format - invalid characters in tag\n"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"ostype", "linux"}, "ostype", "value 'linux' does not have a value in the enumeration 'other, wxp, w2k, w2k3, w2k8, wvista, win7, win8, win10, win11, l24, l26, solaris'"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"delete", "frobnicate"}, "delete", "unknown option 'frobnicate'"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"cores", "2", "delete", "cores"}, "delete", "you can't use '-cores' and -delete cores' at the same time"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"scsi1", "local-lvm:vm-9000-disk-1,,"}, "scsi1", "unable to parse drive options"},
		{"POST", "/nodes/pve1/qemu/9000/config", []string{"cores", "2", "skiplock", "1"}, "skiplock", "Only root may use this option."},
		{"PUT", "/nodes/pve1/qemu/9000/resize", []string{"disk", "scsi0", "size", "10 GB"}, "size", "value does not match the regex pattern"},
		{"PUT", "/nodes/pve1/qemu/9000/resize", []string{"disk", "hda", "size", "10G"}, "disk", "value 'hda' does not have a value in the enumeration '" + strings.Join(driveNames, ", ") + "'"},
		{"DELETE", "/nodes/pve1/qemu/9000", []string{"purge", "yes"}, "purge", "type check ('boolean') failed - got 'yes'"},
		{"GET", "/nodes/pve1/qemu/abc/config", nil, "vmid", "type check ('integer') failed - got 'abc'"},
		{"GET", "/cluster/resources", []string{"type", "qemu"}, "type", "value 'qemu' does not have a value in the enumeration 'vm, storage, node, sdn, pool'"},
		{"GET", "/nodes/pve1/tasks/UPID:bogus/status", nil, "upid", "unable to parse worker upid"},
	}
	for _, c := range cases {
		errs := paramErrors(t, e.do(c.method, c.path, form(c.form...)))
		if errs[c.param] != c.msg {
			t.Errorf("%s %s %v: errors %q, want %s: %q", c.method, c.path, c.form, errs, c.param, c.msg)
		}
	}
	if r := e.do("POST", "/nodes/pve1/qemu/9000/config", nil); r.line != "500 no options specified" {
		t.Fatalf("empty config update: %s", r.line)
	}
}

func TestCloneRefusals(t *testing.T) {
	w := DefaultWorld()
	w.Nodes = []string{"pve1", "pve2"}
	w.VMs = append(w.VMs,
		VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "taken-here"}}},
		VM{VMID: 201, Node: "pve2", Config: []KV{{"name", "taken-there"}}},
		VM{VMID: 150, Node: "pve1", Config: []KV{{"name", "plain"}, {"scsi0", "local-lvm:vm-150-disk-0,size=4G"}}},
	)
	e := newEnv(t, WithWorld(w))
	clone := func(src string, kv ...string) reply {
		return e.do("POST", "/nodes/pve1/qemu/"+src+"/clone", form(kv...))
	}

	if r := clone("9000", "newid", "101"); r.line != "500 unable to create VM 101: config file already exists" {
		t.Fatalf("clone onto a VMID taken on this node: %s", r.line)
	}
	// Taken on another node: only pmxcfs notices, in the worker.
	r := clone("9000", "newid", "201", "name", "egress-x")
	if r.status != 200 {
		t.Fatalf("clone onto a VMID of pve2: %s", r.line)
	}
	if ex := e.wait("pve1", r.dataString(t)); ex != "close (rename) atomic file '/etc/pve/nodes/pve1/qemu-server/201.conf' failed: File exists" {
		t.Fatalf("exitstatus %q", ex)
	}
	if v, _ := e.s.VM(201); v.Node != "pve2" || v.Config[0].Value != "taken-there" {
		t.Fatalf("VM 201 touched: %+v", v)
	}
	if r := clone("999", "newid", "300"); r.line != "500 Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist" {
		t.Fatalf("clone of a missing VM: %s", r.line)
	}
	if r := clone("9000", "newid", "300", "storage", "local-lvm"); r.line != "500 parameter 'storage' not allowed for linked clones" {
		t.Fatalf("linked clone with storage: %s", r.line)
	}
	if r := clone("9000", "newid", "300", "full", "1", "storage", "local"); r.status != 400 ||
		paramErrors(t, r)["storage"] != "storage 'local' does not support vm images" {
		t.Fatalf("full clone onto an ISO storage: %s %s", r.line, r.body)
	}
	if r := clone("9000", "newid", "300", "full", "1", "storage", "nas"); r.line != "500 storage 'nas' does not exist" {
		t.Fatalf("unknown storage: %s", r.line)
	}
	if r := clone("9000", "newid", "300", "target", "pve2"); r.line != "500 can't clone VM to node 'pve2' (VM uses local storage)" {
		t.Fatalf("cross-node clone from local storage: %s", r.line)
	}
	if r := clone("150", "newid", "300", "full", "0"); r.line != "500 Linked clone feature is not supported for 'local-lvm:vm-150-disk-0' (scsi0)" {
		t.Fatalf("linked clone of a non-template: %s", r.line)
	}
	e.s.SetLock(9000, "backup")
	if r := clone("9000", "newid", "300"); r.line != "500 VM is locked (backup)" {
		t.Fatalf("clone of a locked template: %s", r.line)
	}
	e.s.SetLock(9000, "")
	e.s.Revoke(DefaultTokenID, "/vms/300", "VM.Allocate")
	if r := clone("9000", "newid", "300"); r.line != "403 Permission check failed (/vms/300, VM.Allocate)" {
		t.Fatalf("no VM.Allocate on the new VMID: %s", r.line)
	}
}

// A template clones linked by default; ten clones of it run at once (the
// source takes only a shared lock) and end together.
func TestParallelLinkedClones(t *testing.T) {
	e := newEnv(t)
	e.s.SetTaskPolls("qmclone", 30)
	var upids []string
	for i := 0; i < 10; i++ {
		upids = append(upids, e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", fmt.Sprint(101+i), "name", fmt.Sprintf("egress-%d", i))).dataString(t))
	}
	for i := 0; i < 10; i++ {
		if v, _ := e.s.VM(101 + i); v.Lock != "clone" || len(v.Config) != 1 {
			t.Fatalf("VM %d during its clone: %+v", 101+i, v)
		}
	}
	e.s.Advance(29)
	for _, u := range upids {
		if st := e.ok("GET", "/nodes/pve1/tasks/"+u+"/status", nil).dataMap(t); st["exitstatus"] != "OK" {
			t.Fatalf("clone %s after 30 polls: %v", u, st)
		}
	}
	cfg := e.ok("GET", "/nodes/pve1/qemu/105/config", nil).dataMap(t)
	if cfg["scsi0"] != "local-lvm:base-9000-disk-0/vm-105-disk-0,iothread=1,size=3G" || cfg["name"] != "egress-4" {
		t.Fatalf("linked clone config: %v", cfg)
	}
	del := e.ok("DELETE", "/nodes/pve1/qemu/9000", nil).dataString(t)
	if ex := e.wait("pve1", del); ex != "base volume 'local-lvm:base-9000-disk-0' is still in use by linked cloned" {
		t.Fatalf("destroy of a template with linked clones: %q", ex)
	}
}

func TestConfigLocksAndDigest(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "egress-a"}, {"cores", "1"}, {"agent", "1"},
		{"scsi0", "local-lvm:vm-101-disk-0,size=4G"}}})
	e := newEnv(t, WithWorld(w))
	digest := e.ok("GET", "/nodes/pve1/qemu/101/config", nil).dataMap(t)["digest"].(string)
	e.ok("PUT", "/nodes/pve1/qemu/101/config", form("cores", "2", "digest", digest))
	if r := e.do("PUT", "/nodes/pve1/qemu/101/config", form("cores", "3", "digest", digest)); r.line != "500 checksum mismatch (file change by other user?)" {
		t.Fatalf("stale digest: %s", r.line)
	}

	e.s.SetLock(101, "backup")
	for _, m := range []string{"POST", "PUT"} {
		if r := e.do(m, "/nodes/pve1/qemu/101/config", form("cores", "3")); r.line != "500 VM is locked (backup)" {
			t.Fatalf("%s config of a locked VM: %s", m, r.line)
		}
	}
	if ex := e.wait("pve1", e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t)); ex != "VM is locked (backup)" {
		t.Fatalf("start of a locked VM: %q", ex)
	}
	e.s.SetLock(101, "")

	// A task holds the config lock while it runs: PUT times out at once,
	// a POST's worker waits for the lock.
	e.s.SetTaskPolls("qmstart", 3)
	start := e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t)
	if r := e.do("PUT", "/nodes/pve1/qemu/101/config", form("cores", "4")); r.line != "500 can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout" {
		t.Fatalf("PUT while a task holds the lock: %s", r.line)
	}
	cfgTask := e.ok("POST", "/nodes/pve1/qemu/101/config", form("cores", "4")).dataString(t)
	e.waitOK("pve1", start)
	e.waitOK("pve1", cfgTask)
	if c := e.ok("GET", "/nodes/pve1/qemu/101/config", nil).dataMap(t)["cores"]; c != float64(4) {
		t.Fatalf("cores %v after the waiting update", c)
	}

	// A holder that outlasts the wait: the waiting worker gives up.
	e.s.SetLockWaitPolls(2)
	e.s.SetTaskPolls("qmstop", 10)
	stop := e.ok("POST", "/nodes/pve1/qemu/101/status/stop", nil).dataString(t)
	cfgTask = e.ok("POST", "/nodes/pve1/qemu/101/config", form("cores", "5")).dataString(t)
	if ex := e.wait("pve1", cfgTask); ex != "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout" {
		t.Fatalf("exitstatus %q", ex)
	}
	e.waitOK("pve1", stop)

	// background_delay: null when the task ends within it, its error when
	// it fails, the UPID when it still runs.
	if r := e.ok("POST", "/nodes/pve1/qemu/101/config", form("cores", "6", "background_delay", "5")); string(r.body) != `{"data":null}` {
		t.Fatalf("background_delay, done in time: %s", r.body)
	}
	if r := e.do("POST", "/nodes/pve1/qemu/101/config", form("ide2", "local:iso/none.iso,media=cdrom", "background_delay", "5")); r.line != "500 failed to update VM 101: volume local:iso/none.iso does not exist" {
		t.Fatalf("background_delay, failed: %s", r.line)
	}
	e.s.SetTaskPolls("qmconfig", 9)
	if r := e.ok("POST", "/nodes/pve1/qemu/101/config", form("cores", "7", "background_delay", "2")); !strings.HasPrefix(r.dataString(t), "UPID:") {
		t.Fatalf("background_delay, still running: %s", r.body)
	}
	e.s.SetTaskPolls("qmconfig", 2)
	e.s.Settle()

	// The ISO a drive names is looked up in the worker.
	up := e.ok("POST", "/nodes/pve1/qemu/101/config", form("ide2", "local:iso/missing.iso,media=cdrom")).dataString(t)
	if ex := e.wait("pve1", up); ex != "volume local:iso/missing.iso does not exist" {
		t.Fatalf("attaching a missing ISO: %q", ex)
	}
}

func TestPowerStates(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "egress-a"}, {"agent", "1"},
		{"scsi0", "local-lvm:vm-101-disk-0,size=4G"}}})
	e := newEnv(t, WithWorld(w))
	post := func(action string, kv ...string) reply {
		return e.do("POST", "/nodes/pve1/qemu/101/status/"+action, form(kv...))
	}
	cur := func() map[string]any { return e.ok("GET", "/nodes/pve1/qemu/101/status/current", nil).dataMap(t) }

	if r := post("resume"); r.line != "500 VM 101 not running" {
		t.Fatalf("resume of a stopped VM: %s", r.line)
	}
	if r := post("suspend"); r.line != "500 VM 101 not running" {
		t.Fatalf("suspend of a stopped VM: %s", r.line)
	}
	e.waitOK("pve1", e.ok("POST", "/nodes/pve1/qemu/101/status/stop", nil).dataString(t)) // stopping a stopped VM is done
	e.waitOK("pve1", post("start").dataString(t))
	if ex := e.wait("pve1", post("start").dataString(t)); ex != "VM 101 already running" {
		t.Fatalf("second start: %q", ex)
	}

	e.waitOK("pve1", post("suspend").dataString(t))
	if c := cur(); c["status"] != "running" || c["qmpstatus"] != "paused" {
		t.Fatalf("paused: %v", c)
	}
	if r := resourceByVMID(t, e, 101); r["status"] != "paused" {
		t.Fatalf("resources list a paused VM as %v (pvestatd writes qmpstatus)", r["status"])
	}
	if r := post("shutdown"); r.line != "500 VM is paused - cannot shutdown" {
		t.Fatalf("shutdown of a paused VM: %s", r.line)
	}
	e.waitOK("pve1", post("resume").dataString(t))
	if c := cur(); c["qmpstatus"] != "running" {
		t.Fatalf("resumed: %v", c)
	}

	e.waitOK("pve1", post("suspend", "todisk", "1").dataString(t))
	c := cur()
	if c["status"] != "stopped" || c["lock"] != "suspended" {
		t.Fatalf("hibernated: %v", c)
	}
	cfg := e.ok("GET", "/nodes/pve1/qemu/101/config", nil).dataMap(t)
	if !strings.HasPrefix(fmt.Sprint(cfg["vmstate"]), "local-lvm:vm-101-state-suspend-") {
		t.Fatalf("hibernated config: %v", cfg)
	}
	if r := e.do("POST", "/nodes/pve1/qemu/101/config", form("cores", "2")); r.line != "500 VM is locked (suspended)" {
		t.Fatalf("config of a hibernated VM: %s", r.line)
	}
	e.waitOK("pve1", post("resume").dataString(t))
	if c := cur(); c["status"] != "running" || c["lock"] != nil {
		t.Fatalf("resumed from disk: %v", c)
	}
	e.waitOK("pve1", post("shutdown").dataString(t))
	if c := cur(); c["status"] != "stopped" {
		t.Fatalf("after shutdown: %v", c)
	}
	if ex := e.wait("pve1", e.ok("POST", "/nodes/pve1/qemu/9000/status/start", nil).dataString(t)); ex != "you can't start a vm if it's a template" {
		t.Fatalf("start of a template: %q", ex)
	}
	if ex := e.wait("pve1", e.ok("POST", "/nodes/pve1/qemu/999/status/stop", nil).dataString(t)); ex != "unable to find configuration file for VM 999 on node 'pve1'" {
		t.Fatalf("stop of a missing VM: %q", ex)
	}
	if ex := e.wait("pve1", e.ok("POST", "/nodes/pve1/qemu/999/status/start", nil).dataString(t)); ex != "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist" {
		t.Fatalf("start of a missing VM: %q", ex)
	}
}

// A migrated VM is gone from the old node: its config there "does not
// exist", power calls there fail in their task.
func TestMigration(t *testing.T) {
	w := DefaultWorld()
	w.Nodes = []string{"pve1", "pve2"}
	w.Storages = append(w.Storages, Storage{ID: "ceph", Type: "rbd", Content: []string{"images"}, Shared: true, Capacity: 1 << 42})
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Running: true, Config: []KV{{"name", "egress-a"}, {"agent", "1"},
		{"scsi0", "ceph:vm-101-disk-0,size=4G"}, {"scsi1", "local-lvm:vm-101-disk-1,size=1G"}}})
	e := newEnv(t, WithWorld(w))
	if err := e.s.MigrateVM(101, "pve2"); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/nodes/pve1/qemu/101/config", nil); r.line != "500 Configuration file 'nodes/pve1/qemu-server/101.conf' does not exist" {
		t.Fatalf("config on the old node: %s", r.line)
	}
	if r := e.do("GET", "/nodes/pve1/qemu/101/agent/network-get-interfaces", nil); r.line != "500 Configuration file 'nodes/pve1/qemu-server/101.conf' does not exist" {
		t.Fatalf("agent on the old node: %s", r.line)
	}
	if ex := e.wait("pve1", e.ok("POST", "/nodes/pve1/qemu/101/status/stop", nil).dataString(t)); ex != "unable to find configuration file for VM 101 on node 'pve1'" {
		t.Fatalf("stop on the old node: %q", ex)
	}
	if r := e.do("POST", "/nodes/pve1/qemu/101/status/suspend", nil); r.line != "500 unable to find configuration file for VM 101 on node 'pve1'" {
		t.Fatalf("suspend on the old node: %s", r.line)
	}
	if r := resourceByVMID(t, e, 101); r["node"] != "pve2" || r["status"] != "running" {
		t.Fatalf("resources after the migration: %v", r)
	}
	e.ok("GET", "/nodes/pve2/qemu/101/status/current", nil)
	listed := func(node string) (ids []string) {
		for _, x := range e.ok("GET", "/nodes/"+node+"/qemu", nil).data(t).([]any) {
			ids = append(ids, fmt.Sprint(x.(map[string]any)["vmid"]))
		}
		return ids
	}
	if a, b := listed("pve1"), listed("pve2"); fmt.Sprint(a) != "[9000]" || fmt.Sprint(b) != "[101]" {
		t.Fatalf("qemu lists: pve1 %v pve2 %v", a, b)
	}
	if len(e.s.Volumes("pve2", "local-lvm")) != 1 || len(e.s.Volumes("pve1", "local-lvm")) != 1 {
		t.Fatalf("local disk not moved: pve1 %v pve2 %v", e.s.Volumes("pve1", "local-lvm"), e.s.Volumes("pve2", "local-lvm"))
	}
	stop := e.ok("POST", "/nodes/pve2/qemu/101/status/stop", nil).dataString(t)
	if !strings.HasPrefix(stop, "UPID:pve2:") {
		t.Fatalf("the task runs on the VM's node: %s", stop)
	}
	if r := e.do("GET", "/nodes/pve1/tasks/"+stop+"/status", nil); paramErrors(t, r)["upid"] != "no such task" {
		t.Fatalf("pve2's task asked on pve1: %s", r.body)
	}
	e.waitOK("pve2", stop)
}

func TestDestroy(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "egress-a"},
		{"scsi0", "local-lvm:vm-101-disk-0,size=4G"}, {"unused0", "local-lvm:vm-101-disk-1"}}},
		VM{VMID: 102, Node: "pve1", Config: []KV{{"name", "guarded"}, {"protection", "1"}}})
	w.Volumes = []Volume{{Node: "pve1", Storage: "local-lvm", Name: "vm-101-disk-1", Size: 1 << 30, VMID: 101},
		{Node: "pve1", Storage: "local-lvm", Name: "vm-101-disk-7", Size: 1 << 30, VMID: 101}}
	e := newEnv(t, WithWorld(w))
	if r := e.do("DELETE", "/nodes/pve1/qemu/102", nil); r.line != "500 can't remove VM 102 - protection mode enabled" {
		t.Fatalf("protected: %s", r.line)
	}
	e.s.SetLock(101, "clone")
	if ex := e.wait("pve1", e.ok("DELETE", "/nodes/pve1/qemu/101", form("purge", "1")).dataString(t)); ex != "VM is locked (clone)" {
		t.Fatalf("destroy of a clone-locked VM: %q", ex)
	}
	e.s.SetLock(101, "")
	e.waitOK("pve1", e.ok("DELETE", "/nodes/pve1/qemu/101", form("purge", "1")).dataString(t))
	var left []string
	for _, v := range e.s.Volumes("pve1", "local-lvm") {
		if v.VMID == 101 {
			left = append(left, v.Name)
		}
	}
	if strings.Join(left, ",") != "vm-101-disk-7" {
		t.Fatalf("after destroy without destroy-unreferenced-disks: %v, want the unreferenced disk only", left)
	}

	w.VMs = w.VMs[:2]
	e = newEnv(t, WithWorld(w))
	e.waitOK("pve1", e.ok("DELETE", "/nodes/pve1/qemu/101", form("purge", "1", "destroy-unreferenced-disks", "1")).dataString(t))
	for _, v := range e.s.Volumes("pve1", "local-lvm") {
		if v.VMID == 101 {
			t.Fatalf("%s left with destroy-unreferenced-disks", v.Name)
		}
	}
	if r := e.do("DELETE", "/nodes/pve1/qemu/101", nil); r.line != "500 Configuration file 'nodes/pve1/qemu-server/101.conf' does not exist" {
		t.Fatalf("second destroy: %s", r.line)
	}
}

func TestResize(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "egress-a"},
		{"scsi0", "local-lvm:vm-101-disk-0,size=4G"}, {"ide2", "none,media=cdrom"}}})
	e := newEnv(t, WithWorld(w))
	resize := func(disk, size string) string {
		return e.wait("pve1", e.ok("PUT", "/nodes/pve1/qemu/101/resize", form("disk", disk, "size", size)).dataString(t))
	}
	if ex := resize("scsi0", "+6G"); ex != "OK" {
		t.Fatal(ex)
	}
	if c := e.ok("GET", "/nodes/pve1/qemu/101/config", nil).dataMap(t)["scsi0"]; c != "local-lvm:vm-101-disk-0,size=10G" {
		t.Fatalf("after +6G: %v", c)
	}
	for _, c := range []struct{ disk, size, exit string }{
		{"scsi0", "8G", "shrinking disks is not supported"},
		{"scsi3", "8G", "disk 'scsi3' does not exist"},
		{"ide2", "1G", "you can't resize a cdrom"},
		{"scsi0", "10G", "OK"},
	} {
		if ex := resize(c.disk, c.size); ex != c.exit {
			t.Errorf("resize %s %s: %q, want %q", c.disk, c.size, ex, c.exit)
		}
	}
	if ex := e.wait("pve1", e.ok("PUT", "/nodes/pve1/qemu/999/resize", form("disk", "scsi0", "size", "1G")).dataString(t)); ex != "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist" {
		t.Fatalf("resize of a missing VM (checked in the worker): %q", ex)
	}
}

func TestAgentStates(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "egress-a"}, {"agent", "1"},
		{"net0", "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0"}}},
		VM{VMID: 102, Node: "pve1", Running: true, Config: []KV{{"name", "no-agent"}}})
	e := newEnv(t, WithWorld(w))
	agent := func(vmid int) reply {
		return e.do("GET", fmt.Sprintf("/nodes/pve1/qemu/%d/agent/network-get-interfaces", vmid), nil)
	}
	if r := agent(102); r.line != "500 No QEMU guest agent configured" {
		t.Fatalf("no agent key: %s", r.line)
	}
	if r := agent(101); r.line != "500 VM 101 is not running" {
		t.Fatalf("stopped: %s", r.line)
	}
	e.s.SetAgent(101, Agent{BootSteps: 3})
	e.waitOK("pve1", e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t))
	for i := 1; i <= 2; i++ {
		if r := agent(101); r.line != "500 QEMU guest agent is not running" {
			t.Fatalf("booting, call %d: %s", i, r.line)
		}
	}
	r := agent(101)
	if r.status != 200 {
		t.Fatalf("third call: %s", r.line)
	}
	eth0 := r.dataMap(t)["result"].([]any)[1].(map[string]any)
	if eth0["hardware-address"] != "bc:24:11:2e:c5:4a" ||
		eth0["ip-addresses"].([]any)[1].(map[string]any)["ip-address"] != "fe80::be24:11ff:fe2e:c54a" {
		t.Fatalf("eth0 %v", eth0)
	}
	e.s.SetAgent(101, Agent{Mode: AgentQMPTimeout})
	if r := agent(101); r.line != "500 qmp command 'guest-network-get-interfaces' failed - got timeout" {
		t.Fatalf("qmp timeout: %s", r.line)
	}
	e.s.SetAgent(101, Agent{Interfaces: []Interface{{Name: "eth0", MAC: "bc:24:11:2e:c5:4a"}}})
	if r := agent(101); strings.Contains(string(r.body), "ip-addresses") {
		t.Fatalf("an interface before DHCP has no ip-addresses key: %s", r.body)
	}
	// The boot delay also passes with Advance steps.
	e.s.SetAgent(101, Agent{})
	e.s.SetAgentBootSteps(2)
	e.waitOK("pve1", e.ok("POST", "/nodes/pve1/qemu/101/status/stop", nil).dataString(t))
	e.waitOK("pve1", e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil).dataString(t))
	e.s.Advance(2)
	if r := agent(101); r.status != 200 {
		t.Fatalf("after the boot steps passed: %s", r.line)
	}
}

// Workers that need a cloning VM's config lock wait for the clone's task:
// a destroy right after the clone request runs once the clone ended, or
// gives up after the lock wait.
func TestWorkersWaitForTheCloneLock(t *testing.T) {
	e := newEnv(t)
	e.s.SetTaskPolls("qmclone", 4)
	clone := e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "101", "name", "egress-a")).dataString(t)
	del := e.ok("DELETE", "/nodes/pve1/qemu/101", form("purge", "1")).dataString(t)
	if st := taskStatus(t, e, del); st["status"] != "running" {
		t.Fatalf("destroy during the clone: %v", st)
	}
	e.waitOK("pve1", clone)
	e.waitOK("pve1", del)
	if _, ok := e.s.VM(101); ok {
		t.Fatalf("VM 101 survived the destroy that waited for its clone")
	}

	e.s.SetTaskPolls("qmclone", 20)
	e.s.SetLockWaitPolls(3)
	e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "102", "name", "egress-b"))
	start := e.ok("POST", "/nodes/pve1/qemu/102/status/start", nil).dataString(t)
	if ex := e.wait("pve1", start); ex != "can't lock file '/var/lock/qemu-server/lock-102.conf' - got timeout" {
		t.Fatalf("start during a long clone: %q", ex)
	}
}
