package fakepve

import (
	"crypto/rand"
	"fmt"
	"sort"
	"strings"
)

// vm is one guest. Its config is the file nodes/<node>/qemu-server/<vmid>.conf.
type vm struct {
	vmid      int
	node      string
	conf      vmConfig
	digest    string // captured digest, until the config changes
	running   bool
	qmp       string
	stats     Stats
	agent     Agent
	agentWait int               // Advance steps or agent polls until the agent answers
	files     map[string][]byte // the guest's files (SetGuestFile)
	reportSet bool              // a test wrote or removed the serving report: no default reporter
	procs     map[int]*process  // the agent's guest-exec commands, by pid, until read as ended
	nextPID   int
	// static is the address the guest's cloud-init configured from its
	// seed's network-config at its last start; nil: DHCP's.
	static *IPAddress
	flock  *task // the task holding the config lock
	rrd    obj   // the last statistics snapshot (SetStatsInterval > 0)
}

func (v *vm) getDigest() string {
	if v.digest != "" {
		return v.digest
	}
	return v.conf.digest()
}

func (v *vm) changed() { v.digest = "" }

func (v *vm) lock() string { return v.conf.val("lock") }

func (v *vm) isTemplate() bool { return v.conf.val("template") == "1" }

func (v *vm) name() string {
	if n := v.conf.val("name"); n != "" {
		return n
	}
	return fmt.Sprintf("VM %d", v.vmid)
}

func (s *Server) putVMLocked(spec VM) error {
	if spec.VMID < 100 || spec.VMID > 999999999 {
		return fmt.Errorf("VMID %d out of range", spec.VMID)
	}
	if !s.hasNode(spec.Node) {
		return fmt.Errorf("VM %d: no node %q", spec.VMID, spec.Node)
	}
	if old := s.vms[spec.VMID]; old != nil && old.node != spec.Node {
		return fmt.Errorf("VM %d exists on node %s", spec.VMID, old.node)
	}
	v := &vm{vmid: spec.VMID, node: spec.Node, conf: vmConfig(append([]KV(nil), spec.Config...)),
		digest: spec.Digest, running: spec.Running, qmp: spec.QMPStatus}
	if v.running && v.qmp == "" {
		v.qmp = "running"
	}
	if spec.Stats != nil {
		v.stats = *spec.Stats
	}
	if spec.Agent != nil {
		v.agent = *spec.Agent
	}
	s.defaultStats(v)
	for _, kv := range v.conf {
		if !isDriveKey(kv.Key) {
			continue
		}
		d, ok := parseDrive(kv.Value)
		if !ok || d.isCDROM() {
			continue
		}
		sid, volname, ok := splitVolid(d.file)
		if !ok {
			continue
		}
		st := s.store(v.node, sid)
		if st == nil {
			continue
		}
		size, _ := parseSize(d.opt("size"))
		if st.vols[volname] == nil {
			st.vols[volname] = &Volume{Node: st.node, Storage: sid, Name: volname, Size: size, VMID: v.vmid,
				Format: volumeFormat(volname), CTime: s.now().Unix()}
		}
	}
	s.vms[v.vmid] = v
	return nil
}

func (s *Server) defaultStats(v *vm) {
	if !v.running {
		return
	}
	if v.stats.PID == 0 {
		s.pidSeq++
		v.stats.PID = 1500000 + s.pidSeq%100000
	}
	maxmem := memoryMiB(v.conf) << 20
	if v.stats.Mem == 0 {
		v.stats.Mem = maxmem * 2 / 5
	}
	if v.stats.Balloon == 0 {
		v.stats.Balloon = maxmem
	}
	if v.stats.FreeMem == 0 {
		v.stats.FreeMem = maxmem - v.stats.Mem
	}
	if v.stats.RunningMachine == "" {
		v.stats.RunningMachine = "pc-i440fx-9.2+pve1"
	}
	if v.stats.RunningQEMU == "" {
		v.stats.RunningQEMU = "9.2.0"
	}
}

// ---- knobs ----

// PutVM adds a VM (or replaces one on the same node).
func (s *Server) PutVM(spec VM) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putVMLocked(spec)
}

// VMState is a VM as the fake keeps it.
type VMState struct {
	VMID      int
	Node      string
	Config    []KV
	Running   bool
	QMPStatus string
	Lock      string
}

// VM returns the VM's state, and false if it does not exist.
func (s *Server) VM(vmid int) (VMState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil {
		return VMState{}, false
	}
	return VMState{VMID: v.vmid, Node: v.node, Config: append([]KV(nil), v.conf...), Running: v.running,
		QMPStatus: v.qmpStatus(), Lock: v.lock()}, true
}

// VMIDs lists every VMID, ascending.
func (s *Server) VMIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int
	for id := range s.vms {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// MigrateVM moves a VM (config, disks on non-shared storage, running state)
// to node at once, as a finished migration leaves it: calls for it on the
// old node now answer that its config does not exist there.
func (s *Server) MigrateVM(vmid int, node string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil {
		return fmt.Errorf("no VM %d", vmid)
	}
	if !s.hasNode(node) {
		return fmt.Errorf("no node %q", node)
	}
	for _, kv := range v.conf {
		if !isDriveKey(kv.Key) {
			continue
		}
		d, ok := parseDrive(kv.Value)
		if !ok || d.isCDROM() {
			continue
		}
		sid, volname, ok := splitVolid(d.file)
		if !ok {
			continue
		}
		from, to := s.store(v.node, sid), s.store(node, sid)
		if from != nil && to != nil && from != to {
			if vol := from.vols[volname]; vol != nil {
				delete(from.vols, volname)
				c := *vol
				c.Node = node
				to.vols[volname] = &c
			}
		}
	}
	v.node = node
	return nil
}

// SetLock sets (or with "" clears) the lock field of a VM's config, as a
// backup ("backup"), migration ("migrate") or a crashed clone ("clone")
// leaves it. `qm unlock` is SetLock(vmid, "").
func (s *Server) SetLock(vmid int, lock string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vms[vmid]; v != nil {
		if lock == "" {
			v.conf.del("lock")
		} else {
			v.conf.set("lock", lock)
		}
		v.changed()
	}
}

// SetVMRunning sets a VM's power state (qmp "running", "paused",
// "prelaunch", or "" for stopped) without a task, as if someone used the
// console.
func (s *Server) SetVMRunning(vmid int, qmp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vms[vmid]; v != nil {
		s.setPower(v, qmp)
	}
}

func (s *Server) setPower(v *vm, qmp string) {
	wasRunning := v.running
	v.running = qmp != ""
	v.qmp = qmp
	if v.running && !wasRunning {
		v.stats = Stats{}
		s.defaultStats(v)
		v.static = s.seedStaticAddress(v)
		v.agentWait = s.knobs.agentBoot
		if v.agent.BootSteps > 0 {
			v.agentWait = v.agent.BootSteps
		}
	}
	if !v.running {
		v.stats = Stats{}
		v.stopped()
	}
}

func (v *vm) qmpStatus() string {
	if !v.running {
		return "stopped"
	}
	if v.qmp == "" {
		return "running"
	}
	return v.qmp
}

// ---- lookups ----

// vmOn is load_config on the call's node.
func (s *Server) vmOn(c *call) (*vm, *Error) {
	id := c.vmid()
	v := s.vms[id]
	if v == nil || v.node != c.node {
		return nil, ConfigNotExist(c.node, id)
	}
	return v, nil
}

// ---- status ----

// vmStatus is vmstatus() for one VM: full adds what QMP tells about a
// running one.
func (s *Server) vmStatus(v *vm, full bool) obj {
	o := obj{{"vmid", v.vmid}, {"name", v.name()}, {"status", map[bool]string{true: "running", false: "stopped"}[v.running]}}
	if full {
		o = append(o, field{"qmpstatus", v.qmpStatus()})
		if agentEnabled(v.conf) {
			o = append(o, field{"agent", 1})
		}
	}
	maxmem := memoryMiB(v.conf) << 20
	if v.running {
		o = append(o, field{"pid", v.stats.PID}, field{"uptime", v.stats.Uptime}, field{"cpus", cpus(v.conf)},
			field{"cpu", v.stats.CPU}, field{"mem", v.stats.Mem}, field{"maxmem", maxmem})
		if full {
			o = append(o, field{"freemem", v.stats.FreeMem}, field{"balloon", v.stats.Balloon})
		}
		o = append(o, field{"disk", 0}, field{"maxdisk", bootDiskSize(v.conf)},
			field{"diskread", v.stats.DiskRead}, field{"diskwrite", v.stats.DiskWrite},
			field{"netin", v.stats.NetIn}, field{"netout", v.stats.NetOut})
		if full {
			o = append(o, field{"running-machine", v.stats.RunningMachine}, field{"running-qemu", v.stats.RunningQEMU})
		}
	} else {
		o = append(o, field{"uptime", 0}, field{"cpus", cpus(v.conf)}, field{"cpu", 0}, field{"mem", 0},
			field{"maxmem", maxmem}, field{"disk", 0}, field{"maxdisk", bootDiskSize(v.conf)},
			field{"diskread", 0}, field{"diskwrite", 0}, field{"netin", 0}, field{"netout", 0})
	}
	if l := v.lock(); l != "" {
		o = append(o, field{"lock", l})
	}
	if t, ok := v.conf.get("tags"); ok {
		o = append(o, field{"tags", t})
	}
	if v.isTemplate() {
		o = append(o, field{"template", 1})
	}
	for i := 0; i < 4; i++ {
		if v.conf.val(fmt.Sprintf("serial%d", i)) != "" {
			o = append(o, field{"serial", 1})
			break
		}
	}
	return o
}

func (s *Server) vmList(c *call) (any, *Error) {
	out := []any{}
	for _, id := range s.sortedVMIDs() {
		v := s.vms[id]
		if v.node != c.node || s.check(c.req.authID, "/vms/"+itoa(id), false, "VM.Audit") != nil {
			continue
		}
		out = append(out, s.vmStatus(v, c.p["full"] == "1"))
	}
	return out, nil
}

func (s *Server) vmStatusCurrent(c *call) (any, *Error) {
	v, e := s.vmOn(c)
	if e != nil {
		return nil, e
	}
	o := s.vmStatus(v, true)
	if vga, ok := v.conf.get("vga"); ok {
		typ, _, _ := strings.Cut(vga, ",")
		if strings.HasPrefix(typ, "virtio") || strings.HasPrefix(typ, "qxl") {
			o = append(o, field{"spice", 1})
		}
		var clip any
		if strings.Contains(vga, "clipboard=vnc") {
			clip = "vnc"
		}
		o = append(o, field{"clipboard", clip})
	}
	o = append(o, field{"ha", obj{{"managed", 0}}})
	return o, nil
}

// ---- config ----

func (s *Server) vmConfigGet(c *call) (any, *Error) {
	if c.p["snapshot"] != "" && c.p["current"] == "1" {
		msg := "cannot use 'snapshot' parameter with 'current'"
		return nil, ParamErrors(map[string]string{"snapshot": msg, "current": msg})
	}
	v, e := s.vmOn(c)
	if e != nil {
		return nil, e
	}
	if sn := c.p["snapshot"]; sn != "" {
		return nil, die("snapshot '%s' does not exist\n", sn)
	}
	o := obj{{"digest", v.getDigest()}}
	for _, kv := range v.conf {
		val := kv.Value
		if kv.Key == "cipassword" {
			val = "**********"
		}
		o = append(o, field{kv.Key, configValue(kv.Key, val)})
	}
	return o, nil
}

// configPriv is the privilege check_vm_modify_config_perm wants for a key.
func configPriv(key, value string) string {
	switch {
	case key == "cores" || key == "sockets" || key == "vcpus" || key == "cpu" || key == "cpulimit" ||
		key == "cpuunits" || key == "numa" || key == "affinity":
		return "VM.Config.CPU"
	case key == "memory" || key == "balloon" || key == "shares":
		return "VM.Config.Memory"
	case reNetKey.MatchString(key):
		return "VM.Config.Network"
	case isDriveKey(key):
		d, _ := parseDrive(value)
		if strings.HasSuffix(d.file, ":cloudinit") || strings.Contains(d.file, "cloudinit") {
			return "VM.Config.Cloudinit"
		}
		if d.isCDROM() {
			return "VM.Config.CDROM"
		}
		return "VM.Config.Disk"
	case strings.HasPrefix(key, "ci") || strings.HasPrefix(key, "ipconfig") || key == "sshkeys" ||
		key == "nameserver" || key == "searchdomain":
		return "VM.Config.Cloudinit"
	case key == "name" || key == "description" || key == "tags" || key == "onboot" || key == "protection" ||
		key == "agent" || key == "ostype" || key == "boot" || key == "startup" || key == "hookscript" ||
		key == "localtime" || key == "tablet" || key == "keyboard" || key == "meta":
		return "VM.Config.Options"
	}
	return "VM.Config.HWType"
}

// configMetaParams are update parameters that are not config options.
var configMetaParams = map[string]bool{"node": true, "vmid": true, "digest": true, "delete": true, "revert": true,
	"skiplock": true, "force": true, "background_delay": true}

// vmConfigSet is update_vm_api: POST (async, qmconfig task) or PUT (sync,
// under the config lock in the request).
func (s *Server) vmConfigSet(c *call) (any, *Error) {
	sync := c.req.method == "PUT"
	vmid := c.vmid()
	if c.p["skiplock"] == "1" && c.req.authID != "root@pam" {
		return nil, ParamErrors(map[string]string{"skiplock": "Only root may use this option."})
	}
	set := vmConfig{}
	keys := make([]string, 0, len(c.p))
	for k := range c.p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !configMetaParams[k] {
			set = append(set, KV{k, c.p[k]})
		}
	}
	var del []string
	for _, k := range splitList(c.p["delete"]) {
		if k == "cdrom" {
			k = "ide2"
		}
		if _, ok := set.get(k); ok {
			return nil, ParamErrors(map[string]string{"delete": fmt.Sprintf("you can't use '-%s' and -delete %s' at the same time", k, k)})
		}
		if _, ok := vmConfigParams[k]; (!ok || configMetaParams[k]) && !reUnused.MatchString(k) {
			return nil, ParamErrors(map[string]string{"delete": fmt.Sprintf("unknown option '%s'", k)})
		}
		del = append(del, k)
	}
	if len(set) == 0 && len(del) == 0 && c.p["revert"] == "" {
		return nil, die("no options specified\n")
	}
	for i, kv := range set {
		if isDriveKey(kv.Key) {
			if _, ok := parseDrive(kv.Value); !ok {
				return nil, ParamErrors(map[string]string{kv.Key: "unable to parse drive options"})
			}
		}
		if reNetKey.MatchString(kv.Key) && macOf(set, kv.Key) == "" {
			model, rest, _ := strings.Cut(kv.Value, ",")
			if strings.HasPrefix(model, "model=") {
				model = strings.TrimPrefix(model, "model=")
			}
			set[i].Value = model + "=" + randomMAC()
			if rest != "" {
				set[i].Value += "," + rest
			}
		}
	}
	for _, k := range del {
		if e := s.check(c.req.authID, "/vms/"+itoa(vmid), false, configPriv(k, "")); e != nil {
			return nil, e
		}
	}
	for _, kv := range set {
		if e := s.check(c.req.authID, "/vms/"+itoa(vmid), false, configPriv(kv.Key, kv.Value)); e != nil {
			return nil, e
		}
		if isDriveKey(kv.Key) {
			d, _ := parseDrive(kv.Value)
			if sid, volname, ok := splitVolid(d.file); ok && volumeContent(volname) == "iso" {
				if s.check(c.req.authID, "/storage/"+sid, false, "Datastore.Allocate") != nil {
					if e := s.check(c.req.authID, "/storage/"+sid, true, "Datastore.AllocateSpace", "Datastore.Audit"); e != nil {
						return nil, e
					}
				}
			}
		}
	}

	// $load_and_check_config, early (before forking or locking).
	digest := c.p["digest"]
	loadAndCheck := func() (*vm, *Error) {
		v := s.vms[vmid]
		if v == nil || v.node != c.node {
			return nil, ConfigNotExist(c.node, vmid)
		}
		if digest != "" && digest != v.getDigest() {
			return nil, die("checksum mismatch (file change by other user?)\n")
		}
		if l := v.lock(); l != "" && c.p["skiplock"] != "1" {
			return nil, Locked(l)
		}
		mem := memoryMiB(v.conf)
		if _, ok := set.get("memory"); ok {
			mem = memoryMiB(set)
		}
		if b := set.val("balloon"); b != "" && int64(atoi(b)) > mem {
			return nil, die("balloon value too large (must be smaller than assigned memory)\n")
		}
		return v, nil
	}
	v, e := loadAndCheck()
	if e != nil {
		return nil, e
	}
	// apply is the update itself (create_disks for drives: an existing
	// volume gets its size= set, a missing one fails).
	apply := func(v *vm) *Error {
		next := v.conf.clone()
		for _, kv := range set {
			val := kv.Value
			if isDriveKey(kv.Key) {
				d, _ := parseDrive(val)
				if sid, volname, ok := splitVolid(d.file); ok {
					st := s.store(v.node, sid)
					var vol *Volume
					if st != nil {
						vol = st.vols[volname]
					}
					if vol == nil || vol.Size == 0 {
						return die("volume %s does not exist\n", d.file)
					}
					d.setOpt("size", formatSize(vol.Size))
					val = d.String()
				}
			}
			next.set(kv.Key, val)
		}
		for _, k := range del {
			next.del(k)
		}
		v.conf = next
		v.changed()
		return nil
	}
	if sync {
		if v.flock != nil && v.flock.state != taskDone {
			return nil, LockTimeout(vmid)
		}
		if e := apply(v); e != nil {
			return nil, e
		}
		return nil, nil
	}
	t := s.newTask(c, "qmconfig", itoa(vmid), vmid)
	var params []string
	for _, kv := range set {
		val := kv.Value
		if kv.Key == "cipassword" {
			val = "<hidden>"
		}
		params = append(params, "-"+kv.Key, val)
	}
	if len(del) > 0 {
		params = append(params, "-delete", strings.Join(del, ","))
	}
	t.log(fmt.Sprintf("update VM %d: %s", vmid, strings.Join(params, " ")))
	t.check = func() string {
		v, e := loadAndCheck()
		if e != nil {
			return e.Message
		}
		// create_disks runs in the worker: a drive that cannot be set fails it.
		trial := *v
		trial.conf = v.conf.clone()
		if e := apply(&trial); e != nil {
			return e.Message
		}
		return ""
	}
	t.onEnd = func() {
		if v := s.vms[vmid]; v != nil {
			_ = apply(v)
		}
	}
	upid := s.launch(t)
	if d := c.p["background_delay"]; d != "" {
		return s.waitBriefly(t, d, fmt.Sprintf("failed to update VM %d: %%s", vmid))
	}
	return upid, nil
}

func randomMAC() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", b[0], b[1], b[2])
}

func randomUUIDv4() string { return randomUUID() }

// ---- clone ----

func (s *Server) cloneVM(c *call) (any, *Error) {
	src, e := s.vmOn(c)
	if e != nil {
		return nil, e
	}
	newid := atoi(c.p["newid"])
	target := c.p["target"]
	if target == c.node || target == "localhost" {
		target = ""
	}
	if target != "" && !s.hasNode(target) {
		return nil, die("no such cluster node '%s'\n", target)
	}
	storage := c.p["storage"]
	if storage != "" {
		st, e := s.checkEnabled(storage, c.node)
		if e != nil {
			return nil, e
		}
		if !st.def.content["images"] {
			return nil, ParamErrors(map[string]string{"storage": fmt.Sprintf("storage '%s' does not support vm images", storage)})
		}
		if target != "" {
			if _, e := s.checkEnabled(storage, target); e != nil {
				return nil, e
			}
			if !st.def.Shared {
				return nil, die("can't clone to non-shared storage '%s'\n", storage)
			}
		}
	}
	if l := src.lock(); l != "" {
		return nil, Locked(l)
	}
	if sn := c.p["snapname"]; sn != "" {
		return nil, die("snapshot '%s' does not exist\n", sn)
	}
	full := !src.isTemplate()
	if f, ok := c.p["full"]; ok {
		full = f == "1"
	}
	if storage != "" && !full {
		return nil, die("parameter 'storage' not allowed for linked clones\n")
	}
	if c.p["format"] != "" && !full {
		return nil, die("parameter 'format' not allowed for linked clones\n")
	}

	// The drives to copy, the storage access they need, and whether all are shared.
	type diskJob struct {
		key    string
		drive  drive
		from   *storeInst
		to     *storeInst
		volume string
		size   int64
	}
	var jobs []diskJob
	shared := true
	for _, kv := range src.conf {
		if !reDriveKey.MatchString(kv.Key) {
			continue
		}
		d, ok := parseDrive(kv.Value)
		if !ok {
			return nil, die("unable to parse drive options for '%s'\n", kv.Key)
		}
		if d.isCDROM() {
			continue
		}
		sid, volname, ok := splitVolid(d.file)
		if !ok {
			return nil, die("Full clone feature is not supported for '%s' (%s)\n", d.file, kv.Key)
		}
		from := s.store(c.node, sid)
		if from == nil {
			return nil, StorageNotExist(sid)
		}
		shared = shared && from.def.Shared
		if e := s.check(c.req.authID, "/storage/"+sid, false, "Datastore.AllocateSpace"); e != nil {
			return nil, e
		}
		to := from
		if full && storage != "" {
			to = s.store(c.node, storage)
		}
		if !full && !(strings.HasPrefix(volname, "base-") && linkedCloneCapable(from.def)) {
			return nil, die("Linked clone feature is not supported for '%s' (%s)\n", d.file, kv.Key)
		}
		size, _ := parseSize(d.opt("size"))
		if vol := from.vols[volname]; vol != nil && size == 0 {
			size = vol.Size
		}
		jobs = append(jobs, diskJob{key: kv.Key, drive: d, from: from, to: to, volume: volname, size: size})
	}
	if storage != "" {
		if e := s.check(c.req.authID, "/storage/"+storage, false, "Datastore.AllocateSpace"); e != nil {
			return nil, e
		}
	}
	if target != "" && !shared {
		return nil, die("can't clone VM to node '%s' (VM uses local storage)\n", target)
	}
	if v := s.vms[newid]; v != nil && v.node == c.node {
		return nil, ConfigExists(newid)
	}

	t := s.newTask(c, "qmclone", itoa(src.vmid), newid)
	kind := map[bool]string{true: "full", false: "linked"}[full]
	var total int64
	for _, j := range jobs {
		total += j.size
	}
	t.check = func() string {
		if v := s.vms[newid]; v != nil {
			if v.node == c.node {
				return fmt.Sprintf("unable to create VM %d: config file already exists", newid)
			}
			// pmxcfs refuses a VMID another node has (file_set_contents' rename).
			return fmt.Sprintf("close (rename) atomic file '/etc/pve/nodes/%s/qemu-server/%d.conf' failed: File exists", c.node, newid)
		}
		return ""
	}
	var created []*Volume
	var createdIn []*storeInst
	t.onStart = func() {
		s.vms[newid] = &vm{vmid: newid, node: c.node, conf: vmConfig{{"lock", "clone"}}, flock: t}
		t.log(fmt.Sprintf("creating a clone of VM %d with ID %d", src.vmid, newid))
	}
	newConf := vmConfig{}
	srcName := src.conf.val("name")
	for _, kv := range src.conf {
		switch {
		case kv.Key == "template" || kv.Key == "lock" || reUnused.MatchString(kv.Key) ||
			kv.Key == "parent" || kv.Key == "snaptime" || kv.Key == "vmstate" || kv.Key == "runningcpu" ||
			kv.Key == "runningmachine":
			continue
		case reNetKey.MatchString(kv.Key):
			newConf = append(newConf, KV{kv.Key, setMAC(kv.Value, randomMAC())})
		case kv.Key == "smbios1":
			newConf = append(newConf, KV{kv.Key, "uuid=" + randomUUIDv4()})
		case kv.Key == "vmgenid":
			newConf = append(newConf, KV{kv.Key, randomUUIDv4()})
		default:
			newConf = append(newConf, kv)
		}
	}
	if n := c.p["name"]; n != "" {
		newConf.set("name", n)
	} else if srcName != "" {
		newConf.set("name", "Copy-of-VM-"+srcName)
	} else {
		newConf.set("name", fmt.Sprintf("Copy-of-VM-%d", src.vmid))
	}
	if d := c.p["description"]; d != "" {
		newConf.set("description", d)
	}
	finalTarget := c.node
	if target != "" {
		finalTarget = target
	}
	fail := ""
	jobIdx := 0
	t.progress = func(done, polls int) {
		if !full || total == 0 {
			return
		}
		pct := float64(done) / float64(polls) * 100
		t.log(fmt.Sprintf("transferred %s of %s (%.2f%%)", renderBytes(int64(float64(total)*pct/100)), renderBytes(total), pct))
	}
	// The disks are copied (space taken) when the task starts; a copy that
	// does not fit fails the task.
	origStart := t.onStart
	t.onStart = func() {
		origStart()
		for jobIdx < len(jobs) {
			j := jobs[jobIdx]
			jobIdx++
			newVol := freeDiskName(j.to, newid)
			if !full {
				newVol = j.volume + "/" + newVol
			}
			t.log(fmt.Sprintf("create %s clone of drive %s (%s)", kind, j.key, j.drive.file))
			if strings.HasPrefix(j.to.def.Type, "lvm") {
				t.log(fmt.Sprintf("  Logical volume \"%s\" created.", lastSegment(newVol)))
			}
			need := j.size
			if !full {
				need = 0
			}
			if need > 0 && (j.to.full || j.to.avail() < need) {
				fail = cloneSpaceError(t, j.to, j.from, j.volume, newVol, need)
				break
			}
			vol := &Volume{Node: j.to.node, Storage: j.to.def.ID, Name: newVol, Size: j.size, VMID: newid,
				Format: "raw", CTime: s.now().Unix()}
			j.to.vols[newVol] = vol
			created = append(created, vol)
			createdIn = append(createdIn, j.to)
			nd := j.drive
			nd.file = j.to.def.ID + ":" + newVol
			newConf.set(j.key, nd.String())
		}
		if fail != "" {
			t.outcome = TaskOutcome{Error: fail}
		}
	}
	t.onFail = func() {
		for i, vol := range created {
			delete(createdIn[i].vols, vol.Name)
		}
		if v := s.vms[newid]; v != nil && v.flock == t {
			delete(s.vms, newid)
		}
	}
	t.onEnd = func() {
		v := s.vms[newid]
		if v == nil {
			return
		}
		v.conf = newConf
		v.changed()
		if finalTarget != v.node {
			v.node = finalTarget
		}
	}
	return s.launch(t), nil
}

func linkedCloneCapable(d *storageDef) bool {
	switch d.Type {
	case "lvmthin", "zfspool", "rbd", "dir", "nfs", "cifs", "btrfs":
		return true
	}
	return false
}

func lastSegment(s string) string { return s[strings.LastIndex(s, "/")+1:] }

// freeDiskName is find_free_diskname: vm-<vmid>-disk-<n>, the lowest n free.
func freeDiskName(st *storeInst, vmid int) string {
	for n := 0; ; n++ {
		name := fmt.Sprintf("vm-%d-disk-%d", vmid, n)
		taken := false
		for vn := range st.vols {
			if lastSegment(vn) == name {
				taken = true
				break
			}
		}
		if !taken {
			return name
		}
	}
}

// cloneSpaceError is how a full clone that does not fit fails. LVM's
// alloc_image compares the VG's free bytes with the size in KiB
// (LVMPlugin.pm "not enough free space ($free < $size)"), which only a
// nearly full VG fails; otherwise lvcreate does, with LVM's message (4 MiB
// extents). Other storages fail in qemu-img's copy, whose error only the
// task log shows.
func cloneSpaceError(t *task, to, from *storeInst, srcVol, newVol string, need int64) string {
	if to.def.Type == "lvm" {
		if to.avail() < need/1024 {
			return fmt.Sprintf("clone failed: not enough free space (%d < %d)", to.avail(), need/1024)
		}
		return fmt.Sprintf("clone failed: lvcreate 'pve/%s' error:   Volume group \"pve\" has insufficient free space (%d extents): %d required.",
			lastSegment(newVol), to.avail()>>22, (need+(1<<22)-1)>>22)
	}
	t.log(fmt.Sprintf("qemu-img: error while writing at byte %d: No space left on device", to.avail()))
	return fmt.Sprintf("clone failed: copy failed: command '/usr/bin/qemu-img convert -p -n -f raw -O raw %s %s' failed: exit code 1",
		volPath(from, srcVol), volPath(to, lastSegment(newVol)))
}

func volPath(st *storeInst, volname string) string {
	if st.def.fileBased() {
		return st.def.Path + "/images/" + volname
	}
	return "/dev/pve/" + lastSegment(volname)
}

// renderBytes is PVE::Format::render_bytes with precision 1.
func renderBytes(v int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(v)
	u := 0
	for f > 1023 && u < len(units)-1 {
		f /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}

// ---- resize ----

func (s *Server) resizeVM(c *call) (any, *Error) {
	vmid := c.vmid()
	if c.p["skiplock"] == "1" && c.req.authID != "root@pam" {
		return nil, ParamErrors(map[string]string{"skiplock": "Only root may use this option."})
	}
	disk, sizeStr, digest := c.p["disk"], c.p["size"], c.p["digest"]
	t := s.newTask(c, "resize", itoa(vmid), vmid)
	var apply func()
	t.check = func() string {
		v := s.vms[vmid]
		if v == nil || v.node != c.node {
			return ConfigNotExist(c.node, vmid).Message
		}
		if digest != "" && digest != v.getDigest() {
			return "checksum mismatch (file change by other user?)"
		}
		if l := v.lock(); l != "" && c.p["skiplock"] != "1" {
			return Locked(l).Message
		}
		val, ok := v.conf.get(disk)
		if !ok {
			return fmt.Sprintf("disk '%s' does not exist", disk)
		}
		d, _ := parseDrive(val)
		if d.isCDROM() {
			return "you can't resize a cdrom"
		}
		sid, volname, ok := splitVolid(d.file)
		if !ok {
			return fmt.Sprintf("disk '%s' has no associated volume", disk)
		}
		if e := s.check(c.req.authID, "/storage/"+sid, false, "Datastore.AllocateSpace"); e != nil {
			return e.Message
		}
		st := s.store(v.node, sid)
		var vol *Volume
		if st != nil {
			vol = st.vols[volname]
		}
		if vol == nil {
			return fmt.Sprintf("Could not determine current size of volume '%s'", d.file)
		}
		add := strings.HasPrefix(sizeStr, "+")
		n, _ := parseSize(strings.TrimPrefix(sizeStr, "+"))
		if add {
			n += vol.Size
		}
		if n < vol.Size {
			return "shrinking disks is not supported"
		}
		if n == vol.Size {
			return ""
		}
		if st.full || st.avail() < n-vol.Size && !strings.HasSuffix(st.def.Type, "thin") {
			if st.def.fileBased() {
				return fmt.Sprintf("command '/usr/bin/qemu-img resize -f raw %s %d' failed: exit code 1", volPath(st, volname), n)
			}
			return fmt.Sprintf("command '/sbin/lvextend -L%dk %s/%s' failed: exit code 5", n/1024, "pve", lastSegment(volname))
		}
		if strings.HasPrefix(st.def.Type, "lvm") {
			t.log(fmt.Sprintf("  Size of logical volume pve/%s changed from %s to %s.", lastSegment(volname), renderBytes(vol.Size), renderBytes(n)))
		}
		apply = func() {
			vol.Size = n
			d.setOpt("size", formatSize(n))
			v.conf.set(disk, d.String())
			v.changed()
		}
		return ""
	}
	t.onEnd = func() {
		if apply != nil {
			apply()
		}
	}
	return s.launch(t), nil
}

// ---- power ----

func (s *Server) rootOnly(c *call, keys ...string) *Error {
	for _, k := range keys {
		if c.p[k] != "" && c.p[k] != "0" && c.req.authID != "root@pam" {
			return ParamErrors(map[string]string{k: "Only root may use this option."})
		}
	}
	return nil
}

func (s *Server) vmStart(c *call) (any, *Error) {
	if e := s.rootOnly(c, "stateuri", "skiplock", "migratedfrom", "migration_type", "migration_network", "targetstorage", "force-cpu"); e != nil {
		return nil, e
	}
	vmid := c.vmid()
	t := s.newTask(c, "qmstart", itoa(vmid), vmid)
	t.check = func() string {
		v := s.vms[vmid]
		if v == nil || v.node != c.node {
			return ConfigNotExist(c.node, vmid).Message
		}
		if v.isTemplate() {
			return "you can't start a vm if it's a template"
		}
		if l := v.lock(); l != "" && l != "suspended" {
			return Locked(l).Message
		}
		if v.running {
			return fmt.Sprintf("VM %d already running", vmid)
		}
		// vm_start_nolock activates every volume the config names, ISOs
		// included: a deleted seed ISO stops the start.
		for _, kv := range v.conf {
			if !reDriveKey.MatchString(kv.Key) {
				continue
			}
			d, ok := parseDrive(kv.Value)
			if !ok {
				continue
			}
			if sid, volname, ok := splitVolid(d.file); ok {
				if st := s.store(v.node, sid); st == nil || st.vols[volname] == nil {
					return fmt.Sprintf("volume '%s' does not exist", d.file)
				}
			}
		}
		return ""
	}
	t.onEnd = func() {
		if v := s.vms[vmid]; v != nil {
			if v.lock() == "suspended" {
				v.conf.del("lock")
				v.conf.del("vmstate")
				v.changed()
			}
			s.setPower(v, "running")
		}
	}
	return s.launch(t), nil
}

// vmStop is stop (qmstop) and shutdown (qmshutdown): a stopped VM is
// nothing to do, a locked one fails in the worker.
func (s *Server) vmStop(c *call) (any, *Error) {
	if e := s.rootOnly(c, "skiplock", "keepActive", "migratedfrom"); e != nil {
		return nil, e
	}
	vmid := c.vmid()
	typ := "qmstop"
	if strings.HasSuffix(c.req.rel, "/shutdown") {
		typ = "qmshutdown"
		if v := s.vms[vmid]; v != nil && v.node == c.node && v.running && v.qmp == "paused" && c.p["forceStop"] != "1" {
			return nil, die("VM is paused - cannot shutdown\n")
		}
	}
	t := s.newTask(c, typ, itoa(vmid), vmid)
	t.check = func() string {
		v := s.vms[vmid]
		if v == nil || v.node != c.node {
			return NotOnNode(c.node, vmid).Message
		}
		if !v.running {
			return ""
		}
		if l := v.lock(); l != "" && c.p["skiplock"] != "1" {
			return Locked(l).Message
		}
		return ""
	}
	t.onEnd = func() {
		if v := s.vms[vmid]; v != nil {
			s.setPower(v, "")
		}
	}
	return s.launch(t), nil
}

// vmSuspend pauses (qmpause) or, with todisk=1, hibernates (qmsuspend):
// the VM stops with its state saved and the config locked "suspended".
func (s *Server) vmSuspend(c *call) (any, *Error) {
	if e := s.rootOnly(c, "skiplock"); e != nil {
		return nil, e
	}
	vmid := c.vmid()
	v := s.vms[vmid]
	if v == nil || v.node != c.node {
		return nil, NotOnNode(c.node, vmid)
	}
	if !v.running {
		return nil, NotRunning(vmid)
	}
	todisk := c.p["todisk"] == "1"
	typ := "qmpause"
	if todisk {
		typ = "qmsuspend"
		if e := s.check(c.req.authID, "/vms/"+itoa(vmid), false, "VM.Config.Disk"); e != nil {
			return nil, e
		}
	}
	t := s.newTask(c, typ, itoa(vmid), vmid)
	t.check = func() string {
		v := s.vms[vmid]
		if v == nil || !v.running {
			return fmt.Sprintf("VM %d not running", vmid)
		}
		if l := v.lock(); l != "" && c.p["skiplock"] != "1" {
			return Locked(l).Message
		}
		return ""
	}
	t.onEnd = func() {
		v := s.vms[vmid]
		if v == nil {
			return
		}
		if !todisk {
			v.qmp = "paused"
			return
		}
		sid := "local-lvm"
		for _, kv := range v.conf {
			if reDriveKey.MatchString(kv.Key) {
				if d, ok := parseDrive(kv.Value); ok && !d.isCDROM() {
					sid, _, _ = splitVolid(d.file)
					break
				}
			}
		}
		v.conf.set("lock", "suspended")
		v.conf.set("vmstate", fmt.Sprintf("%s:vm-%d-state-suspend-%s", sid, vmid, s.now().UTC().Format("2006-01-02")))
		v.changed()
		s.setPower(v, "")
	}
	return s.launch(t), nil
}

// vmResume resumes a paused VM or starts a hibernated one (lock
// "suspended"); a VM that neither runs nor is hibernated is refused.
func (s *Server) vmResume(c *call) (any, *Error) {
	if e := s.rootOnly(c, "skiplock", "nocheck"); e != nil {
		return nil, e
	}
	vmid := c.vmid()
	v := s.vms[vmid]
	if v == nil || v.node != c.node {
		return nil, NotOnNode(c.node, vmid)
	}
	hibernated := v.lock() == "suspended"
	if !hibernated && !v.running {
		return nil, NotRunning(vmid)
	}
	t := s.newTask(c, "qmresume", itoa(vmid), vmid)
	t.onEnd = func() {
		v := s.vms[vmid]
		if v == nil {
			return
		}
		if hibernated {
			v.conf.del("lock")
			v.conf.del("vmstate")
			v.changed()
			s.setPower(v, "running")
			return
		}
		v.qmp = "running"
	}
	return s.launch(t), nil
}

// ---- destroy ----

// baseInUse is the first of the template's base volumes a linked clone
// uses (its volname is "base-<vmid>-disk-<n>/vm-...").
func (s *Server) baseInUse(tpl *vm) string {
	for _, other := range s.vms {
		if other == tpl {
			continue
		}
		for _, kv := range other.conf {
			if !isDriveKey(kv.Key) {
				continue
			}
			d, ok := parseDrive(kv.Value)
			if !ok {
				continue
			}
			if sid, volname, ok := splitVolid(d.file); ok && strings.HasPrefix(volname, fmt.Sprintf("base-%d-disk-", tpl.vmid)) {
				if base, _, linked := strings.Cut(volname, "/"); linked {
					return sid + ":" + base
				}
			}
		}
	}
	return ""
}

func (s *Server) destroyVM(c *call) (any, *Error) {
	if e := s.rootOnly(c, "skiplock"); e != nil {
		return nil, e
	}
	vmid := c.vmid()
	early := func() *Error {
		v := s.vms[vmid]
		if v == nil || v.node != c.node {
			return ConfigNotExist(c.node, vmid)
		}
		if v.conf.val("protection") == "1" {
			return die("can't remove VM %d - protection mode enabled\n", vmid)
		}
		if v.running {
			return RunningDestroy(vmid)
		}
		return nil
	}
	if e := early(); e != nil {
		return nil, e
	}
	purgeUnref := c.p["destroy-unreferenced-disks"] == "1"
	t := s.newTask(c, "qmdestroy", itoa(vmid), vmid)
	var before vmConfig
	t.check = func() string {
		if e := early(); e != nil {
			return strings.TrimSuffix(e.Message, "\n")
		}
		v := s.vms[vmid]
		if l := v.lock(); l != "" && l != "suspended" && c.p["skiplock"] != "1" {
			return Locked(l).Message
		}
		if v.isTemplate() {
			if base := s.baseInUse(v); base != "" {
				return fmt.Sprintf("base volume '%s' is still in use by linked cloned", base)
			}
		}
		return ""
	}
	t.onStart = func() {
		v := s.vms[vmid]
		before = v.conf
		v.conf = vmConfig{{"lock", "destroyed"}}
		v.changed()
	}
	t.onFail = func() {
		if v := s.vms[vmid]; v != nil && before != nil {
			v.conf = before
			v.changed()
		}
	}
	t.onEnd = func() {
		v := s.vms[vmid]
		if v == nil {
			return
		}
		for _, kv := range before {
			if !isDriveKey(kv.Key) {
				continue
			}
			d, ok := parseDrive(kv.Value)
			if !ok || (d.isCDROM() && !reUnused.MatchString(kv.Key)) {
				continue
			}
			if sid, volname, ok := splitVolid(d.file); ok {
				if st := s.store(v.node, sid); st != nil && st.vols[volname] != nil {
					delete(st.vols, volname)
					t.log(fmt.Sprintf("  Logical volume \"%s\" successfully removed.", lastSegment(volname)))
				}
			}
		}
		if purgeUnref {
			for _, st := range s.stores {
				if st.node != "" && st.node != v.node {
					continue
				}
				for name, vol := range st.vols {
					if vol.VMID == vmid && volumeContent(name) == "images" {
						delete(st.vols, name)
					}
				}
			}
		}
		if c.p["purge"] == "1" {
			t.log(fmt.Sprintf("purging VM %d from related configurations..", vmid))
		}
		delete(s.vms, vmid)
	}
	return s.launch(t), nil
}
