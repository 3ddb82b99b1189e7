// Package fakepve is a fake of the Proxmox VE API (pveproxy on port 8006)
// for tests: a provider's real HTTP client talks to it over TLS on
// loopback, so its request building, token header, TLS verification, error
// decoding and task polling run as they will against a PVE. There is no
// PVE to run here; this is the stand-in. It is imported by tests only.
//
//	fake := fakepve.New().Start()       // DefaultWorld: node pve1, template 9000
//	defer fake.Close()
//	tlsConf := &tls.Config{RootCAs: fake.CertPool()} // or write fake.CACertPEM() to the CA file
//	req.Header.Set("Authorization", fake.Token())    // PVEAPIToken=root@pam!egress-operator=<uuid>
//	// base URL: fake.URL() == "https://127.0.0.1:<port>/api2/json"
//
// # What is modelled
//
// Paths under /api2/json: GET /version; GET /nodes; GET /nodes/{node}/status;
// GET /cluster/resources (?type=vm|node|storage); GET /cluster/nextid
// (?vmid=); GET /access/permissions (?path=, ?userid=); GET
// /nodes/{node}/qemu; GET, POST (async, a qmconfig task; with
// background_delay null when it ends in time) and PUT (sync)
// /nodes/{node}/qemu/{vmid}/config; POST .../clone; PUT .../resize; GET
// .../status/current; POST .../status/start, stop, shutdown, suspend (pause,
// or hibernate with todisk=1), resume; DELETE /nodes/{node}/qemu/{vmid}
// (purge, destroy-unreferenced-disks); GET .../agent/network-get-interfaces;
// GET .../agent/file-read (file, count, decode, offset); POST
// .../agent/exec (command, an array; input-data) and GET
// .../agent/exec-status (pid);
// GET /nodes/{node}/storage; GET .../storage/{storage}/status; GET
// .../storage/{storage}/content; DELETE .../content/{volume} (the volume ID
// may contain "/", as PVE's fragmentDelimiter allows); POST
// .../storage/{storage}/upload (multipart); GET
// /nodes/{node}/tasks/{upid}/status and /log (start, limit). Any other path
// or method answers PVE's 501 "Method 'GET /x' not implemented".
//
// The wire, as pve-http-server (AnyEvent.pm) writes it. The fake hijacks
// every connection and writes answers itself, since net/http cannot set a
// reason phrase: "HTTP/1.1 <code> <first line of the message>", the
// headers in HTTP::Headers' order (Cache-Control, Connection, Date, Pragma,
// Server: pve-api-daemon/3.0, Content-Encoding, Content-Length,
// Content-Type: application/json;charset=UTF-8, Expires), bodies compact as
// Perl's JSON writes them (no HTML escaping, floats as %.15g), gzip above
// 1024 bytes for clients that accept it, keep-alive for answers below 400
// and up to 100 requests per connection, "Connection: close" otherwise and
// after uploads. Errors are {"data":null,"message":"<die text>\n"} with
// "errors" {param: text} on 400 "Parameter verification failed."; the
// errors pve-http-server raises outside the API handlers have no body: 401
// "No ticket" (no token) and "Authentication failed!" (a token that does
// not verify, a ticket), the upload's Datastore.AllocateTemplate check
// (403), 501 "chunked transfer encoding not supported", "Unexpected content
// for method 'DELETE'", "for data too large" (a form over 64 KiB), 506 for
// a body that is neither a form nor JSON, and pveproxy's 595/596 for a node
// it cannot reach. A form upload (not multipart) gets no answer at all:
// PVE dies in an eval that only warns, and the connection ends.
//
// Parameters are verified as pve-common JSONSchema.pm does, with its texts:
// missing properties, types (booleans only "0" or "1"; arrays as PVE 8+
// takes them: a repeated form or query key or a JSON array, one value for
// an array parameter an array of one, an array for a "-list" string joined
// with ","; elements checked as "<name>[<i>]"), formats (pve-vmid,
// pve-node, pve-storage-id, dns-name, tags, the memory, agent and net
// property strings), patterns, lengths, ranges, enumerations, and unknown
// parameters, all collected into the errors map. Permissions are checked
// before that, as rest_handler does; then the proxy to the path's node: an
// unknown node is "hostname lookup '<n>' failed - ...", an offline one
// answers SetNodeOffline's 595/596.
//
// State: nodes, storages (dir, nfs, cifs, lvm, lvmthin, zfspool, rbd; local
// per node or shared; capacity and use), volumes (disks, ISOs with their
// bytes), VMs and templates (config lines in order, digest, lock, template
// flag, disks and their sizes, running/paused/prelaunch, hibernated with
// lock "suspended" and vmstate), tasks, and API tokens with ACLs.
// VMIDs are unique in the cluster; a VM's config lives on its node, so a
// call for it on another node (after MigrateVM, for example) answers
// "Configuration file 'nodes/<node>/qemu-server/<vmid>.conf' does not
// exist" (500, as PVE reports a missing VM), and power calls there fail in
// their task with "unable to find configuration file for VM <vmid> on node
// '<node>'".
//
// Tasks: every asynchronous call answers a UPID in PVE's format,
// UPID:<node>:<pid %08X>:<pstart %08X>:<starttime %08X>:<type>:<id>:<user@realm!token>:
// (qmclone with the source VMID as id, imgcopy with none, imgdel with the
// storage). A task runs for SetTaskPolls polls (default 2): each status GET
// and each Advance step counts one, the poll that reaches the number
// answers "stopped", and its effect is applied then. It ends "OK",
// "WARNINGS: <n>" (a success) or with the worker's error on one line; the
// log grows as the worker's would (a full clone prints qemu-img's
// "transferred 1.5 GiB of 3.0 GiB (50.00%)" each poll) and ends "TASK OK",
// "TASK WARNINGS: <n>" or "TASK ERROR: <msg>". A worker that dies on its
// first checks (start of a running VM, of a template, or with a volume
// its config names deleted; destroy of a locked VM; resize of a missing
// disk; attaching a missing ISO) has ended before
// the first poll. Checks PVE runs before forking answer synchronously.
//
// Clones: refused synchronously for a missing or locked source, a VMID
// whose config is on this node ("unable to create VM <n>: config file
// already exists"), a linked clone with storage or of a non-template, a
// cross-node clone from local storage; a VMID taken on another node fails
// in the task, as only pmxcfs notices ("close (rename) atomic file ...
// failed: File exists"). While the task runs the new VMID is a config with
// only "lock: clone": no name in its config, "VM <vmid>" in status/current
// and /cluster/resources (vmstatus' name); config changes and clones of it
// meet "VM is locked (clone)", and workers that need its config lock
// (start, destroy) wait for the clone's task (see Locks). Templates clone linked by
// default (base-9000-disk-0/vm-101-disk-0), non-templates full; clones from
// one template run in parallel. A failed clone removes its entry and
// disks. Destroy puts "lock: destroyed" (and no name) on the VM while its
// task runs.
//
// Locks: the config's lock field (SetLock, as a backup or migration leaves
// it) refuses config changes and clones synchronously and power actions in
// their task. The config lock file is held by the task working on a VM: a
// PUT config meanwhile fails at once with "can't lock file
// '/var/lock/qemu-server/lock-<vmid>.conf' - got timeout"; a worker that
// needs it waits, and fails with that text after SetLockWaitPolls polls
// (10).
//
// Guest agent: "No QEMU guest agent configured" without an agent key,
// "VM <n> is not running", "QEMU guest agent is not running" while it
// boots (Agent.BootSteps, SetAgentBootSteps) or when SetAgent says so, the
// QMP timeout, or {"result":[...]} with lo and eth0 (net0's MAC, an address
// of 192.0.2.0/24, TEST-NET-1: nothing listens there, never connect to it;
// or, as cloud-init would configure it at the VM's start, the static
// address of the network-config in the seed ISO on ide2 when that matches
// eth0 by net0's MAC or a name glob).
// agent/file-read reads the guest's files (SetGuestFile, RemoveGuestFile,
// GuestFile; /run is emptied by a stop): "Agent error: failed to open file
// '<path>' (mode: 'r'): No such file or directory" for a missing one, at
// most 16 MiB with "truncated": 1 beyond. agent/exec answers {"pid": n}
// (the guest's pids count from 1187 after each boot) and
// agent/exec-status {"exited": 0} while the command runs, then once
// {"exited": 1, "exitcode": n} (or "signal") with "out-data" and
// "err-data" when it wrote any, after which the pid is "Agent error:
// Invalid parameter 'pid'" (qemu-ga 7.2, Debian 12's). The guest runs
// only vrrp.ApplyPeers() (argv compared exactly), which writes its
// input-data to vrrp.PeersPath; any other command exits 127 with dash's
// "<sh>: 1: <name>: not found" (a script's first word, else argv[0]);
// Agent.Exec makes every command end otherwise, without effect. A
// command runs for SetExecPolls exec-status reads or Advance steps
// (default 1) and takes effect as it ends; a stop ends it. input-data
// reaches the guest as Latin-1 (Perl's encode_base64 of the decoded
// parameter; a character above U+00FF is its "Wide character" die). A guest runs the operator's serving reporter
// by default: servingreport.ReportPath reads as a report stamped at the
// read that says the proxy answers, until a test writes or removes it
// (SetGuestReport).
//
// Storage: uploads (ISO or vztmpl; file-based storages only; names
// normalised; the extension checked; the content type enabled) finish as
// imgcopy tasks and overwrite; SetStorageFull makes uploads fail in their
// task ("import failed: cp: error writing '<path>': No space left on
// device"), full clones fail as LVM or qemu-img do, and status report no
// space. Deleting a missing volume is a successful task.
//
// /cluster/resources lists VMs (by VMID as strings sort), nodes and
// storages; lock and tags are current, the statistics (name, status,
// template, sizes) are what pvestatd last wrote: current on every read by
// default, or refreshed every SetStatsInterval steps, when a new VM is
// "unknown" and nameless until the next refresh. A paused VM's status
// there is "paused" (pvestatd writes qmpstatus). An offline node's guests
// are "unknown". /cluster/nextid answers a JSON string and knows clones in
// progress; SetNextID narrows the range (for "unable to get any free VMID
// in range [l, u]").
//
// Privileges per path: each token has an ACL (path, privileges,
// propagate); the most specific entry that applies wins. Routes check what
// PVE's schemas name (VM.Audit, VM.Config.* per option, VM.Clone and
// VM.Allocate on the new VMID, VM.PowerMgmt, VM.GuestAgent.Audit and
// .FileRead (or .Unrestricted), VM.GuestAgent.Unrestricted for exec and
// exec-status (PVE 9; VM.Monitor on 8),
// Datastore.Allocate/AllocateSpace/AllocateTemplate/Audit, Sys.Audit on
// nodes and on other tokens' tasks); lists leave out what the token may not
// see. Revoke takes privileges away on one path.
//
// Knobs for tests, Karpenter-fake style: Requests (method, path, query, the
// parameter names, status, the token ID; never a secret or upload content),
// Count, ClearRequests, FailNext (for the next N calls matching a method
// and path pattern: an Error, a task outcome and duration, or a Hold until
// Advance steps pass), ClearFaults, Holding, SetTaskPolls, SetTaskOutcome,
// SetLockWaitPolls, Advance, Settle, StartClock (steps on wall time, for
// tests that cannot step in lockstep), SetAgent, SetAgentBootSteps,
// SetExecPolls, SetGuestFile, SetGuestReport, RemoveGuestFile,
// SetNodeOffline,
// SetStorageFull, SetStorageActive, SetStatsInterval, SetNextID, SetLock,
// SetVMRunning, MigrateVM, PutVM, PutVolume, SetTokenACL, Revoke, and VM,
// VMIDs, Volumes, Tasks, GuestFile to inspect; Reset returns to the starting world.
// Every method is safe for concurrent use.
//
// # What is not modelled
//
// Tickets and CSRF tokens (any ticket fails), the 3-second delay PVE adds
// to every 401, pools, HA, replication, snapshots, firewall, SDN, LXC,
// backups, the migrate API (MigrateVM moves at once), pending changes (a
// config update applies to a running VM as to a stopped one), hotplug,
// create (POST /nodes/{node}/qemu), new-disk syntax (storage:size),
// cloud-init drives, the ISO content check of imgcopy, checksums of
// uploads, deflate, the extjs and other formats, many status/current
// fields PVE 9 also sends (memhost, pressure*, ballooninfo, blockstat,
// nics, proxmox-support) and host-arch on nodes. Permission checks are
// those listed above, not every one PVE makes (no pool paths, no bridge
// SDN.Use). Perl's hash order is random per PVE process: the fake keeps
// one fixed key order per object (the fixtures' where they show one), and
// no client may rely on key order. The fake never sleeps; Hold and task
// polls stand for time.
//
// # Sources
//
// Every error constructor (errors.go) and every behaviour names the PVE
// source it follows: proxmox/qemu-server (API2/Qemu.pm, API2/Qemu/Agent.pm,
// QemuServer.pm, QemuServer/Agent.pm, QemuImage.pm; snapshot 2026-08-17),
// qemu's guest agent (qga/commands.c and commands-posix.c; 7.2, Debian
// 12's, for what the guest answers), pve-manager
// (HTTPServer.pm, API2/Cluster.pm, API2/Tasks.pm, API2/Nodes.pm,
// API2Tools.pm, Service/pvestatd.pm; 2026-08-20), pve-http-server
// (APIServer/AnyEvent.pm, Formatter/Standard.pm; 2025-10-15), pve-common
// (JSONSchema.pm, Exception.pm, RESTHandler.pm, RESTEnvironment.pm, UPID.pm,
// Tools.pm, File.pm, Cmd.pm; 2026-08-04), pve-guest-common (AbstractConfig.pm),
// pve-storage (API2/Storage/Status.pm, Content.pm, Storage.pm, LVMPlugin.pm;
// 2026-07-24), pve-access-control (AccessControl.pm, RPCEnvironment.pm),
// pve-cluster (Cluster.pm). The fixtures in testdata/fixtures (from
// ../shared/recipes/proxmox/fixtures, mostly recorded from go-proxmox's
// mocks) are replayed byte for byte by TestFixturesByteForByte, which
// names the few where PVE's sources say otherwise and the fake follows the
// sources. Texts no source quotes are marked "fake's own" where they are
// made (the ssh command of an upload to an offline node).
package fakepve
