// Package proxmox runs egress proxies as Proxmox VE QEMU VMs cloned from
// templates, over PVE's REST API (pveproxy, port 8006).
//
// The client is a thin net/http client with one method per endpoint, as the
// seed's was, not github.com/luthermonson/go-proxmox. Read at its commit
// 80c4071 (tasks.go): Task.Wait(ctx, interval, max) sleeps with
// time.Sleep between polls, so a cancelled ctx is seen only after the next
// sleep and poll (an older version took no ctx at all); it counts a task
// successful only when its exit status is "OK", where PVE's "WARNINGS: n"
// is a success too; Task.Watch reads the log 50 lines at a time every 2 s
// with fixed sleeps. We would have to poll tasks with our own code anyway
// (as the issue foresaw), and the token re-read on every request and the CA
// reloaded when its file changes are transport concerns a library hides.
// What remains of the library would be a dozen request shapes: the
// endpoints we call. Every answer of our client is checked against captured
// PVE answers through fakepve.
//
// Create never holds a worker: the clone, config, seed upload, start and
// their tasks run as an inflight step; Get reads Provisioning with the
// step's progress meanwhile. Ownership is the name plus the mark (tags in
// /cluster/resources, so ListByTag and Get need no per-VM config read; the
// description carries the same mark for humans).
package proxmox
