package fakepve

// World is the cluster a fake starts with and Reset returns to.
type World struct {
	// Nodes of the cluster; the first is the one the fake's address is,
	// where requests for other nodes are proxied from.
	Nodes    []string
	Storages []Storage
	VMs      []VM
	// Volumes that no VM config owns (ISOs, orphaned disks). The disks a
	// VM's config names are created with the VM.
	Volumes []Volume
	Tokens  []Token
	Version Version
	// NextID is datacenter.cfg's next-id range [Lower, Upper) for
	// /cluster/nextid; zero values are PVE's defaults, 100 and 1000000.
	NextID NextID
}

// NextID is the datacenter next-id range.
type NextID struct{ Lower, Upper int }

// Storage is one entry of storage.cfg.
type Storage struct {
	ID string
	// Type is the plugin: dir, nfs, cifs (file-based, need Path), lvm,
	// lvmthin, zfspool, rbd.
	Type    string
	Content []string // images, rootdir, iso, vztmpl, backup, snippets, import
	Shared  bool
	Path    string   // file-based types; /var/lib/vz for the stock "local"
	Nodes   []string // nodes it is on; empty is every node
	Disable bool
	// Capacity is the size of each node's instance (the one instance of a
	// shared storage) in bytes; Used what is taken by files the fake does not
	// model. Volumes add to Used.
	Capacity int64
	Used     int64
}

// VM seeds a guest (a template when its config has "template: 1").
type VM struct {
	VMID int
	Node string
	// Config in the order GET .../config lists it (digest first, always).
	// Disks named here (scsi0: local-lvm:vm-101-disk-0,size=20G) get
	// their volume on that storage of the VM's node.
	Config  []KV
	Running bool
	// QMPStatus of a running VM: running (the default), paused, prelaunch.
	QMPStatus string
	Stats     *Stats
	// Agent is what the guest agent answers; nil is a running agent with
	// the default interfaces once the VM runs (SetAgent changes it).
	Agent *Agent
	// Digest, if set, is reported as the config's digest until the config
	// changes (to replay captured answers); otherwise the fake computes it.
	Digest string
}

// KV is one config line.
type KV struct{ Key, Value string }

// Stats are the runtime numbers status/current and /cluster/resources
// report for a running VM. Zero values get plausible defaults.
type Stats struct {
	PID                         int
	Uptime                      int64
	CPU                         float64
	Mem, FreeMem, Balloon       int64
	DiskRead, DiskWrite         int64
	NetIn, NetOut               int64
	RunningMachine, RunningQEMU string
}

// Volume is a file or block device on a storage.
type Volume struct {
	Node    string // the node of a non-shared storage
	Storage string
	Name    string // volname: iso/cidata-101.iso, vm-101-disk-0
	Size    int64
	Data    []byte // content of an uploaded ISO (kept for tests to read)
	VMID    int    // owner, for images
	Format  string // iso, raw, qcow2; derived when empty
	CTime   int64
}

// Token is an API token and its effective ACL (PVE intersects the user's
// and the token's when privilege separation is on; the fake keeps the
// result).
type Token struct {
	ID     string // user@realm!tokenid
	Secret string
	ACL    []ACE
}

// ACE is one ACL entry: the privileges granted on Path, and below it unless
// NoPropagate. The most specific entry that applies wins, as roles set on
// a deeper path replace inherited ones in PVE.
type ACE struct {
	Path        string
	Privs       []string
	NoPropagate bool
}

// Version is what /version answers.
type Version struct{ Version, Release, RepoID string }

// Administrator is the privilege set of PVE's Administrator role
// (pve-access-control AccessControl.pm $privgroups).
var Administrator = []string{
	"VM.Allocate", "VM.Audit", "VM.Backup", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU",
	"VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory",
	"VM.Config.Network", "VM.Config.Options", "VM.Console", "VM.GuestAgent.Audit",
	"VM.GuestAgent.FileRead", "VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.FileWrite",
	"VM.GuestAgent.Unrestricted", "VM.Migrate", "VM.PowerMgmt", "VM.Replicate", "VM.Snapshot",
	"VM.Snapshot.Rollback",
	"Sys.AccessNetwork", "Sys.Audit", "Sys.Console", "Sys.Incoming", "Sys.Modify", "Sys.PowerMgmt",
	"Sys.Syslog",
	"Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit",
	"SDN.Allocate", "SDN.Audit", "SDN.Use",
	"Pool.Allocate", "Pool.Audit", "Permissions.Modify", "Group.Allocate", "Realm.Allocate",
	"Realm.AllocateUser", "User.Modify", "Mapping.Audit", "Mapping.Modify", "Mapping.Use",
}

// DefaultTokenID is the token DefaultWorld accepts.
const DefaultTokenID = "root@pam!egress-operator"

// DefaultWorld is one node pve1 with the stock storages "local" (dir,
// /var/lib/vz, iso/vztmpl/backup/snippets, 100 GiB) and "local-lvm"
// (lvmthin, images/rootdir, 350 GiB), the template 9000 (a Debian 12 cloud
// image: 3 GiB scsi0 on local-lvm, net0 on vmbr0, the agent on, a serial
// console), and one API token, DefaultTokenID, with Administrator on "/".
// The token's secret is random per fake (Server.Token).
func DefaultWorld() World {
	return World{
		Nodes: []string{"pve1"},
		Storages: []Storage{
			{ID: "local", Type: "dir", Path: "/var/lib/vz", Content: []string{"iso", "vztmpl", "backup", "snippets"},
				Capacity: 100861726720, Used: 12044009472},
			{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"},
				Capacity: 374538764288, Used: 45097156608},
		},
		VMs:     []VM{Template(9000, "pve1", "debian-12-egress-template")},
		Tokens:  []Token{{ID: DefaultTokenID, ACL: []ACE{{Path: "/", Privs: Administrator}}}},
		Version: Version{Version: "9.2.20", Release: "9.2", RepoID: "b8c1f4d5a1e0c2f7"},
	}
}

// Template is a template VM as DefaultWorld has it, with another VMID,
// node or name.
func Template(vmid int, node, name string) VM {
	return VM{VMID: vmid, Node: node, Config: []KV{
		{"agent", "1"},
		{"boot", "order=scsi0;net0"},
		{"cores", "2"},
		{"cpu", "x86-64-v2-AES"},
		{"memory", "2048"},
		{"meta", "creation-qemu=9.2.0,ctime=1763000000"},
		{"name", name},
		{"net0", "virtio=BC:24:11:0A:00:01,bridge=vmbr0,firewall=1"},
		{"ostype", "l26"},
		{"scsi0", "local-lvm:base-" + itoa(vmid) + "-disk-0,iothread=1,size=3G"},
		{"scsihw", "virtio-scsi-single"},
		{"serial0", "socket"},
		{"smbios1", "uuid=2d1e7c0a-5b8f-4e0c-9a53-1f6b7c2d9e40"},
		{"sockets", "1"},
		{"tags", "egress-template"},
		{"template", "1"},
		{"vga", "serial0"},
		{"vmgenid", "7e1c2b3a-4d5e-4f60-8a71-92b3c4d5e6f7"},
	}}
}

func (w World) clone() World {
	c := w
	c.Nodes = append([]string(nil), w.Nodes...)
	c.Storages = append([]Storage(nil), w.Storages...)
	for i := range c.Storages {
		c.Storages[i].Content = append([]string(nil), w.Storages[i].Content...)
		c.Storages[i].Nodes = append([]string(nil), w.Storages[i].Nodes...)
	}
	c.VMs = nil
	for _, v := range w.VMs {
		v.Config = append([]KV(nil), v.Config...)
		c.VMs = append(c.VMs, v)
	}
	c.Volumes = append([]Volume(nil), w.Volumes...)
	c.Tokens = nil
	for _, t := range w.Tokens {
		t.ACL = append([]ACE(nil), t.ACL...)
		c.Tokens = append(c.Tokens, t)
	}
	return c
}
