package libvirt

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// The defaults, all in one place (Config.Default applies them).
const (
	// DefaultSSHKeyFile and DefaultKnownHostsFile are where the kvm-ssh
	// Secret is mounted (docs/libvirt-provider.md). The key name is the one
	// a kubernetes.io/ssh-auth Secret uses.
	DefaultSSHKeyFile     = "/etc/proxy-operator/kvm/ssh-privatekey"
	DefaultKnownHostsFile = "/etc/proxy-operator/kvm/known_hosts"
	// DefaultSocket is the system libvirtd's (or virtqemud's compatibility)
	// socket on Debian, Ubuntu, Fedora and RHEL.
	DefaultSocket = "/var/run/libvirt/libvirt-sock"
	// DefaultPool is the storage pool virt-install and virt-manager create.
	DefaultPool = "default"
	// DefaultSSHPort is used when a host's address names no port.
	DefaultSSHPort = 22
	// DefaultDiskSizeGiB is each instance's disk (the overlay's virtual
	// size): a cloud image of 2-4 GiB plus room for Squid's logs.
	DefaultDiskSizeGiB = 10
	// DefaultMachineTypeName and DefaultMachineType are the catalogue used
	// when the config has none: enough for Squid and a Debian guest (the
	// real-guest recipe measured a comfortable boot at 1 GiB).
	DefaultMachineTypeName = "default"
	// DefaultImageFormat and DefaultFirmware apply to catalogue entries that
	// name none. BIOS because every QEMU has SeaBIOS, while UEFI needs OVMF
	// installed on the host and more memory; common cloud images boot both.
	DefaultImageFormat = FormatQCOW2
	DefaultFirmware    = FirmwareBIOS
)

// DefaultMachineType is the size of DefaultMachineTypeName.
var DefaultMachineType = MachineType{VCPUs: 1, MemoryMiB: 1024}

// Accepted values.
const (
	DomainTypeKVM  = "kvm"  // hardware virtualisation
	DomainTypeQEMU = "qemu" // emulation (TCG): slow, but runs anywhere

	FormatQCOW2 = "qcow2"
	FormatRaw   = "raw"

	FirmwareBIOS = "bios"
	FirmwareUEFI = "uefi"
)

// Limits the validation enforces: beyond them a value is a typo, not a plan.
const (
	minMemoryMiB   = 256
	maxMemoryMiB   = 4 << 20 // 4 TiB
	maxVCPUs       = 512
	maxDiskSizeGiB = 64 << 10 // 64 TiB
)

// Config is the `kvm` (or `kvm2`) block of a providers config entry: both
// type names read the same block, and messages name the one the entry has.
type Config struct {
	// SSHKeyFile is the private key the operator logs in with (unencrypted,
	// OpenSSH or PEM form). It is read on every dial, so a rotated Secret
	// needs no restart.
	SSHKeyFile string `json:"sshKeyFile,omitempty"`
	// KnownHostsFile pins every host's SSH host key (OpenSSH known_hosts
	// format, hashed or not); read on every dial.
	KnownHostsFile string `json:"knownHostsFile,omitempty"`
	// InsecureIgnoreHostKey accepts any host key. For a lab only: anyone on
	// the path can then impersonate the host. It is warned about on every
	// dial and shown by ProviderHealth.
	InsecureIgnoreHostKey bool `json:"insecureIgnoreHostKey,omitempty"`
	// DomainType is kvm or qemu for every host that sets none; empty means
	// detect per host (kvm only where the host's CPU offers vmx or svm and
	// libvirt offers kvm), reported in ProviderHealth's details.
	DomainType string `json:"domainType,omitempty"`
	// DiskSizeGiB is each instance's disk size in GiB.
	DiskSizeGiB int `json:"diskSizeGb,omitempty"`
	// InstallGuestAgent adds the vendor-data script that installs the QEMU
	// guest agent, through which the provider learns the address first.
	// Default true.
	InstallGuestAgent *bool `json:"installGuestAgent,omitempty"`
	// VendorData, when set, is the vendor-data every instance gets instead
	// of the guest-agent script (a site's own script or cloud-config).
	VendorData string `json:"vendorData,omitempty"`
	// Images is the catalogue placement.image picks from, by key.
	Images map[string]Image `json:"images,omitempty"`
	// DefaultImage is the catalogue key used when a Proxy names no image.
	DefaultImage string `json:"defaultImage,omitempty"`
	// MachineTypes is the catalogue placement.machineType picks from.
	MachineTypes map[string]MachineType `json:"machineTypes,omitempty"`
	// DefaultMachineType is the catalogue key used when a Proxy names none.
	DefaultMachineType string `json:"defaultMachineType,omitempty"`
	// Hosts are the libvirt hosts; placement.zone picks one by name
	// (optional when there is only one).
	Hosts []Host `json:"hosts,omitempty"`
	// Settings are the destination policy's keys, allowedDestinations and
	// connectPorts, beside the type's own.
	egress.Settings
}

// Host is one libvirt host, reached over SSH.
type Host struct {
	// Name identifies the host in placement.zone and in instance IDs.
	Name string `json:"name,omitempty"`
	// Address is the SSH server, host or host:port (port 22 by default).
	Address string `json:"address,omitempty"`
	// User is the SSH user; it must be allowed to open the libvirt socket
	// (root, or a member of the libvirt group).
	User string `json:"user,omitempty"`
	// Socket is libvirtd's unix socket on the host, reached through the SSH
	// direct-streamlocal channel.
	Socket string `json:"socket,omitempty"`
	// Pool is the storage pool for images, overlays and seeds.
	Pool string `json:"pool,omitempty"`
	// Bridge, Network or UserNetworking (exactly one) is where the
	// instances' NIC goes: a host bridge (the VMs are on the bridge's LAN),
	// a libvirt network, or QEMU's user-mode network (no host set-up; the
	// guest reaches out through QEMU's own NAT and nobody can connect to it
	// except through a port forward: for a lab or a test, not a fleet).
	Bridge         string `json:"bridge,omitempty"`
	Network        string `json:"network,omitempty"`
	UserNetworking bool   `json:"userNetworking,omitempty"`
	// DomainType overrides the block's domainType for this host.
	DomainType string `json:"domainType,omitempty"`
}

// Image is one catalogue entry.
type Image struct {
	// URL is where the image is downloaded from (http or https), once per
	// host; the operator streams it into the host's pool.
	URL string `json:"url,omitempty"`
	// SHA256 is the image's digest, lower-case hex; the download is
	// verified against it and it names the cached volume.
	SHA256 string `json:"sha256,omitempty"`
	// Format is qcow2 or raw.
	Format string `json:"format,omitempty"`
	// Firmware is bios or uefi.
	Firmware string `json:"firmware,omitempty"`
	// Family is the distribution family (debian, rhel) for the generated
	// cloud-config; empty is debian.
	Family string `json:"family,omitempty"`
}

// MachineType is a size.
type MachineType struct {
	VCPUs     int `json:"vcpus,omitempty"`
	MemoryMiB int `json:"memoryMiB,omitempty"`
}

// Default fills in what the config left out. It is the only place defaults
// are decided.
func (c *Config) Default() {
	if c.SSHKeyFile == "" {
		c.SSHKeyFile = DefaultSSHKeyFile
	}
	if c.KnownHostsFile == "" && !c.InsecureIgnoreHostKey {
		c.KnownHostsFile = DefaultKnownHostsFile
	}
	if c.DiskSizeGiB == 0 {
		c.DiskSizeGiB = DefaultDiskSizeGiB
	}
	if c.InstallGuestAgent == nil {
		install := c.VendorData == ""
		c.InstallGuestAgent = &install
	}
	if len(c.MachineTypes) == 0 {
		c.MachineTypes = map[string]MachineType{DefaultMachineTypeName: DefaultMachineType}
	}
	if c.DefaultMachineType == "" {
		c.DefaultMachineType = config.OnlyKey(c.MachineTypes)
	}
	if c.DefaultImage == "" {
		c.DefaultImage = config.OnlyKey(c.Images)
	}
	for k, img := range c.Images {
		if img.Format == "" {
			img.Format = DefaultImageFormat
		}
		if img.Firmware == "" {
			img.Firmware = DefaultFirmware
		}
		c.Images[k] = img
	}
	for i := range c.Hosts {
		h := &c.Hosts[i]
		if h.Socket == "" {
			h.Socket = DefaultSocket
		}
		if h.Pool == "" {
			h.Pool = DefaultPool
		}
		if h.DomainType == "" {
			h.DomainType = c.DomainType
		}
	}
}

// Validate checks a defaulted config; every error names its field under
// path, which carries the block name the entry used (kvm or kvm2).
func (c *Config) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.SSHKeyFile == "" || !path.IsAbs(c.SSHKeyFile) {
		errs = append(errs, field.Invalid(p.Child("sshKeyFile"), c.SSHKeyFile, "must be an absolute path to the mounted SSH private key"))
	}
	switch {
	case c.InsecureIgnoreHostKey && c.KnownHostsFile != "":
		errs = append(errs, field.Invalid(p.Child("insecureIgnoreHostKey"), true,
			"conflicts with knownHostsFile: either pin host keys or (in a lab only) ignore them"))
	case !c.InsecureIgnoreHostKey && !path.IsAbs(c.KnownHostsFile):
		errs = append(errs, field.Invalid(p.Child("knownHostsFile"), c.KnownHostsFile, "must be an absolute path to a known_hosts file"))
	}
	errs = append(errs, validDomainType(p.Child("domainType"), c.DomainType)...)
	if c.DiskSizeGiB < 1 || c.DiskSizeGiB > maxDiskSizeGiB {
		errs = append(errs, field.Invalid(p.Child("diskSizeGb"), c.DiskSizeGiB, fmt.Sprintf("must be 1-%d (GiB)", maxDiskSizeGiB)))
	}
	if c.VendorData != "" && c.InstallGuestAgent != nil && *c.InstallGuestAgent {
		errs = append(errs, field.Invalid(p.Child("installGuestAgent"), true,
			"conflicts with vendorData: an instance gets one vendor-data; put the agent's install into vendorData, or leave vendorData empty"))
	}
	errs = append(errs, c.validateImages(p)...)
	errs = append(errs, c.validateMachineTypes(p)...)
	errs = append(errs, c.validateHosts(p)...)
	errs = append(errs, c.Settings.Validate(p)...)
	return errs
}

// catalogueKey is what an image or machine type may be called: it becomes
// part of a volume name and is written in Proxies' placement.
var catalogueKey = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

const catalogueKeyRule = "must be 1-63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit"

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (c *Config) validateImages(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range config.SortedKeys(c.Images) {
		ip := p.Child("images").Key(k)
		img := c.Images[k]
		if !catalogueKey.MatchString(k) {
			errs = append(errs, field.Invalid(ip, k, catalogueKeyRule))
		}
		errs = append(errs, validImageURL(ip.Child("url"), img.URL)...)
		if !sha256Hex.MatchString(img.SHA256) {
			errs = append(errs, field.Invalid(ip.Child("sha256"), img.SHA256,
				"must be the image's SHA-256 as 64 lower-case hex digits: the download is verified against it"))
		}
		if img.Format != FormatQCOW2 && img.Format != FormatRaw {
			errs = append(errs, field.NotSupported(ip.Child("format"), img.Format, []string{FormatQCOW2, FormatRaw}))
		}
		if img.Firmware != FirmwareBIOS && img.Firmware != FirmwareUEFI {
			errs = append(errs, field.NotSupported(ip.Child("firmware"), img.Firmware, []string{FirmwareBIOS, FirmwareUEFI}))
		}
		if _, err := squid.ParseFamily(img.Family); err != nil {
			errs = append(errs, field.Invalid(ip.Child("family"), img.Family, err.Error()))
		}
	}
	if c.DefaultImage != "" {
		if _, ok := c.Images[c.DefaultImage]; !ok {
			errs = append(errs, field.NotFound(p.Child("defaultImage"), c.DefaultImage))
		}
	}
	return errs
}

// validImageURL accepts an absolute http or https URL with a host and
// without credentials (they would be logged with the URL).
func validImageURL(p *field.Path, raw string) field.ErrorList {
	if raw == "" {
		return field.ErrorList{field.Required(p, "the http(s) URL the image is downloaded from")}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, raw, "not a URL")}
	case u.Scheme != "http" && u.Scheme != "https":
		return field.ErrorList{field.Invalid(p, raw, "must be an http or https URL")}
	case u.Host == "":
		return field.ErrorList{field.Invalid(p, raw, "must name a host")}
	case u.User != nil:
		return field.ErrorList{field.Invalid(p, u.Redacted(), "must not carry credentials: URLs are logged")}
	}
	return nil
}

func (c *Config) validateMachineTypes(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range config.SortedKeys(c.MachineTypes) {
		mp := p.Child("machineTypes").Key(k)
		m := c.MachineTypes[k]
		if !catalogueKey.MatchString(k) {
			errs = append(errs, field.Invalid(mp, k, catalogueKeyRule))
		}
		if m.VCPUs < 1 || m.VCPUs > maxVCPUs {
			errs = append(errs, field.Invalid(mp.Child("vcpus"), m.VCPUs, fmt.Sprintf("must be 1-%d", maxVCPUs)))
		}
		if m.MemoryMiB < minMemoryMiB || m.MemoryMiB > maxMemoryMiB {
			errs = append(errs, field.Invalid(mp.Child("memoryMiB"), m.MemoryMiB,
				fmt.Sprintf("must be %d-%d (MiB); a guest with cloud-init and Squid needs at least %d", minMemoryMiB, maxMemoryMiB, minMemoryMiB)))
		}
	}
	if c.DefaultMachineType != "" {
		if _, ok := c.MachineTypes[c.DefaultMachineType]; !ok {
			errs = append(errs, field.NotFound(p.Child("defaultMachineType"), c.DefaultMachineType))
		}
	}
	return errs
}

func (c *Config) validateHosts(p *field.Path) field.ErrorList {
	hp := p.Child("hosts")
	if len(c.Hosts) == 0 {
		return field.ErrorList{field.Required(hp, "at least one libvirt host")}
	}
	var errs field.ErrorList
	seen := map[string]int{}
	for i, h := range c.Hosts {
		ip := hp.Index(i)
		switch msgs := validation.IsDNS1123Label(h.Name); {
		case h.Name == "":
			errs = append(errs, field.Required(ip.Child("name"), "a DNS-1123 label naming the host in placement.zone"))
		case len(msgs) > 0:
			errs = append(errs, field.Invalid(ip.Child("name"), h.Name, strings.Join(msgs, "; ")))
		default:
			if j, dup := seen[h.Name]; dup {
				errs = append(errs, field.Duplicate(ip.Child("name"), fmt.Sprintf("%s (also hosts[%d])", h.Name, j)))
			} else {
				seen[h.Name] = i
			}
		}
		if _, err := sshAddress(h.Address); err != nil {
			errs = append(errs, field.Invalid(ip.Child("address"), h.Address, err.Error()))
		}
		if h.User == "" {
			errs = append(errs, field.Required(ip.Child("user"), "the SSH user, allowed to open the libvirt socket"))
		} else if strings.ContainsAny(h.User, " \t\r\n@:/") {
			errs = append(errs, field.Invalid(ip.Child("user"), h.User, "must be a plain user name"))
		}
		if !path.IsAbs(h.Socket) {
			errs = append(errs, field.Invalid(ip.Child("socket"), h.Socket, "must be the absolute path of libvirtd's unix socket on the host"))
		}
		if !libvirtName.MatchString(h.Pool) {
			errs = append(errs, field.Invalid(ip.Child("pool"), h.Pool, libvirtNameRule))
		}
		switch {
		case h.Bridge == "" && h.Network == "" && !h.UserNetworking:
			errs = append(errs, field.Required(ip.Child("bridge"), "a host bridge, or a libvirt network in network, for the instances' NIC"))
		case h.Bridge != "" && h.Network != "":
			errs = append(errs, field.Invalid(ip.Child("network"), h.Network, "conflicts with bridge: the NIC goes to one of them"))
		case h.UserNetworking && (h.Bridge != "" || h.Network != ""):
			errs = append(errs, field.Invalid(ip.Child("userNetworking"), true, "conflicts with bridge and network: the NIC goes to one of them"))
		case h.Bridge != "" && !ifaceName.MatchString(h.Bridge):
			errs = append(errs, field.Invalid(ip.Child("bridge"), h.Bridge, "must be a network interface name (1-15 characters, no '/', ':' or spaces)"))
		case h.Network != "" && !libvirtName.MatchString(h.Network):
			errs = append(errs, field.Invalid(ip.Child("network"), h.Network, libvirtNameRule))
		}
		errs = append(errs, validDomainType(ip.Child("domainType"), h.DomainType)...)
	}
	return errs
}

// libvirtName is a pool or network name as this provider accepts it: what
// virsh users write, and safe in XML and log lines.
var libvirtName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

const libvirtNameRule = "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"

// ifaceName is a Linux interface name (IFNAMSIZ 16 with the NUL).
var ifaceName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

func validDomainType(p *field.Path, t string) field.ErrorList {
	switch t {
	case "", DomainTypeKVM, DomainTypeQEMU:
		return nil
	}
	return field.ErrorList{field.NotSupported(p, t, []string{DomainTypeKVM, DomainTypeQEMU})}
}

// sshAddress is the host:port an address means (port 22 when it names
// none). IPv6 literals need brackets when a port is given.
func sshAddress(addr string) (string, error) {
	if addr == "" {
		return "", fmt.Errorf("required: the SSH server, host or host:port")
	}
	if strings.ContainsAny(addr, " \t\r\n/@") {
		return "", fmt.Errorf("must be host or host:port")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		// No port: a bare host name, IPv4 or (unbracketed) IPv6 literal.
		host, port = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), strconv.Itoa(DefaultSSHPort)
		if strings.Contains(host, ":") && net.ParseIP(host) == nil {
			return "", fmt.Errorf("must be host or host:port (bracket an IPv6 literal with a port: [::1]:22)")
		}
	}
	if host == "" {
		return "", fmt.Errorf("must name a host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q is not a TCP port", port)
	}
	if net.ParseIP(host) == nil && len(validation.IsDNS1123Subdomain(strings.ToLower(host))) > 0 {
		return "", fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return net.JoinHostPort(host, port), nil
}

// destinations is the policy of a validated config.
func (c *Config) destinations() *egress.Policy { return c.Settings.Policy() }

// Parse decodes a `kvm` or `kvm2` block strictly, fills in defaults and
// validates it; errors are under path (the entry's SettingsPath, which names
// the block the entry used). Nil raw is an error: a host is required.
func Parse(raw json.RawMessage, path *field.Path) (Config, field.ErrorList) {
	return config.Decode[Config](raw, path)
}
