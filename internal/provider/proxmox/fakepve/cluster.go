package fakepve

import (
	"fmt"
	"regexp"
	"strings"
)

// ---- knobs ----

// SetNodeOffline makes node unreachable for the proxy (err nil: back
// online): calls for /nodes/<node>/... answer err (Unreachable(595, "No
// route to host") when err is the zero Error), /nodes and
// /cluster/resources list it "offline" and its guests "unknown".
func (s *Server) SetNodeOffline(node string, err *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.offline, node)
		return
	}
	if err.Status == 0 {
		err = Unreachable(595, "No route to host")
	}
	s.offline[node] = err
}

// SetStatsInterval sets how often (in Advance steps) pvestatd refreshes the
// statistics /cluster/resources reports (name, status, template, sizes,
// counters; lock and tags are always current). 0, the default, is current
// on every read. With n > 0 a VM created since the last refresh is listed
// with status "unknown" and no name, and a clone's entry shows "VM <vmid>"
// (vmstatus' name for a config without one) until its task ends and the
// next refresh.
func (s *Server) SetStatsInterval(steps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.statsInterval = steps
	if steps > 0 {
		s.snapshotStatsLocked()
	}
}

// SetNextID sets datacenter.cfg's next-id range [lower, upper).
func (s *Server) SetNextID(lower, upper int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID = NextID{lower, upper}
}

func (s *Server) snapshotStatsLocked() {
	for _, v := range s.vms {
		v.rrd = s.rrdEntry(v)
	}
}

// rrdEntry is what pvestatd writes for a VM: vmstatus' name (or "VM
// <vmid>"), qmpstatus (paused, prelaunch) or status, template, sizes and
// counters.
func (s *Server) rrdEntry(v *vm) obj {
	status := v.qmpStatus()
	o := obj{{"name", v.name()}, {"status", status}, {"template", boolInt(v.isTemplate())}}
	maxmem := memoryMiB(v.conf) << 20
	if v.running {
		o = append(o, field{"cpu", v.stats.CPU}, field{"maxcpu", cpus(v.conf)}, field{"mem", v.stats.Mem},
			field{"maxmem", maxmem}, field{"disk", 0}, field{"maxdisk", bootDiskSize(v.conf)},
			field{"netin", v.stats.NetIn}, field{"netout", v.stats.NetOut}, field{"diskread", v.stats.DiskRead},
			field{"diskwrite", v.stats.DiskWrite}, field{"uptime", v.stats.Uptime})
	} else {
		o = append(o, field{"cpu", 0}, field{"maxcpu", cpus(v.conf)}, field{"mem", 0}, field{"maxmem", maxmem},
			field{"disk", 0}, field{"maxdisk", bootDiskSize(v.conf)}, field{"netin", 0}, field{"netout", 0},
			field{"diskread", 0}, field{"diskwrite", 0}, field{"uptime", 0})
	}
	return o
}

// ---- handlers ----

func (s *Server) getVersion(c *call) (any, *Error) {
	return obj{{"version", s.version.Version}, {"release", s.version.Release}, {"repoid", s.version.RepoID}}, nil
}

func (s *Server) nodeEntry(n string, audit bool) obj {
	if s.offline[n] != nil {
		return obj{{"id", "node/" + n}, {"type", "node"}, {"node", n}, {"status", "offline"}}
	}
	o := obj{{"id", "node/" + n}, {"type", "node"}, {"node", n}, {"status", "online"}}
	if audit {
		o = append(o, field{"cpu", 0.0412}, field{"maxcpu", 16}, field{"mem", int64(27541389312)},
			field{"maxmem", int64(67280027648)}, field{"disk", int64(12044009472)}, field{"maxdisk", int64(100861726720)},
			field{"uptime", 874399 + s.step})
	}
	o = append(o, field{"level", ""})
	return o
}

func (s *Server) listNodes(c *call) (any, *Error) {
	out := []any{}
	for _, n := range s.nodes {
		audit := s.check(c.req.authID, "/nodes/"+n, false, "Sys.Audit") == nil
		e := s.nodeEntry(n, audit)
		e = append(e, field{"ssl_fingerprint", "3F:6A:5B:1C:0D:2E:9F:80:71:62:53:44:35:26:17:08:F9:EA:DB:CC:BD:AE:9F:80:71:62:53:44:35:26:17:08"})
		out = append(out, e)
	}
	return out, nil
}

func (s *Server) nodeStatus(c *call) (any, *Error) {
	return obj{
		{"uptime", 874399 + s.step}, {"idle", 0},
		{"loadavg", []string{"0.18", "0.22", "0.19"}},
		{"kversion", "Linux 6.14.11-4-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.11-4 (2025-10-10T08:04Z)"},
		{"current-kernel", obj{{"sysname", "Linux"}, {"release", "6.14.11-4-pve"},
			{"version", "#1 SMP PREEMPT_DYNAMIC PMX 6.14.11-4 (2025-10-10T08:04Z)"}, {"machine", "x86_64"}}},
		{"boot-info", obj{{"mode", "efi"}, {"secureboot", 0}}},
		{"cpuinfo", obj{{"model", "AMD EPYC 7302P 16-Core Processor"}, {"cpus", 16}, {"sockets", 1},
			{"cores", 16}, {"mhz", "3000.000"}, {"hvm", "1"}, {"user_hz", 100}, {"flags", "fpu vme de pse tsc msr pae mce"}}},
		{"cpu", 0.0412}, {"wait", 0.0011},
		{"memory", obj{{"free", int64(39738638336)}, {"total", int64(67280027648)}, {"available", int64(41921085440)},
			{"used", int64(27541389312)}}},
		{"ksm", obj{{"shared", 0}}},
		{"swap", obj{{"free", int64(8589930496)}, {"total", int64(8589930496)}, {"used", 0}}},
		{"pveversion", "pve-manager/" + s.version.Version + "/" + s.version.RepoID},
		{"rootfs", obj{{"total", int64(100861726720)}, {"avail", int64(83646255104)}, {"used", int64(12044009472)},
			{"free", int64(88817717248)}}},
	}, nil
}

// clusterResources is pve-manager API2/Cluster.pm resources: VMs (by VMID
// as strings sort), nodes, storages per node; lock and tags from the
// configs, the rest from the statistics pvestatd wrote.
func (s *Server) clusterResources(c *call) (any, *Error) {
	typ := c.p["type"]
	out := []any{}
	if typ == "" || typ == "vm" {
		for _, id := range s.sortedVMIDs() {
			v := s.vms[id]
			if s.check(c.req.authID, "/vms/"+itoa(id), false, "VM.Audit") != nil {
				continue
			}
			e := obj{{"id", "qemu/" + itoa(id)}, {"type", "qemu"}, {"vmid", id}}
			var stats obj
			switch {
			case s.offline[v.node] != nil:
			case s.knobs.statsInterval > 0:
				stats = v.rrd
			default:
				stats = s.rrdEntry(v)
			}
			if stats != nil {
				e = append(e, field{"name", stats[0].v}, field{"node", v.node})
				e = append(e, stats[1:]...)
			} else {
				e = append(e, field{"node", v.node}, field{"status", "unknown"})
			}
			if t, ok := v.conf.get("tags"); ok {
				e = append(e, field{"tags", t})
			}
			if l := v.lock(); l != "" {
				e = append(e, field{"lock", l})
			}
			out = append(out, e)
		}
	}
	if typ == "" || typ == "node" {
		for _, n := range s.nodes {
			e := s.nodeEntry(n, s.check(c.req.authID, "/nodes/"+n, false, "Sys.Audit") == nil)
			if s.offline[n] == nil {
				e = append(e, field{"cgroup-mode", 2})
			}
			out = append(out, e)
		}
	}
	if typ == "" || typ == "storage" {
		for _, d := range s.storages {
			if s.check(c.req.authID, "/storage/"+d.ID, false, "Datastore.Audit") != nil {
				continue
			}
			for _, n := range s.nodes {
				if !d.onNode(n) || d.Disable {
					continue
				}
				e := obj{{"id", "storage/" + n + "/" + d.ID}, {"type", "storage"}, {"storage", d.ID}, {"node", n}}
				st := s.store(n, d.ID)
				if s.offline[n] != nil || st == nil || !st.active {
					e = append(e, field{"status", "unknown"}, field{"plugintype", d.Type},
						field{"content", contentString(d)}, field{"shared", boolInt(d.Shared)})
				} else {
					used := st.usedBytes()
					if st.full {
						used = d.Capacity
					}
					e = append(e, field{"status", "available"}, field{"plugintype", d.Type},
						field{"content", contentString(d)}, field{"shared", boolInt(d.Shared)},
						field{"disk", used}, field{"maxdisk", d.Capacity})
				}
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// nextID is /cluster/nextid: the given VMID if free (else 400 "VM <n>
// already exists"), or the lowest free one of the range. The answer is a
// JSON string, as Perl stringifies the loop variable used as a hash key.
func (s *Server) nextIDHandler(c *call) (any, *Error) {
	if id, ok := c.p["vmid"]; ok {
		if s.vms[atoi(id)] == nil {
			return id, nil
		}
		return nil, ParamErrors(map[string]string{"vmid": fmt.Sprintf("VM %s already exists", id)})
	}
	for i := s.nextID.Lower; i < s.nextID.Upper; i++ {
		if s.vms[i] == nil {
			return itoa(i), nil
		}
	}
	return nil, NoFreeVMID(s.nextID.Lower, s.nextID.Upper)
}

var reACLPath = regexp.MustCompile(`^/(?:[^/]+(?:/[^/]+)*)?$`)

// permissions is /access/permissions for the caller (or a token it owns):
// path -> privilege -> propagate (1).
func (s *Server) permissions(c *call) (any, *Error) {
	id := c.req.authID
	if u, ok := c.p["userid"]; ok && u != id {
		user, _ := splitTokenID(id)
		owner, _ := splitTokenID(u)
		if owner != user || s.tokens[u] == nil {
			if e := s.check(id, "/access", false, "Sys.Audit"); e != nil {
				return nil, e
			}
		}
		id = u
	}
	privObj := func(path string) obj {
		set := s.privs(id, path)
		o := obj{}
		for _, p := range Administrator {
			if set[p] {
				o = append(o, field{p, 1})
			}
		}
		return o
	}
	if p, ok := c.p["path"]; ok {
		if !reACLPath.MatchString(p) {
			return nil, ParamErrors(map[string]string{"path": "invalid format - invalid ACL path '" + p + "'\n"})
		}
		o := privObj(p)
		if len(o) == 0 {
			return obj{}, nil
		}
		return obj{{p, o}}, nil
	}
	out := obj{}
	if t := s.tokens[id]; t != nil {
		seen := map[string]bool{}
		for _, e := range t.ACL {
			if seen[e.Path] {
				continue
			}
			seen[e.Path] = true
			if o := privObj(e.Path); len(o) > 0 {
				out = append(out, field{e.Path, o})
			}
		}
	}
	return out, nil
}

// ---- routes ----

var vmConfigParams = func() schema {
	sc := schema{
		"name":         {typ: tString, optional: true, format: "dns-name"},
		"description":  {typ: tString, optional: true, maxLen: 8192},
		"tags":         {typ: tString, optional: true, format: "pve-tag-list"},
		"cores":        {typ: tInteger, optional: true, min: fptr(1)},
		"sockets":      {typ: tInteger, optional: true, min: fptr(1)},
		"vcpus":        {typ: tInteger, optional: true, min: fptr(1)},
		"memory":       {typ: tString, optional: true, format: "memory"},
		"balloon":      {typ: tInteger, optional: true, min: fptr(0)},
		"shares":       {typ: tInteger, optional: true, min: fptr(0), max: fptr(50000)},
		"agent":        {typ: tString, optional: true, format: "agent"},
		"onboot":       pBool,
		"protection":   pBool,
		"numa":         pBool,
		"kvm":          pBool,
		"acpi":         pBool,
		"tablet":       pBool,
		"localtime":    pBool,
		"cpu":          pString,
		"cpulimit":     {typ: tNumber, optional: true, min: fptr(0), max: fptr(128)},
		"cpuunits":     {typ: tInteger, optional: true, min: fptr(1), max: fptr(262144)},
		"boot":         pString,
		"bios":         {typ: tString, optional: true, enum: []string{"seabios", "ovmf"}},
		"machine":      pString,
		"ostype":       {typ: tString, optional: true, enum: []string{"other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24", "l26", "solaris"}},
		"scsihw":       {typ: tString, optional: true, enum: []string{"lsi", "lsi53c810", "virtio-scsi-pci", "virtio-scsi-single", "megasas", "pvscsi"}},
		"vga":          pString,
		"smbios1":      {typ: tString, optional: true, maxLen: 512},
		"vmgenid":      pString,
		"meta":         pString,
		"startup":      pString,
		"hookscript":   pString,
		"hotplug":      pString,
		"citype":       {typ: tString, optional: true, enum: []string{"configdrive2", "nocloud", "opennebula"}},
		"ciuser":       pString,
		"cipassword":   pString,
		"ciupgrade":    pBool,
		"cicustom":     pString,
		"sshkeys":      pString,
		"searchdomain": pString,
		"nameserver":   pString,
		"skiplock":     pSkiplock,
		"digest":       pDigest,
		"delete":       {typ: tString, optional: true, format: "pve-configid-list"},
		"revert":       {typ: tString, optional: true, format: "pve-configid-list"},
		"force":        pBool,
		"node":         pNode,
		"vmid":         pVMID,
	}
	for i := 0; i < 4; i++ {
		sc[fmt.Sprintf("serial%d", i)] = pString
		sc[fmt.Sprintf("ide%d", i)] = pspec{typ: tString, optional: true, format: "drive"}
	}
	for i := 0; i < 10; i++ {
		sc[fmt.Sprintf("net%d", i)] = pspec{typ: tString, optional: true, format: "net"}
		sc[fmt.Sprintf("ipconfig%d", i)] = pString
	}
	for i := 0; i <= 30; i++ {
		sc[fmt.Sprintf("scsi%d", i)] = pspec{typ: tString, optional: true, format: "drive"}
	}
	for i := 0; i < 16; i++ {
		sc[fmt.Sprintf("virtio%d", i)] = pspec{typ: tString, optional: true, format: "drive"}
	}
	for i := 0; i < 6; i++ {
		sc[fmt.Sprintf("sata%d", i)] = pspec{typ: tString, optional: true, format: "drive"}
	}
	sc["efidisk0"] = pspec{typ: tString, optional: true, format: "drive"}
	sc["tpmstate0"] = pspec{typ: tString, optional: true, format: "drive"}
	return sc
}()

func withParams(base schema, extra schema) schema {
	out := schema{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

var driveNames = func() []string {
	var out []string
	for _, p := range []struct {
		prefix string
		n      int
	}{{"ide", 4}, {"sata", 6}, {"scsi", 31}, {"virtio", 16}} {
		for i := 0; i < p.n; i++ {
			out = append(out, fmt.Sprintf("%s%d", p.prefix, i))
		}
	}
	return append(out, "efidisk0", "tpmstate0")
}()

func vmPath(rest string) []string {
	return strings.Split("nodes/{node}/qemu/{vmid}"+rest, "/")
}

var routes []*route

func init() {
	var s *Server // method expressions below take the receiver at call time
	_ = s
	vm := schema{"node": pNode, "vmid": pVMID}
	vmPerm := func(privs ...string) func(*call) *Error { return perm("/vms/{vmid}", false, privs...) }
	h := func(f func(*Server, *call) (any, *Error)) func(*call) (any, *Error) {
		return func(c *call) (any, *Error) { return f(c.s, c) }
	}
	configPerms := []string{"VM.Config.Disk", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Memory",
		"VM.Config.Network", "VM.Config.HWType", "VM.Config.Options", "VM.Config.Cloudinit"}
	routes = []*route{
		{method: "GET", path: []string{"version"}, params: schema{}, handle: h((*Server).getVersion)},
		{method: "GET", path: []string{"nodes"}, params: schema{}, handle: h((*Server).listNodes)},
		{method: "GET", path: []string{"nodes", "{node}", "status"}, proxy: true,
			perm: perm("/nodes/{node}", false, "Sys.Audit"), params: schema{"node": pNode}, handle: h((*Server).nodeStatus)},
		{method: "GET", path: []string{"cluster", "resources"},
			params: schema{"type": {typ: tString, optional: true, enum: []string{"vm", "storage", "node", "sdn", "pool"}}},
			handle: h((*Server).clusterResources)},
		{method: "GET", path: []string{"cluster", "nextid"}, params: schema{"vmid": pVMID.opt()}, handle: h((*Server).nextIDHandler)},
		{method: "GET", path: []string{"access", "permissions"},
			params: schema{"userid": pString, "path": pString}, handle: h((*Server).permissions)},

		{method: "GET", path: []string{"nodes", "{node}", "qemu"}, proxy: true,
			params: schema{"node": pNode, "full": pBool}, handle: h((*Server).vmList)},
		{method: "GET", path: vmPath("/config"), proxy: true, perm: vmPerm("VM.Audit"),
			params: withParams(vm, schema{"current": pBool, "snapshot": pString}), handle: h((*Server).vmConfigGet)},
		{method: "POST", path: vmPath("/config"), proxy: true, perm: perm("/vms/{vmid}", true, configPerms...),
			params: withParams(vmConfigParams, schema{"background_delay": {typ: tInteger, optional: true, min: fptr(1), max: fptr(30)}}),
			handle: h((*Server).vmConfigSet)},
		{method: "PUT", path: vmPath("/config"), proxy: true, perm: perm("/vms/{vmid}", true, configPerms...),
			params: vmConfigParams, handle: h((*Server).vmConfigSet)},
		{method: "POST", path: vmPath("/clone"), proxy: true,
			perm: func(c *call) *Error {
				if e := perm("/vms/{vmid}", false, "VM.Clone")(c); e != nil {
					return e
				}
				return perm("/vms/{newid}", false, "VM.Allocate")(c)
			},
			params: withParams(vm, schema{"newid": pVMID, "name": {typ: tString, optional: true, format: "dns-name"},
				"description": pString, "pool": pString, "snapname": pString, "storage": pStorage.opt(),
				"format": {typ: tString, optional: true, enum: []string{"raw", "qcow2", "vmdk"}}, "full": pBool,
				"target": pNode.opt(), "bwlimit": {typ: tInteger, optional: true, min: fptr(0)}}),
			handle: h((*Server).cloneVM)},
		{method: "PUT", path: vmPath("/resize"), proxy: true, perm: vmPerm("VM.Config.Disk"),
			params: withParams(vm, schema{"skiplock": pSkiplock, "disk": {typ: tString, enum: driveNames},
				"size": {typ: tString, pattern: regexp.MustCompile(`^(?:\+?\d+(\.\d+)?[KMGT]?)$`)}, "digest": pDigest}),
			handle: h((*Server).resizeVM)},
		{method: "GET", path: vmPath("/status/current"), proxy: true, perm: vmPerm("VM.Audit"),
			params: vm, handle: h((*Server).vmStatusCurrent)},
		{method: "POST", path: vmPath("/status/start"), proxy: true, perm: vmPerm("VM.PowerMgmt"),
			params: withParams(vm, schema{"skiplock": pSkiplock, "timeout": pTimeout, "machine": pString,
				"stateuri": pString, "migratedfrom": pNode.opt(), "migration_type": pString, "migration_network": pString,
				"targetstorage": pString, "force-cpu": pString}),
			handle: h((*Server).vmStart)},
		{method: "POST", path: vmPath("/status/stop"), proxy: true, perm: vmPerm("VM.PowerMgmt"),
			params: withParams(vm, schema{"skiplock": pSkiplock, "timeout": pTimeout, "keepActive": pBool,
				"migratedfrom": pNode.opt(), "overrule-shutdown": pBool}),
			handle: h((*Server).vmStop)},
		{method: "POST", path: vmPath("/status/shutdown"), proxy: true, perm: vmPerm("VM.PowerMgmt"),
			params: withParams(vm, schema{"skiplock": pSkiplock, "timeout": pTimeout, "keepActive": pBool,
				"forceStop": pBool}),
			handle: h((*Server).vmStop)},
		{method: "POST", path: vmPath("/status/suspend"), proxy: true, perm: vmPerm("VM.PowerMgmt"),
			params: withParams(vm, schema{"skiplock": pSkiplock, "todisk": pBool, "statestorage": pStorage.opt()}),
			handle: h((*Server).vmSuspend)},
		{method: "POST", path: vmPath("/status/resume"), proxy: true, perm: vmPerm("VM.PowerMgmt"),
			params: withParams(vm, schema{"skiplock": pSkiplock, "nocheck": pBool}),
			handle: h((*Server).vmResume)},
		{method: "DELETE", path: vmPath(""), proxy: true, perm: vmPerm("VM.Allocate"),
			params: withParams(vm, schema{"skiplock": pSkiplock, "purge": pBool, "destroy-unreferenced-disks": pBool}),
			handle: h((*Server).destroyVM)},
		{method: "GET", path: vmPath("/agent/network-get-interfaces"), proxy: true,
			perm:   perm("/vms/{vmid}", true, "VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"),
			params: vm, handle: h((*Server).agentNetwork)},
		{method: "GET", path: vmPath("/agent/file-read"), proxy: true,
			perm: perm("/vms/{vmid}", true, "VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted"),
			params: withParams(vm, schema{"file": {typ: tString},
				"count":  {typ: tInteger, optional: true, min: fptr(1), max: fptr(maxReadSize)},
				"decode": pBool, "offset": {typ: tInteger, optional: true, min: fptr(0)}}),
			handle: h((*Server).agentFileRead)},
		{method: "POST", path: vmPath("/agent/exec"), proxy: true, perm: vmPerm("VM.GuestAgent.Unrestricted"),
			params: withParams(vm, schema{"command": {typ: tArray, items: &pspec{typ: tString}},
				"input-data": {typ: tString, optional: true, maxLen: 64 << 10}}),
			handle: h((*Server).agentExec)},
		{method: "GET", path: vmPath("/agent/exec-status"), proxy: true, perm: vmPerm("VM.GuestAgent.Unrestricted"),
			params: withParams(vm, schema{"pid": {typ: tInteger}}), handle: h((*Server).agentExecStatus)},

		{method: "GET", path: []string{"nodes", "{node}", "storage"}, proxy: true,
			params: schema{"node": pNode, "storage": pStorage.opt(), "content": pString, "enabled": pBool,
				"target": pNode.opt(), "format": pBool},
			handle: h((*Server).storageIndex)},
		{method: "GET", path: []string{"nodes", "{node}", "storage", "{storage}", "status"}, proxy: true,
			perm:   perm("/storage/{storage}", true, "Datastore.Audit", "Datastore.AllocateSpace"),
			params: schema{"node": pNode, "storage": pStorage}, handle: h((*Server).storageStatus)},
		{method: "GET", path: []string{"nodes", "{node}", "storage", "{storage}", "content"}, proxy: true,
			perm:   perm("/storage/{storage}", true, "Datastore.Audit", "Datastore.AllocateSpace"),
			params: schema{"node": pNode, "storage": pStorage, "content": pString, "vmid": pVMID.opt()},
			handle: h((*Server).storageContent)},
		{method: "DELETE", path: []string{"nodes", "{node}", "storage", "{storage}", "content", "{volume*}"}, proxy: true,
			params: schema{"node": pNode, "storage": pStorage.opt(), "volume": {typ: tString},
				"delay": {typ: tInteger, optional: true, min: fptr(1), max: fptr(30)}},
			handle: h((*Server).deleteVolume)},
		{method: "POST", path: []string{"nodes", "{node}", "storage", "{storage}", "upload"},
			perm: perm("/storage/{storage}", false, "Datastore.AllocateTemplate"),
			params: schema{"node": pNode, "storage": pStorage,
				"content":  {typ: tString, enum: []string{"iso", "vztmpl", "import"}},
				"filename": {typ: tString, maxLen: 255}, "checksum": pString,
				"checksum-algorithm": {typ: tString, optional: true, enum: []string{"md5", "sha1", "sha224", "sha256", "sha384", "sha512"}},
				"tmpfilename":        pString},
			handle: h((*Server).uploadFile)},

		{method: "GET", path: []string{"nodes", "{node}", "tasks", "{upid}", "status"}, proxy: true,
			params: schema{"node": pNode, "upid": pUPID}, handle: h((*Server).taskStatus)},
		{method: "GET", path: []string{"nodes", "{node}", "tasks", "{upid}", "log"}, proxy: true,
			params: schema{"node": pNode, "upid": pUPID, "start": pTimeout, "limit": pTimeout, "download": pBool},
			handle: h((*Server).taskLog)},
	}
}
