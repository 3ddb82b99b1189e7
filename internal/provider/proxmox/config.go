package proxmox

import (
	"encoding/json"
	"net/url"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// Type is the provider type name.
const Type = "proxmox"

// PollInterval is how often the reconciler polls Get: clones take tens of
// seconds.
const PollInterval = 5 * time.Second

// The defaults, all in one place (Config.Default applies them).
const (
	// DefaultVMIDMin and DefaultVMIDMax bound the VMIDs the operator
	// allocates: away from PVE's own next-free search, which starts at 100.
	DefaultVMIDMin = 20000
	DefaultVMIDMax = 29999
	// DefaultRequestTimeoutSeconds bounds one API request.
	DefaultRequestTimeoutSeconds = 30
	// DefaultMachineTypeName is the catalogue used when the config has
	// none, sized DefaultMachineType.
	DefaultMachineTypeName = "small"
)

// DefaultMachineType is the size of DefaultMachineTypeName.
var DefaultMachineType = MachineType{Cores: 1, MemoryMB: 1024}

// MachineType is a catalogue entry: cores and memory (MiB).
type MachineType struct {
	Cores    int `json:"cores"`
	MemoryMB int `json:"memoryMB"`
}

// Config is the proxmox type block.
type Config struct {
	// URL is pveproxy's API base, https://host:8006/api2/json.
	URL string `json:"url"`
	// TokenFile holds "user@realm!id=secret"; re-read on every request.
	TokenFile string `json:"tokenFile"`
	// CAFile is the PEM CA that signs pveproxy's certificate; reloaded
	// when it changes. Empty uses the system roots.
	CAFile                string   `json:"caFile,omitempty"`
	InsecureSkipTLSVerify bool     `json:"insecureSkipTLSVerify,omitempty"`
	Nodes                 []string `json:"nodes"`
	// Templates maps an image name (Placement.Image) to a template VMID.
	Templates map[string]int `json:"templates"`
	// TemplateFamilies gives a template's distribution family (debian,
	// rhel), which the generated Squid cloud-config is written for; a
	// template it does not name is debian.
	TemplateFamilies map[string]string      `json:"templateFamilies,omitempty"`
	DefaultTemplate  string                 `json:"defaultTemplate,omitempty"`
	MachineTypes     map[string]MachineType `json:"machineTypes,omitempty"`
	DefaultMachine   string                 `json:"defaultMachineType,omitempty"`
	// ISOStorage receives the seed ISOs; no default (the token needs
	// Datastore.Allocate there).
	ISOStorage string `json:"isoStorage"`
	Bridge     string `json:"bridge,omitempty"`
	VLANTag    int    `json:"vlanTag,omitempty"`
	DiskGiB    int    `json:"diskGiB,omitempty"`
	VMIDMin    int    `json:"vmidMin,omitempty"`
	VMIDMax    int    `json:"vmidMax,omitempty"`
	// FullClone makes full clones; linked clones (the default) need the
	// template's storage to support them.
	FullClone             bool `json:"fullClone,omitempty"`
	RequestTimeoutSeconds int  `json:"requestTimeoutSeconds,omitempty"`
	// Settings are the destination policy's keys, allowedDestinations and
	// connectPorts, beside the type's own (the generated Squid config).
	egress.Settings
}

// Parse decodes, defaults and validates a type block.
func Parse(raw json.RawMessage, path *field.Path) (Config, field.ErrorList) {
	return config.Decode[Config](raw, path)
}

// Default fills the unset fields: the defaults live here only.
func (c *Config) Default() {
	if c.VMIDMin == 0 {
		c.VMIDMin = DefaultVMIDMin
	}
	if c.VMIDMax == 0 {
		c.VMIDMax = DefaultVMIDMax
	}
	if c.RequestTimeoutSeconds == 0 {
		c.RequestTimeoutSeconds = DefaultRequestTimeoutSeconds
	}
	if len(c.MachineTypes) == 0 {
		c.MachineTypes = map[string]MachineType{DefaultMachineTypeName: DefaultMachineType}
	}
	if c.DefaultMachine == "" {
		c.DefaultMachine = config.OnlyKey(c.MachineTypes)
	}
	if c.DefaultTemplate == "" {
		c.DefaultTemplate = config.OnlyKey(c.Templates)
	}
	if len(c.Templates) > 0 {
		// Every template's family, resolved (a copy: the caller's map is
		// not written).
		fams := make(map[string]string, len(c.Templates))
		for k, v := range c.TemplateFamilies {
			fams[k] = v
		}
		for k := range c.Templates {
			if fams[k] == "" {
				fams[k] = string(squid.FamilyDebian)
			}
		}
		c.TemplateFamilies = fams
	}
}

var idPattern = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9._-]*$`)

// Validate checks the defaulted block; node and storage names end up in
// request paths, so they are checked by PVE's own patterns.
func (c *Config) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if u, err := url.Parse(c.URL); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, field.Invalid(p.Child("url"), c.URL, "must be an https URL such as https://pve:8006/api2/json"))
	}
	if c.TokenFile == "" {
		errs = append(errs, field.Required(p.Child("tokenFile"), "the mounted API token file (user@realm!id=secret)"))
	}
	if c.InsecureSkipTLSVerify && c.CAFile != "" {
		errs = append(errs, field.Invalid(p.Child("insecureSkipTLSVerify"), true,
			"conflicts with caFile: either verify pveproxy's certificate against the CA or (in a lab only) skip verification"))
	}
	if len(c.Nodes) == 0 {
		errs = append(errs, field.Required(p.Child("nodes"), "at least one node"))
	}
	seen := map[string]bool{}
	for i, n := range c.Nodes {
		switch {
		case !idPattern.MatchString(n):
			errs = append(errs, field.Invalid(p.Child("nodes").Index(i), n, "not a node name"))
		case seen[n]:
			errs = append(errs, field.Duplicate(p.Child("nodes").Index(i), n))
		}
		seen[n] = true
	}
	if c.ISOStorage == "" {
		errs = append(errs, field.Required(p.Child("isoStorage"), "the storage that receives seed ISOs (needs iso content)"))
	} else if !idPattern.MatchString(c.ISOStorage) {
		errs = append(errs, field.Invalid(p.Child("isoStorage"), c.ISOStorage, "not a storage ID"))
	}
	if len(c.Templates) == 0 {
		errs = append(errs, field.Required(p.Child("templates"), "at least one template VMID"))
	}
	for _, k := range config.SortedKeys(c.Templates) {
		if v := c.Templates[k]; v < 100 || v > 999999999 {
			errs = append(errs, field.Invalid(p.Child("templates").Key(k), v, "not a VMID (100-999999999)"))
		}
	}
	for _, k := range config.SortedKeys(c.TemplateFamilies) {
		fp := p.Child("templateFamilies").Key(k)
		if _, ok := c.Templates[k]; !ok {
			errs = append(errs, field.NotFound(fp, k))
		}
		if _, err := squid.ParseFamily(c.TemplateFamilies[k]); err != nil {
			errs = append(errs, field.Invalid(fp, c.TemplateFamilies[k], err.Error()))
		}
	}
	if c.DefaultTemplate != "" {
		if _, ok := c.Templates[c.DefaultTemplate]; !ok {
			errs = append(errs, field.NotFound(p.Child("defaultTemplate"), c.DefaultTemplate))
		}
	}
	for _, k := range config.SortedKeys(c.MachineTypes) {
		m := c.MachineTypes[k]
		if m.Cores < 1 || m.MemoryMB < 64 {
			errs = append(errs, field.Invalid(p.Child("machineTypes").Key(k), m, "cores >= 1 and memoryMB >= 64"))
		}
	}
	if c.DefaultMachine != "" {
		if _, ok := c.MachineTypes[c.DefaultMachine]; !ok {
			errs = append(errs, field.NotFound(p.Child("defaultMachineType"), c.DefaultMachine))
		}
	}
	if c.VMIDMin < 100 || c.VMIDMax > 999999999 || c.VMIDMin > c.VMIDMax {
		errs = append(errs, field.Invalid(p.Child("vmidMin"), c.VMIDMin, "range must lie in [100, 999999999] with vmidMin <= vmidMax"))
	}
	if c.VLANTag < 0 || c.VLANTag > 4094 {
		errs = append(errs, field.Invalid(p.Child("vlanTag"), c.VLANTag, "0..4094"))
	}
	if c.DiskGiB < 0 {
		errs = append(errs, field.Invalid(p.Child("diskGiB"), c.DiskGiB, "must not be negative"))
	}
	if c.RequestTimeoutSeconds < 1 {
		errs = append(errs, field.Invalid(p.Child("requestTimeoutSeconds"), c.RequestTimeoutSeconds, "must be positive"))
	}
	errs = append(errs, c.Settings.Validate(p)...)
	return errs
}

// family is the template image's distribution family (Validate proved it).
func (c *Config) family(image string) squid.Family {
	f, _ := squid.ParseFamily(c.TemplateFamilies[image])
	return f
}
