// Package nocloud builds the NoCloud seed of a VM: the ISO9660 image,
// labelled "cidata", that cloud-init's NoCloud datasource reads its
// meta-data, user-data and, when given, network-config and vendor-data
// from. It is a shared leaf of the VM providers (libvirt, Proxmox): it
// imports only the contract package, internal/provider.
//
// The image is written in process with go-diskfs
// (github.com/diskfs/go-diskfs, pinned at v1.9.4 in go.mod), the maintained
// Go library that writes both Rock Ridge (RRIP 1.12, so Linux sees the real
// lower-case names and modes) and Joliet (merged upstream in April 2026,
// with its UCS-2 encoding fixed in v1.9.3; Windows and cloudbase-init read
// that tree), and takes the volume identifier. Without either extension a
// reader sees only the ISO names USER_DAT.;1 and META_DAT.;1.
//
// go-diskfs needs a scratch directory: its writer copies files into a
// workspace directory and walks it when it finalizes. Build makes a private
// (0700) one with os.MkdirTemp under $TMPDIR and removes it before
// returning, whatever happens; the image itself is built in memory (no
// image file). The operator's container has a read-only root file system,
// so a deployment that runs a VM provider must give $TMPDIR a writable
// volume, ideally a memory-backed emptyDir so the secrets never reach a disk.
//
// go-diskfs's output varies with the clock, the time zone, the files'
// ctime and the process's uid and gid; Build normalizes those fields (see
// normalize.go), so the same Seed always gives the same bytes and a provider
// can compare an existing seed volume with the one it wants.
//
// Every file's content is a provider.Sensitive (user-data may hold
// credentials): the package never logs, and no error it returns carries
// content. The returned image holds the secrets in clear, so it must only
// go to the backend call that uploads it.
package nocloud
