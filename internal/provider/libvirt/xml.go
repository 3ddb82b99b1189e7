package libvirt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The XML this provider hands libvirt, built through libvirt.org/go/libvirtxml
// (never by string formatting): the domain, and the volumes (the cached
// image, its marker, an instance's overlay and seed). Pure builders, tested
// by tables and checked against libvirt's own schemas (virt-xml-validate).

const (
	// formatISO is the seed's volume format. A dir pool creates an iso
	// volume as a raw file (libvirt maps iso to raw for qemu-img), and its
	// refresh probes an ISO 9660 image back as iso.
	formatISO = "iso"
	// guestAgentChannel is the virtio-serial port qemu-guest-agent opens.
	guestAgentChannel = "org.qemu.guest_agent.0"
)

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
	mac, err := checkDomainSpec(s)
	if err != nil {
		return "", err
	}

	// BIOS boots on i440fx with the seed on IDE, as the test guest's
	// kernel expects (Debian's cloud kernel has ata_piix but no ahci); UEFI
	// needs q35, which has no IDE, so its seed goes on virtio-scsi (not
	// SATA: the same kernel has no ahci, but virtio_scsi it has). A UEFI domain starts only on a host with OVMF
	// installed: libvirt 9.0 says "Unable to find any firmware to satisfy
	// 'efi'" otherwise.
	osType := &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"}
	osDef := &libvirtxml.DomainOS{Type: osType, BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}}}
	seedTarget := &libvirtxml.DomainDiskTarget{Dev: "hdc", Bus: "ide"}
	var controllers []libvirtxml.DomainController
	if s.Firmware == FirmwareUEFI {
		osType.Machine = "q35"
		seedTarget = &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "scsi"}
		controllers = []libvirtxml.DomainController{{Type: "scsi", Model: "virtio-scsi"}}
		// Autoselection, but never a Secure Boot build with Microsoft's
		// keys enrolled: it would refuse the unsigned kernels of many
		// images and needs SMM.
		osDef.Firmware = "efi"
		osDef.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{Features: []libvirtxml.DomainOSFirmwareFeature{
			{Enabled: "no", Name: "secure-boot"},
			{Enabled: "no", Name: "enrolled-keys"},
		}}
	}

	port0 := uint(0)
	dom := libvirtxml.Domain{
		Type:     s.DomainType,
		Name:     s.Name,
		Metadata: &libvirtxml.DomainMetadata{XML: s.Metadata},
		Memory:   &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Value: uint(s.VCPUs)},
		OS:       osDef,
		Features: &libvirtxml.DomainFeatureList{
			ACPI: &libvirtxml.DomainFeature{},
			APIC: &libvirtxml.DomainFeatureAPIC{},
		},
		Clock:      &libvirtxml.DomainClock{Offset: "utc"},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Controllers: controllers,
			Disks: []libvirtxml.DomainDisk{
				{
					Device: "disk",
					Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: FormatQCOW2},
					Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{
						Pool: s.Pool, Volume: s.DiskVolume,
					}},
					Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
				},
				{
					// QEMU has no iso format: an ISO image is raw.
					Device: "cdrom",
					Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: FormatRaw},
					Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{
						Pool: s.Pool, Volume: s.SeedVolume,
					}},
					Target:   seedTarget,
					ReadOnly: &libvirtxml.DomainDiskReadOnly{},
				},
			},
			Interfaces: []libvirtxml.DomainInterface{{
				MAC:    &libvirtxml.DomainInterfaceMAC{Address: mac},
				Source: interfaceSource(s),
				Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
			}},
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainSerialTarget{Port: &port0},
			}},
			Consoles: []libvirtxml.DomainConsole{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port0},
			}},
			// The socket's path is libvirt's to choose (under its own
			// channel directory).
			Channels: []libvirtxml.DomainChannel{{
				Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: guestAgentChannel}},
			}},
			MemBalloon: &libvirtxml.DomainMemBalloon{Model: "none"},
			RNGs: []libvirtxml.DomainRNG{{
				Model:   "virtio",
				Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
			}},
		},
	}
	out, err := dom.Marshal()
	if err != nil {
		return "", provider.Errorf(provider.ErrPermanent, "rendering the domain XML of %s: %w", s.Name, err)
	}
	return out, nil
}

// interfaceSource is where the NIC goes; checkDomainSpec made sure exactly
// one is set.
func interfaceSource(s domainSpec) *libvirtxml.DomainInterfaceSource {
	switch {
	case s.Bridge != "":
		return &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: s.Bridge}}
	case s.Network != "":
		return &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Network}}
	default:
		// QEMU's user-mode network: no host device; the type alone says so.
		return &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}}
	}
}

// checkDomainSpec refuses a spec libvirt would refuse, or would accept and
// get wrong (a metadata element without its namespace is dropped by libvirt
// at define time, and the instance would be invisible to ListByTag). It
// returns the MAC in libvirt's canonical form.
func checkDomainSpec(s domainSpec) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", provider.Errorf(provider.ErrPermanent, "domain %q: "+format, append([]any{s.Name}, args...)...)
	}
	if err := checkObjectName(s.Name); err != nil {
		return bad("name: %v", err)
	}
	if s.DomainType != DomainTypeKVM && s.DomainType != DomainTypeQEMU {
		return bad("domain type %q is not %s or %s", s.DomainType, DomainTypeKVM, DomainTypeQEMU)
	}
	if s.VCPUs < 1 {
		return bad("vCPUs %d: need at least 1", s.VCPUs)
	}
	if s.MemoryMiB < 1 {
		return bad("memory %d MiB: need at least 1", s.MemoryMiB)
	}
	if s.Firmware != FirmwareBIOS && s.Firmware != FirmwareUEFI {
		return bad("firmware %q is not %s or %s", s.Firmware, FirmwareBIOS, FirmwareUEFI)
	}
	if err := checkObjectName(s.Pool); err != nil {
		return bad("pool: %v", err)
	}
	if err := checkObjectName(s.DiskVolume); err != nil {
		return bad("disk volume: %v", err)
	}
	if err := checkObjectName(s.SeedVolume); err != nil {
		return bad("seed volume: %v", err)
	}
	if s.DiskVolume == s.SeedVolume {
		return bad("the disk and the seed are the same volume %q", s.DiskVolume)
	}
	var targets []string
	if s.Bridge != "" {
		targets = append(targets, "bridge "+s.Bridge)
	}
	if s.Network != "" {
		targets = append(targets, "network "+s.Network)
	}
	if s.UserNetworking {
		targets = append(targets, "user networking")
	}
	if len(targets) != 1 {
		return bad("the NIC needs exactly one of bridge, network and user networking, got %d (%s)",
			len(targets), strings.Join(targets, ", "))
	}
	mac, err := canonicalMAC(s.MAC)
	if err != nil {
		return bad("MAC: %v", err)
	}
	if err := checkMetadataElement(s.Metadata); err != nil {
		return bad("metadata: %v", err)
	}
	return mac, nil
}

// checkObjectName refuses what libvirt refuses as a domain, pool or volume
// name: empty, with '/' (a dir pool would read it as a path), or with a
// control character (the schemas exclude newlines).
func checkObjectName(n string) error {
	switch {
	case n == "":
		return errors.New("empty")
	case strings.Contains(n, "/"):
		return fmt.Errorf("%q contains '/'", n)
	case strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%q contains a control character", n)
	}
	return nil
}

// canonicalMAC is mac as libvirt writes it (lower case, colons), if it is
// one libvirt takes for a NIC: 48 bits, unicast.
func canonicalMAC(mac string) (string, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return "", fmt.Errorf("%q: %v", mac, err)
	}
	if len(hw) != 6 || strings.Count(mac, ":") != 5 {
		return "", fmt.Errorf("%q is not six colon-separated bytes", mac)
	}
	if hw[0]&1 != 0 {
		return "", fmt.Errorf("%q is a multicast address", mac)
	}
	return hw.String(), nil
}

// checkMetadataElement makes sure the string placed verbatim inside
// <metadata> keeps the document well formed and is what libvirt keeps:
// exactly one element, in the marks' namespace (libvirt silently drops a
// child without a namespace, and DomainGetMetadata selects by it).
func checkMetadataElement(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty: the domain would carry no marks")
	}
	dec := xml.NewDecoder(strings.NewReader(s))
	depth, roots := 0, 0
	var root xml.Name
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("not well-formed XML: %v", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				root = t.Name
			}
			depth++
		case xml.EndElement:
			depth--
		case xml.CharData:
			if depth == 0 && strings.TrimSpace(string(t)) != "" {
				return fmt.Errorf("text %q outside the element", strings.TrimSpace(string(t)))
			}
		case xml.ProcInst, xml.Directive:
			if depth == 0 {
				return errors.New("a declaration or directive outside the element")
			}
		}
	}
	if roots != 1 {
		return fmt.Errorf("%d elements, want exactly one", roots)
	}
	if root.Space != metadataURI {
		return fmt.Errorf("<%s> is in namespace %q, want %q (libvirt drops elements without one, and the marks are looked up by it)",
			root.Local, root.Space, metadataURI)
	}
	return nil
}

// domainMAC is the NIC's MAC for an instance name: stable (so a
// re-defined domain keeps its DHCP lease and ARP entry), locally
// administered in QEMU's 52:54:00 range, derived from a hash of the name.
func domainMAC(name string) string { return provider.InstanceMAC(name) }

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
	bad := func(format string, args ...any) (string, error) {
		return "", provider.Errorf(provider.ErrPermanent, "volume %q: "+format, append([]any{v.Name}, args...)...)
	}
	if err := checkObjectName(v.Name); err != nil {
		return bad("name: %v", err)
	}
	switch v.Format {
	case FormatQCOW2, FormatRaw, formatISO:
	default:
		return bad("format %q is not %s, %s or %s", v.Format, FormatQCOW2, FormatRaw, formatISO)
	}
	if (v.BackingPath == "") != (v.BackingFormat == "") {
		return bad("backing path %q and backing format %q: give both or neither", v.BackingPath, v.BackingFormat)
	}
	if v.BackingPath != "" {
		// libvirt refuses a backing store for raw volumes.
		if v.Format != FormatQCOW2 {
			return bad("a backing image needs format %s, not %q", FormatQCOW2, v.Format)
		}
		if !strings.HasPrefix(v.BackingPath, "/") {
			return bad("backing path %q is not absolute", v.BackingPath)
		}
		if v.BackingFormat != FormatQCOW2 && v.BackingFormat != FormatRaw {
			return bad("backing format %q is not %s or %s", v.BackingFormat, FormatQCOW2, FormatRaw)
		}
		// An overlay of size 0 would be created as such and boot nothing.
		if v.CapacityBytes == 0 {
			return bad("an overlay needs its virtual size, got capacity 0")
		}
	}
	vol := libvirtxml.StorageVolume{
		Name:     v.Name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: v.CapacityBytes},
		// Sparse: a raw volume would otherwise be preallocated in full
		// (zero-filled where fallocate is missing) before an upload writes
		// it all again.
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0},
		Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: v.Format}},
	}
	if v.BackingPath != "" {
		vol.BackingStore = &libvirtxml.StorageVolumeBackingStore{
			Path:   v.BackingPath,
			Format: &libvirtxml.StorageVolumeTargetFormat{Type: v.BackingFormat},
		}
	}
	out, err := vol.Marshal()
	if err != nil {
		return bad("rendering: %v", err)
	}
	return out, nil
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
	var vol libvirtxml.StorageVolume
	if err := vol.Unmarshal(s); err != nil {
		return volumeDesc{}, provider.Errorf(provider.ErrTransient, "the volume XML libvirt returned does not parse: %v", err)
	}
	if vol.Capacity == nil {
		return volumeDesc{}, provider.Errorf(provider.ErrTransient, "the XML libvirt returned for volume %q has no capacity", vol.Name)
	}
	capacity, err := scaleBytes(vol.Capacity.Value, vol.Capacity.Unit)
	if err != nil {
		return volumeDesc{}, provider.Errorf(provider.ErrTransient, "the XML libvirt returned for volume %q: capacity: %v", vol.Name, err)
	}
	d := volumeDesc{CapacityBytes: capacity}
	if vol.Target != nil && vol.Target.Format != nil {
		d.Format = vol.Target.Format.Type
	}
	if b := vol.BackingStore; b != nil {
		d.BackingPath = strings.TrimSpace(b.Path)
		if b.Format != nil {
			d.BackingFormat = b.Format.Type
		}
	}
	return d, nil
}

// scaleBytes is value in unit as bytes, with libvirt's units (virScaleInteger):
// none, b, byte or bytes; k, m, g, t, p, e alone or with "ib" for powers of
// 1024, with "b" for powers of 1000; case-insensitive.
func scaleBytes(value uint64, unit string) (uint64, error) {
	u := strings.ToLower(strings.TrimSpace(unit))
	switch u {
	case "", "b", "byte", "bytes":
		return value, nil
	}
	exp := strings.IndexByte("kmgtpe", u[0]) + 1
	if exp == 0 {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	var base uint64
	switch u[1:] {
	case "", "ib":
		base = 1024
	case "b":
		base = 1000
	default:
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	scale := uint64(1)
	for range exp {
		scale *= base
	}
	hi, lo := bits.Mul64(value, scale)
	if hi != 0 {
		return 0, fmt.Errorf("%d %s overflows 64 bits", value, unit)
	}
	return lo, nil
}
