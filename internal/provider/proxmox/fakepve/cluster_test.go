package fakepve

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestNextID(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 100, Node: "pve1"}, VM{VMID: 101, Node: "pve1"})
	e := newEnv(t, WithWorld(w))
	r := e.ok("GET", "/cluster/nextid", nil)
	if string(r.body) != `{"data":"102"}` {
		t.Fatalf("nextid %s: the lowest free VMID, as a JSON string", r.body)
	}
	if r := e.ok("GET", "/cluster/nextid", form("vmid", "150")); string(r.body) != `{"data":"150"}` {
		t.Fatalf("free vmid: %s", r.body)
	}
	if r := e.do("GET", "/cluster/nextid", form("vmid", "101")); paramErrors(t, r)["vmid"] != "VM 101 already exists" {
		t.Fatalf("taken vmid: %s", r.body)
	}
	// A clone in progress takes its VMID at once.
	e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "102"))
	if r := e.ok("GET", "/cluster/nextid", nil); string(r.body) != `{"data":"103"}` {
		t.Fatalf("nextid during a clone: %s", r.body)
	}
	e.s.SetNextID(100, 103)
	if r := e.do("GET", "/cluster/nextid", nil); r.line != "500 unable to get any free VMID in range [100, 103]" {
		t.Fatalf("range exhausted: %s", r.line)
	}
}

func TestVersionNodesAndStatus(t *testing.T) {
	w := DefaultWorld()
	w.Nodes = []string{"pve1", "pve2"}
	e := newEnv(t, WithWorld(w))
	if v := e.ok("GET", "/version", nil); string(v.body) != `{"data":{"version":"9.2.20","release":"9.2","repoid":"b8c1f4d5a1e0c2f7"}}` {
		t.Fatalf("version %s", v.body)
	}
	e.s.SetNodeOffline("pve2", &Error{})
	nodes := e.ok("GET", "/nodes", nil).data(t).([]any)
	if len(nodes) != 2 || nodes[0].(map[string]any)["status"] != "online" || nodes[1].(map[string]any)["status"] != "offline" {
		t.Fatalf("nodes %v", nodes)
	}
	st := e.ok("GET", "/nodes/pve1/status", nil).dataMap(t)
	if st["pveversion"] != "pve-manager/9.2.20/b8c1f4d5a1e0c2f7" || st["memory"].(map[string]any)["total"] == nil {
		t.Fatalf("node status %v", st)
	}
	e.s.Revoke(DefaultTokenID, "/nodes/pve1", "Sys.Audit")
	if r := e.do("GET", "/nodes/pve1/status", nil); r.line != "403 Permission check failed (/nodes/pve1, Sys.Audit)" {
		t.Fatalf("node status without Sys.Audit: %s", r.line)
	}
	n0 := e.ok("GET", "/nodes", nil).data(t).([]any)[0].(map[string]any)
	if n0["maxmem"] != nil || n0["status"] != "online" {
		t.Fatalf("a node listed without Sys.Audit shows no statistics: %v", n0)
	}
}

// Privileges per path: the most specific ACL entry wins; lists leave out
// what the token may not see; /access/permissions reports the effect.
func TestPrivileges(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 101, Node: "pve1", Config: []KV{{"name", "egress-a"}}},
		VM{VMID: 500, Node: "pve1", Config: []KV{{"name", "human"}}})
	e := newEnv(t, WithWorld(w))
	secret := e.s.SetTokenACL("egress@pve!op",
		ACE{Path: "/", Privs: []string{"Sys.Audit"}},
		ACE{Path: "/vms", Privs: []string{"VM.Audit", "VM.PowerMgmt"}},
		ACE{Path: "/vms/500", Privs: []string{}},
		ACE{Path: "/storage/local", Privs: []string{"Datastore.Audit"}, NoPropagate: true})
	auth := "PVEAPIToken=egress@pve!op=" + secret
	var ids []string
	for _, x := range e.doAuth("GET", "/cluster/resources", form("type", "vm"), auth).data(t).([]any) {
		ids = append(ids, x.(map[string]any)["id"].(string))
	}
	if strings.Join(ids, ",") != "qemu/101,qemu/9000" {
		t.Fatalf("resources seen: %v (VM 500's own entry takes VM.Audit away)", ids)
	}
	if r := e.doAuth("GET", "/nodes/pve1/qemu/500/config", nil, auth); r.line != "403 Permission check failed (/vms/500, VM.Audit)" {
		t.Fatalf("config of VM 500: %s", r.line)
	}
	if r := e.doAuth("POST", "/nodes/pve1/qemu/101/config", form("cores", "2"), auth); r.line != "403 Permission check failed (/vms/101, VM.Config.Disk|VM.Config.CDROM|VM.Config.CPU|VM.Config.Memory|VM.Config.Network|VM.Config.HWType|VM.Config.Options|VM.Config.Cloudinit)" {
		t.Fatalf("config change without any VM.Config privilege: %s", r.line)
	}
	e.s.SetTokenACL("egress@pve!op", ACE{Path: "/", Privs: []string{"VM.Config.Options", "VM.Audit"}})
	if r := e.doAuth("POST", "/nodes/pve1/qemu/101/config", form("cores", "2"), auth); r.line != "403 Permission check failed (/vms/101, VM.Config.CPU)" {
		t.Fatalf("cores with only VM.Config.Options: %s", r.line)
	}
	e.ok("POST", "/nodes/pve1/qemu/101/config", form("cores", "2"))
	perms := e.doAuth("GET", "/access/permissions", form("path", "/vms/101"), auth).dataMap(t)
	if fmt.Sprint(perms) != "map[/vms/101:map[VM.Audit:1 VM.Config.Options:1]]" {
		t.Fatalf("permissions %v", perms)
	}
	if r := e.doAuth("GET", "/access/permissions", form("userid", DefaultTokenID), auth); r.line != "403 Permission check failed (/access, Sys.Audit)" {
		t.Fatalf("another user's permissions: %s", r.line)
	}
}

// With a statistics interval, /cluster/resources lags as pvestatd's RRD
// does: a fresh clone is "unknown" and nameless, then "VM <vmid>" while
// its config has no name, then its name.
func TestStatsInterval(t *testing.T) {
	e := newEnv(t)
	e.s.SetStatsInterval(2)
	e.s.SetTaskPolls("qmclone", 10)
	upid := e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "101", "name", "egress-a")).dataString(t)
	r := resourceByVMID(t, e, 101)
	if r["status"] != "unknown" || r["name"] != nil || r["lock"] != "clone" {
		t.Fatalf("before the next refresh: %v", r)
	}
	e.s.Advance(2)
	if r := resourceByVMID(t, e, 101); r["status"] != "stopped" || r["name"] != "VM 101" {
		t.Fatalf("after a refresh during the clone: %v", r)
	}
	e.waitOK("pve1", upid)
	if r := resourceByVMID(t, e, 101); r["name"] != "VM 101" || r["lock"] != nil {
		t.Fatalf("after the clone, before a refresh: %v (lock is current, the name lags)", r)
	}
	e.s.Advance(2)
	if r := resourceByVMID(t, e, 101); r["name"] != "egress-a" {
		t.Fatalf("after the next refresh: %v", r)
	}
}

func TestReset(t *testing.T) {
	e := newEnv(t)
	tok := e.tok
	e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "101"))
	e.s.SetNodeOffline("pve1", &Error{})
	e.s.FailNext(Fault{Path: "version", Times: Always, Err: die("x\n")})
	e.s.SetTaskPolls("qmclone", 50)
	e.s.Reset()
	if ids := e.s.VMIDs(); fmt.Sprint(ids) != "[9000]" || len(e.s.Tasks()) != 0 || len(e.s.Requests()) != 0 {
		t.Fatalf("after Reset: VMs %v, %d tasks, %d requests", ids, len(e.s.Tasks()), len(e.s.Requests()))
	}
	if e.s.Token() != tok {
		t.Fatalf("Reset changed the token secret")
	}
	e.ok("GET", "/version", nil)
	upid := e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "101")).dataString(t)
	taskStatus(t, e, upid)
	if taskStatus(t, e, upid)["status"] != "stopped" {
		t.Fatalf("task polls knob survived Reset")
	}
}

// Eight clients at once, each its own VM's whole lifecycle (run with -race).
func TestConcurrentClients(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			ce := &env{t: t, s: e.s, hc: e.hc, tok: e.tok}
			vmid := fmt.Sprint(101 + id)
			r := ce.do("POST", "/nodes/pve1/qemu/9000/clone", form("newid", vmid, "name", "egress-"+vmid, "full", "1"))
			if r.status != 200 {
				errs <- r.line
				return
			}
			for _, step := range []struct{ m, p string }{{"POST", "/status/start"}, {"POST", "/status/stop"}, {"DELETE", ""}} {
				if ex := ce.wait("pve1", r.dataString(t)); ex != "OK" {
					errs <- vmid + ": " + ex
					return
				}
				r = ce.do(step.m, "/nodes/pve1/qemu/"+vmid+step.p, nil)
				if r.status != 200 {
					errs <- vmid + ": " + r.line
					return
				}
			}
			if ex := ce.wait("pve1", r.dataString(t)); ex != "OK" {
				errs <- vmid + ": " + ex
			}
		}(i)
	}
	go func() {
		for i := 0; i < 50; i++ {
			e.s.Advance(1)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ids := e.s.VMIDs(); fmt.Sprint(ids) != "[9000]" {
		t.Fatalf("left VMs %v", ids)
	}
	if n := len(e.s.Volumes("pve1", "local-lvm")); n != 1 {
		t.Fatalf("%d volumes left on local-lvm, want the template's", n)
	}
}

// VMs are listed as Perl's `sort keys` orders them: as strings.
func TestResourcesOrder(t *testing.T) {
	w := DefaultWorld()
	w.VMs = append(w.VMs, VM{VMID: 999, Node: "pve1"}, VM{VMID: 1000, Node: "pve1"}, VM{VMID: 100000, Node: "pve1"})
	e := newEnv(t, WithWorld(w))
	var ids []string
	for _, x := range e.ok("GET", "/cluster/resources", nil).data(t).([]any) {
		ids = append(ids, x.(map[string]any)["id"].(string))
	}
	want := "qemu/1000,qemu/100000,qemu/9000,qemu/999,node/pve1,storage/pve1/local,storage/pve1/local-lvm"
	if strings.Join(ids, ",") != want {
		t.Fatalf("order %v, want %s", ids, want)
	}
}
