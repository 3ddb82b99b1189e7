package fakepve

import (
	"bytes"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

func resourceByVMID(t *testing.T, e *env, vmid int) map[string]any {
	t.Helper()
	for _, x := range e.ok("GET", "/cluster/resources", form("type", "vm")).data(t).([]any) {
		m := x.(map[string]any)
		if int(m["vmid"].(float64)) == vmid {
			return m
		}
	}
	return nil
}

var reUPIDFormat = regexp.MustCompile(`^UPID:pve1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmclone:9000:root@pam!egress-operator:$`)

// A provider's whole lifecycle: clone from the template (a nameless,
// clone-locked entry until the task ends), config with the seed ISO,
// resize, start, the agent's addresses, stop, destroy with purge.
func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	iso := e.upload("pve1", "local", "iso", "cidata-101.iso", bytes.Repeat([]byte("CD001 seed"), 2048/10+1)[:2048])
	if iso.status != 200 {
		t.Fatalf("upload: %s %s", iso.line, iso.body)
	}
	e.waitOK("pve1", iso.dataString(t))

	clone := e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "101", "name", "egress-a", "full", "1"))
	upid := clone.dataString(t)
	if !reUPIDFormat.MatchString(upid) {
		t.Fatalf("clone UPID %q is not PVE's format", upid)
	}
	cfg := e.ok("GET", "/nodes/pve1/qemu/101/config", nil).dataMap(t)
	if cfg["lock"] != "clone" || cfg["name"] != nil {
		t.Fatalf("config during the clone: %v, want only lock=clone (nameless)", cfg)
	}
	if r := resourceByVMID(t, e, 101); r == nil || r["lock"] != "clone" || r["name"] != "VM 101" {
		t.Fatalf("resources during the clone: %v, want lock clone and vmstatus' name \"VM 101\"", r)
	}
	if r := e.do("PUT", "/nodes/pve1/qemu/101/config", form("cores", "2")); r.status != 500 || r.line != "500 VM is locked (clone)" {
		t.Fatalf("config change during the clone: %s", r.line)
	}
	e.waitOK("pve1", upid)
	cfg = e.ok("GET", "/nodes/pve1/qemu/101/config", nil).dataMap(t)
	if cfg["name"] != "egress-a" || cfg["lock"] != nil || cfg["template"] != nil {
		t.Fatalf("config after the clone: %v", cfg)
	}
	if !strings.HasPrefix(cfg["scsi0"].(string), "local-lvm:vm-101-disk-0,") {
		t.Fatalf("scsi0 %q, want the full clone's own disk", cfg["scsi0"])
	}
	if cfg["net0"] == "virtio=BC:24:11:0A:00:01,bridge=vmbr0,firewall=1" {
		t.Fatalf("net0 kept the template's MAC")
	}

	up := e.ok("POST", "/nodes/pve1/qemu/101/config", form("cores", "4", "memory", "4096",
		"ide2", "local:iso/cidata-101.iso,media=cdrom", "tags", "egress-operator", "digest", cfg["digest"].(string)))
	e.waitOK("pve1", up.dataString(t))
	cfg = e.ok("GET", "/nodes/pve1/qemu/101/config", nil).dataMap(t)
	if cfg["cores"] != float64(4) || cfg["memory"] != "4096" || cfg["ide2"] != "local:iso/cidata-101.iso,media=cdrom,size=2K" {
		t.Fatalf("config after update: cores %v memory %v ide2 %v", cfg["cores"], cfg["memory"], cfg["ide2"])
	}

	rs := e.ok("PUT", "/nodes/pve1/qemu/101/resize", form("disk", "scsi0", "size", "20G"))
	e.waitOK("pve1", rs.dataString(t))
	cfg = e.ok("GET", "/nodes/pve1/qemu/101/config", nil).dataMap(t)
	if !strings.Contains(cfg["scsi0"].(string), "size=20G") {
		t.Fatalf("scsi0 after resize: %v", cfg["scsi0"])
	}

	if r := e.do("GET", "/nodes/pve1/qemu/101/agent/network-get-interfaces", nil); r.line != "500 VM 101 is not running" {
		t.Fatalf("agent of a stopped VM: %s", r.line)
	}
	st := e.ok("POST", "/nodes/pve1/qemu/101/status/start", nil)
	e.waitOK("pve1", st.dataString(t))
	cur := e.ok("GET", "/nodes/pve1/qemu/101/status/current", nil).dataMap(t)
	if cur["status"] != "running" || cur["qmpstatus"] != "running" || cur["agent"] != float64(1) {
		t.Fatalf("status after start: %v", cur)
	}
	ag := e.ok("GET", "/nodes/pve1/qemu/101/agent/network-get-interfaces", nil).dataMap(t)
	res := ag["result"].([]any)
	eth0 := res[1].(map[string]any)
	addr := eth0["ip-addresses"].([]any)[0].(map[string]any)["ip-address"].(string)
	if !strings.HasPrefix(addr, "192.0.2.") {
		t.Fatalf("eth0 address %q, want one of TEST-NET-1", addr)
	}

	if r := e.do("DELETE", "/nodes/pve1/qemu/101", form("purge", "1")); r.line != "500 VM 101 is running - destroy failed" {
		t.Fatalf("destroy of a running VM: %s", r.line)
	}
	e.waitOK("pve1", e.ok("POST", "/nodes/pve1/qemu/101/status/stop", nil).dataString(t))
	del := e.ok("DELETE", "/nodes/pve1/qemu/101", form("purge", "1", "destroy-unreferenced-disks", "1"))
	if r := resourceByVMID(t, e, 101); r == nil || r["lock"] != "destroyed" {
		t.Fatalf("entry while destroying: %v, want lock destroyed", r)
	}
	e.waitOK("pve1", del.dataString(t))
	if r := e.do("GET", "/nodes/pve1/qemu/101/config", nil); r.line != "500 Configuration file 'nodes/pve1/qemu-server/101.conf' does not exist" {
		t.Fatalf("config after destroy: %s", r.line)
	}
	for _, v := range e.s.Volumes("pve1", "local-lvm") {
		if v.VMID == 101 {
			t.Fatalf("volume %s left after destroy", v.Name)
		}
	}
	if vols := e.s.Volumes("pve1", "local"); len(vols) != 1 || vols[0].Name != "iso/cidata-101.iso" {
		t.Fatalf("local volumes %v: the seed ISO is the provider's to delete, destroy leaves it", vols)
	}
	// An ISO a VM names can be deleted; the VM then no longer starts.
	e.waitOK("pve1", e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "102", "name", "egress-b")).dataString(t))
	e.ok("PUT", "/nodes/pve1/qemu/102/config", form("ide2", "local:iso/cidata-101.iso,media=cdrom"))
	del2 := e.ok("DELETE", "/nodes/pve1/storage/local/content/"+url.PathEscape("local:iso/cidata-101.iso"), nil)
	e.waitOK("pve1", del2.dataString(t))
	if vols := e.s.Volumes("pve1", "local"); len(vols) != 0 {
		t.Fatalf("ISO still there: %v", vols)
	}
	if ex := e.wait("pve1", e.ok("POST", "/nodes/pve1/qemu/102/status/start", nil).dataString(t)); ex != "volume 'local:iso/cidata-101.iso' does not exist" {
		t.Fatalf("start with its ISO deleted: %q", ex)
	}
}
