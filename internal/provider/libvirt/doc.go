// Package libvirt runs each Proxy as a QEMU virtual machine on a libvirt
// host reached over SSH: go-libvirt speaks libvirt's RPC protocol through an
// SSH direct-streamlocal channel to the host's libvirtd socket, so the host
// needs nothing but sshd and libvirtd.
//
// One package serves both provider type names, `kvm` and `kvm2` (the two
// earlier libvirt providers): an entry with `type: kvm` and a `kvm:`
// block, or `type: kvm2` and a `kvm2:` block, is read by the same Parse,
// validation messages name the block the entry used, and both write the same
// marks, so an entry switched from one name to the other keeps its
// instances.
//
// Create returns within provider.CallBound: it resolves the placement
// before any dial, adopts a domain that exists (the UID guard; a stopped,
// paused or suspended one is started, resumed or woken), and otherwise runs
// the slow steps in the background, keyed by instance name
// (internal/provider/inflight): the capacity precheck, the seed, the image
// cache, the overlay, define and start. Get and Create report the step's
// progress meanwhile.
//
// Layout:
//   - backend.go: the seam (backend), a ctx-first interface over exactly the
//     go-libvirt calls the provider makes, and its adapter over
//     *libvirt.Libvirt, which runs each blocking call under a hard budget: a
//     caller whose ctx ends stops waiting at once and harms nobody; only a
//     call that outlives its budget marks the connection dead.
//   - hosts.go: one pooled connection per host, redialled when dead, and
//     dedicated connections (the Checker, the image upload).
//   - ssh.go: the SSH transport to the libvirt socket.
//   - config.go, errors.go, check.go, observe.go, id.go, metadata.go (the
//     marks' element, one namespace for both type names), state.go (the
//     state table and the address choice, for Get).
//   - create.go, get.go, delete.go, list.go: the lifecycle, and the
//     secondary resources (list.go): overlays and seeds named after their
//     instance (volume.go).
//   - image.go: the per-host image cache; xml.go: the domain and volume XML.
//   - serving.go, grouppeers.go: the guest agent: the serving report read,
//     a group member's peers file rewritten in place (guest-exec).
package libvirt
