// Package proxmox runs egress proxies as Proxmox VE QEMU VMs cloned from
// templates, over PVE's REST API (pveproxy, port 8006).
//
// The client is a thin net/http client with one method per endpoint, as the
// seed's was, not github.com/luthermonson/go-proxmox: that library's task
// wait and ISO upload ignore ctx (so a stuck PVE would hold a worker past
// provider.CallBound), and we need the token re-read on every request and
// the CA reloaded when its file changes, which are transport concerns a
// library hides. Our own client is small: the endpoints we call are a dozen.
//
// Create never holds a worker: the clone, config, seed upload, start and
// their tasks run as an inflight step; Get reads Provisioning with the
// step's progress meanwhile. Ownership is the name plus the mark (tags in
// /cluster/resources, so ListByTag and Get need no per-VM config read; the
// description carries the same mark for humans).
package proxmox
