// Package libvirt runs each Proxy as a QEMU virtual machine on a libvirt
// host reached over SSH: go-libvirt speaks libvirt's RPC protocol through an
// SSH direct-streamlocal channel to the host's libvirtd socket, so the host
// needs nothing but sshd and libvirtd.
//
// One package serves both provider type names, `kvm` and `kvm2` (the two
// libvirt providers of the seeds): an entry with `type: kvm` and a `kvm:`
// block, or `type: kvm2` and a `kvm2:` block, is read by the same Parse,
// validation messages name the block the entry used, and both write the same
// marks, so an entry switched from one name to the other keeps its
// instances.
//
// Status: foundations only. The seam over go-libvirt with per-call budgets
// (backend.go), the pooled and dedicated connections (hosts.go), SSH with
// pinned host keys and credentials re-read on every dial (ssh.go), the
// config (config.go), error classification (errors.go), the Checker
// (check.go) and the RPC spans and log lines (observe.go) work. Create, Get,
// Delete and ListByTag do not yet: each returns a Permanent "not implemented
// yet" error. The package is therefore NOT in registry.DefaultTypes(): a
// providers config naming kvm or kvm2 is refused as an unknown type until the
// lifecycle works. docs/libvirt-provider.md marks the same.
//
// Layout:
//   - backend.go: the seam (backend), a ctx-first interface over exactly the
//     go-libvirt calls the provider makes, and its adapter over
//     *libvirt.Libvirt, which runs each blocking call under a hard budget: a
//     caller whose ctx ends stops waiting at once and harms nobody; only a
//     call that outlives its budget marks the connection dead.
//   - hosts.go: one pooled connection per host, redialled when dead, and
//     dedicated connections (the Checker, later the image upload).
//   - ssh.go: the SSH transport to the libvirt socket.
//   - config.go, errors.go, check.go, observe.go, id.go, metadata.go (the
//     marks' element, one namespace for both type names), state.go (the
//     state table and the address choice, for Get).
//   - create.go, get.go, delete.go, list.go: the lifecycle (not yet).
package libvirt
