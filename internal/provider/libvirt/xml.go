package libvirt

// The XML this provider hands libvirt, built through libvirt.org/go/libvirtxml
// (never by string formatting): the domain, and the volumes (the cached
// image, its marker, an instance's overlay and seed). Pure builders, tested
// by tables and checked against libvirt's own schemas (virt-xml-validate).

// domainSpec is everything buildDomainXML renders for one instance.
type domainSpec struct {
	// Name is the domain name, the instance name.
	Name string
	// DomainType is kvm or qemu (the host's, already chosen).
	DomainType string
	VCPUs      int
	MemoryMiB  int
	// Firmware is bios or uefi (the image's).
	Firmware string
	// Pool holds DiskVolume (the qcow2 overlay) and SeedVolume (the NoCloud
	// ISO); the disks refer to them as type='volume' sources.
	Pool       string
	DiskVolume string
	SeedVolume string
	// MAC is the NIC's address (domainMAC of the name), by which Get
	// matches the address sources' answers.
	MAC string
	// Exactly one of Bridge, Network and UserNetworking says where the NIC
	// goes (Host's fields).
	Bridge         string
	Network        string
	UserNetworking bool
	// Metadata is the marks' element (buildMetadata), placed in <metadata>.
	Metadata string
}

// buildDomainXML renders the domain: the overlay as a virtio disk, the seed
// as a read-only CD-ROM, one virtio NIC with MAC, the QEMU guest agent's
// channel, a virtio RNG (cloud-init and sshd wait for entropy under
// emulation otherwise), a pty serial console, no memory balloon, and the
// metadata element. UEFI firmware uses libvirt's firmware autoselection.
// Every error is Permanent.
func buildDomainXML(s domainSpec) (string, error) {
	panic("helper A")
}

// domainMAC is the NIC's MAC for an instance name: stable (so a
// re-defined domain keeps its DHCP lease and ARP entry), locally
// administered in QEMU's 52:54:00 range, derived from a hash of the name.
func domainMAC(name string) string {
	panic("helper A")
}

// volumeSpec is one volume to create.
type volumeSpec struct {
	Name string
	// CapacityBytes is the virtual size (an overlay's disk size; an
	// upload's length, or 0 when the length is not known beforehand).
	CapacityBytes uint64
	// Format is qcow2, raw or iso (the seed).
	Format string
	// BackingPath and BackingFormat, for an overlay, name its backing
	// image.
	BackingPath   string
	BackingFormat string
}

// volumeXML renders a volume definition for StorageVolCreateXML. Every
// error is Permanent.
func volumeXML(v volumeSpec) (string, error) {
	panic("helper A")
}

// volumeDesc is what parseVolumeXML reads from StorageVolGetXMLDesc: what
// the overlay reuse check compares.
type volumeDesc struct {
	CapacityBytes uint64
	Format        string
	BackingPath   string
	BackingFormat string
}

// parseVolumeXML reads a volume's XML; an answer that does not parse is
// Transient (libvirt wrote it; a retry reads it again).
func parseVolumeXML(s string) (volumeDesc, error) {
	panic("helper A")
}
