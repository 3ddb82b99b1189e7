package gcp

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// The defaults, all in one place (Config.Default applies them).
const (
	// DefaultNetwork is the VPC network every new project has.
	DefaultNetwork = "default"
	// DefaultNetworkTagPrefix is the network tag every instance carries; its
	// managed firewall rule targets "<prefix>-<hash of the instance name>".
	DefaultNetworkTagPrefix = "egress-proxy"
	// DefaultDiskSizeGB is the boot disk: a cloud image of 2-4 GB plus room
	// for Squid's logs. 10 GB is also the smallest size the Ubuntu and
	// Debian images accept.
	DefaultDiskSizeGB = 10
	// DefaultDiskType is GCE's own default for new disks.
	DefaultDiskType = "pd-balanced"
	// DefaultMachineType is used when neither the Proxy nor the entry names
	// one: two shared vCPUs and 2 GB, room for apt and Squid.
	DefaultMachineType = "e2-small"
	// DefaultImage is an image family that runs cloud-init (Ubuntu's GCE
	// images do; Debian's do not: docs/gcp-provider.md).
	DefaultImage = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
	// DefaultFirewallPriority is GCE's own default rule priority.
	DefaultFirewallPriority = 1000
	// DefaultCredentialsFile is where the gcp-credentials Secret's key is
	// mounted (config/manager/manager.yaml); the provider uses it only when
	// the entry sets credentialsFile to it (or any other path).
	DefaultCredentialsFile = "/etc/proxy-operator/gcp/key.json"
)

// Address modes.
const (
	// AddressExternal gives each instance an ephemeral external IP (its own
	// egress IP), which is also the address the Proxy reports.
	AddressExternal = "external"
	// AddressInternal gives it none: the Proxy reports the internal IP, and
	// the VM reaches the internet only through Cloud NAT (or not at all).
	AddressInternal = "internal"
)

// Limits the validation enforces.
const (
	minDiskSizeGB = 10
	maxDiskSizeGB = 65536
	maxLabels     = 64
)

// Config is the `gcp` block of a providers config entry.
type Config struct {
	// Project is the project the instances live in (required).
	Project string `json:"project,omitempty"`
	// CredentialsFile is a service account key (JSON, type service_account),
	// typically the mounted gcp-credentials Secret. Empty: Application
	// Default Credentials (workload identity, GOOGLE_APPLICATION_CREDENTIALS,
	// the metadata server). The file is re-read when it changes, so a
	// rotated Secret needs no restart.
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// Endpoint overrides the Compute API's base URL: a Private Service
	// Connect endpoint (https://compute-xyz.p.googleapis.com), a regional or
	// a test endpoint. Empty: https://compute.googleapis.com.
	Endpoint string `json:"endpoint,omitempty"`
	// Zones, when set, are the only zones Proxies may use; their regions
	// are where the Checker reads quota. DefaultZone is used when a Proxy
	// names neither zone nor region.
	Zones       []string `json:"zones,omitempty"`
	DefaultZone string   `json:"defaultZone,omitempty"`
	// Network is the VPC network of the instances and of their firewall
	// rules: a name in Project, or projects/<host>/global/networks/<n> for
	// a Shared VPC (the rules then live in the host project).
	Network string `json:"network,omitempty"`
	// Subnetwork is the subnetwork in the instance's region: a name (looked
	// up in every region, as auto-mode networks name theirs after the
	// network) or regions/<r>/subnetworks/<s> (projects/<p>/... for a
	// Shared VPC), which pins the region. Empty: the network's default.
	Subnetwork string `json:"subnetwork,omitempty"`
	// NetworkTagPrefix is a network tag every instance carries (for rules a
	// team manages itself) and the prefix of the tag unique to each
	// instance that its managed firewall rule targets.
	NetworkTagPrefix string `json:"networkTagPrefix,omitempty"`
	// DiskSizeGB and DiskType shape the boot disk (AutoDelete: it goes
	// with the instance).
	DiskSizeGB int64  `json:"diskSizeGb,omitempty"`
	DiskType   string `json:"diskType,omitempty"`
	// AddressMode is external (an ephemeral external IP per instance, the
	// default) or internal (none; the internal IP is reported).
	AddressMode string `json:"addressMode,omitempty"`
	// MachineTypes maps placement.machineType keys to GCE machine types.
	// Empty: placement.machineType is a GCE machine type name itself.
	MachineTypes map[string]string `json:"machineTypes,omitempty"`
	// DefaultMachineType is a catalogue key (or, without a catalogue, a GCE
	// machine type) used when a Proxy names none.
	DefaultMachineType string `json:"defaultMachineType,omitempty"`
	// Images maps placement.image keys to images. Empty: placement.image is
	// an image path itself (projects/<p>/global/images/[family/]<name>).
	Images map[string]Image `json:"images,omitempty"`
	// DefaultImage is a catalogue key (or an image path) used when a Proxy
	// names none.
	DefaultImage string `json:"defaultImage,omitempty"`
	// ServiceAccount is the e-mail of the service account the VMs run as,
	// with Scopes. Empty (the default): none, so a proxy VM holds no cloud
	// credentials for its clients to reach through the metadata server.
	ServiceAccount string   `json:"serviceAccount,omitempty"`
	Scopes         []string `json:"scopes,omitempty"`
	// Labels are added to every instance (the operator's marks beside
	// them); keys and values follow GCE's label rules.
	Labels map[string]string `json:"labels,omitempty"`
	// ManageFirewall makes the provider keep one VPC firewall rule per
	// instance admitting the Proxy's allowedSourceRanges to its port.
	// Default true; false for a team that manages firewall rules itself
	// (target the networkTagPrefix tag).
	ManageFirewall *bool `json:"manageFirewall,omitempty"`
	// FirewallPriority is the managed rules' priority (0-65535, lower wins).
	FirewallPriority *int32 `json:"firewallPriority,omitempty"`
	// Settings are the destination policy's keys, allowedDestinations and
	// connectPorts, beside the type's own.
	egress.Settings
}

// Image is one catalogue entry.
type Image struct {
	// Image is projects/<p>/global/images/<name> or
	// projects/<p>/global/images/family/<family> (or the same as a URL).
	Image string `json:"image,omitempty"`
	// Family is the distribution family (debian, rhel) for the generated
	// Squid cloud-config; empty: guessed from the image's project.
	Family string `json:"family,omitempty"`
}

// Default fills in what the config left out. It is the only place
// defaults are decided, and it is idempotent (New applies it again).
func (c *Config) Default() {
	if c.Network == "" {
		c.Network = DefaultNetwork
	}
	if c.NetworkTagPrefix == "" {
		c.NetworkTagPrefix = DefaultNetworkTagPrefix
	}
	if c.DiskSizeGB == 0 {
		c.DiskSizeGB = DefaultDiskSizeGB
	}
	if c.DiskType == "" {
		c.DiskType = DefaultDiskType
	}
	if c.AddressMode == "" {
		c.AddressMode = AddressExternal
	}
	if c.DefaultMachineType == "" {
		if len(c.MachineTypes) == 0 {
			c.DefaultMachineType = DefaultMachineType
		} else {
			c.DefaultMachineType = config.OnlyKey(c.MachineTypes)
		}
	}
	if c.DefaultImage == "" {
		if len(c.Images) == 0 {
			c.DefaultImage = DefaultImage
		} else {
			c.DefaultImage = config.OnlyKey(c.Images)
		}
	}
	if c.DefaultZone == "" && len(c.Zones) == 1 {
		c.DefaultZone = c.Zones[0]
	}
	if c.ManageFirewall == nil {
		on := true
		c.ManageFirewall = &on
	}
	if c.FirewallPriority == nil {
		p := int32(DefaultFirewallPriority)
		c.FirewallPriority = &p
	}
}

// Patterns of GCE names, as the API states them.
var (
	// projectID: 6-30 lowercase letters, digits and hyphens, starting
	// with a letter, not ending with a hyphen; domain-scoped projects
	// (example.com:proj) are accepted too.
	projectID = regexp.MustCompile(`^([a-z][-a-z0-9.]*[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
	// gceName is the resource name rule (instances, tags, firewall rules,
	// networks, machine types).
	gceName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// zoneName is <region>-<letter>, e.g. us-central1-a.
	zoneName = regexp.MustCompile(`^([a-z]+-[a-z]+[0-9]+)-[a-z]$`)
	// regionName is e.g. us-central1, europe-west4.
	regionName = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)
	// labelKey and labelValue are GCE's label rules (ASCII form): keys
	// start with a letter; both at most 63 characters.
	labelKey   = regexp.MustCompile(`^[a-z][-_a-z0-9]{0,62}$`)
	labelValue = regexp.MustCompile(`^[-_a-z0-9]{0,63}$`)
	// catalogueKey is what a catalogue key may be: it is written in
	// Proxies' placement.
	catalogueKey = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	// tagPrefix leaves room for "-<10 hex>" within a tag's 63 characters.
	tagPrefix = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,50}[a-z0-9])?$`)
	// serviceAccount is an e-mail address of a service account.
	serviceAccountEmail = regexp.MustCompile(`^[a-z0-9][-a-z0-9_.+]*@[a-z0-9][-a-z0-9.]*\.[a-z]+$`)
)

const (
	catalogueKeyRule = "must be 1-63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit"
	gceNameRule      = "must be 1-63 lower-case letters, digits or '-', starting with a letter and not ending with '-'"
)

// Validate checks a defaulted config; every error names its field under
// path.
func (c *Config) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case c.Project == "":
		errs = append(errs, field.Required(p.Child("project"), "the project the instances are made in"))
	case !projectID.MatchString(c.Project):
		errs = append(errs, field.Invalid(p.Child("project"), c.Project, "must be a project ID (6-30 lower-case letters, digits or '-', starting with a letter)"))
	}
	if c.CredentialsFile != "" && !path.IsAbs(c.CredentialsFile) {
		errs = append(errs, field.Invalid(p.Child("credentialsFile"), c.CredentialsFile, "must be an absolute path to the mounted service account key"))
	}
	errs = append(errs, validEndpoint(p.Child("endpoint"), c.Endpoint)...)
	seen := map[string]int{}
	for i, z := range c.Zones {
		zp := p.Child("zones").Index(i)
		switch j, dup := seen[z]; {
		case !zoneName.MatchString(z):
			errs = append(errs, field.Invalid(zp, z, "must be a zone name such as us-central1-a"))
		case dup:
			errs = append(errs, field.Duplicate(zp, fmt.Sprintf("%s (also zones[%d])", z, j)))
		default:
			seen[z] = i
		}
	}
	if c.DefaultZone != "" {
		switch _, listed := seen[c.DefaultZone]; {
		case !zoneName.MatchString(c.DefaultZone):
			errs = append(errs, field.Invalid(p.Child("defaultZone"), c.DefaultZone, "must be a zone name such as us-central1-a"))
		case len(c.Zones) > 0 && !listed:
			errs = append(errs, field.Invalid(p.Child("defaultZone"), c.DefaultZone, "must be one of zones"))
		}
	}
	if _, _, err := parseNetwork(c.Project, c.Network); err != nil {
		errs = append(errs, field.Invalid(p.Child("network"), c.Network, err.Error()))
	}
	if c.Subnetwork != "" {
		if _, err := parseSubnetwork(c.Project, c.Subnetwork); err != nil {
			errs = append(errs, field.Invalid(p.Child("subnetwork"), c.Subnetwork, err.Error()))
		}
	}
	if !tagPrefix.MatchString(c.NetworkTagPrefix) {
		errs = append(errs, field.Invalid(p.Child("networkTagPrefix"), c.NetworkTagPrefix,
			"must be 1-52 lower-case letters, digits or '-', starting with a letter and not ending with '-' (room is left for the per-instance suffix)"))
	}
	if c.DiskSizeGB < minDiskSizeGB || c.DiskSizeGB > maxDiskSizeGB {
		errs = append(errs, field.Invalid(p.Child("diskSizeGb"), c.DiskSizeGB, fmt.Sprintf("must be %d-%d (GB)", minDiskSizeGB, maxDiskSizeGB)))
	}
	if !gceName.MatchString(c.DiskType) {
		errs = append(errs, field.Invalid(p.Child("diskType"), c.DiskType, "must be a disk type such as pd-balanced, pd-ssd or pd-standard"))
	}
	if c.AddressMode != AddressExternal && c.AddressMode != AddressInternal {
		errs = append(errs, field.NotSupported(p.Child("addressMode"), c.AddressMode, []string{AddressExternal, AddressInternal}))
	}
	errs = append(errs, c.validateMachineTypes(p)...)
	errs = append(errs, c.validateImages(p)...)
	switch {
	case c.ServiceAccount != "" && !serviceAccountEmail.MatchString(c.ServiceAccount):
		errs = append(errs, field.Invalid(p.Child("serviceAccount"), c.ServiceAccount, "must be a service account's e-mail address"))
	case c.ServiceAccount == "" && len(c.Scopes) > 0:
		errs = append(errs, field.Invalid(p.Child("scopes"), c.Scopes, "scopes need a serviceAccount; without one the VMs hold no credentials"))
	}
	for i, s := range c.Scopes {
		if u, err := url.Parse(s); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("scopes").Index(i), s, "must be an OAuth scope URL such as https://www.googleapis.com/auth/logging.write"))
		}
	}
	errs = append(errs, validLabels(p.Child("labels"), c.Labels)...)
	if pr := *c.FirewallPriority; pr < 0 || pr > 65535 {
		errs = append(errs, field.Invalid(p.Child("firewallPriority"), pr, "must be 0-65535"))
	}
	errs = append(errs, c.Settings.Validate(p)...)
	return errs
}

func validEndpoint(p *field.Path, raw string) field.ErrorList {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, raw, "not a URL")}
	case u.Scheme != "https" && u.Scheme != "http":
		return field.ErrorList{field.Invalid(p, raw, "must be an https URL (http only for a test endpoint)")}
	case u.Host == "":
		return field.ErrorList{field.Invalid(p, raw, "must name a host")}
	case u.User != nil:
		return field.ErrorList{field.Invalid(p, u.Redacted(), "must not carry credentials: it is logged")}
	case u.RawQuery != "" || u.Fragment != "":
		return field.ErrorList{field.Invalid(p, raw, "must be a base URL without query or fragment")}
	}
	return nil
}

func (c *Config) validateMachineTypes(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range config.SortedKeys(c.MachineTypes) {
		mp := p.Child("machineTypes").Key(k)
		if !catalogueKey.MatchString(k) {
			errs = append(errs, field.Invalid(mp, k, catalogueKeyRule))
		}
		if v := c.MachineTypes[k]; !gceName.MatchString(v) {
			errs = append(errs, field.Invalid(mp, v, "must be a GCE machine type such as e2-small or n2-custom-2-4096"))
		}
	}
	switch {
	case c.DefaultMachineType == "":
	case len(c.MachineTypes) > 0:
		if _, ok := c.MachineTypes[c.DefaultMachineType]; !ok {
			errs = append(errs, field.NotFound(p.Child("defaultMachineType"), c.DefaultMachineType))
		}
	case !gceName.MatchString(c.DefaultMachineType):
		errs = append(errs, field.Invalid(p.Child("defaultMachineType"), c.DefaultMachineType, "must be a GCE machine type such as e2-small"))
	}
	return errs
}

func (c *Config) validateImages(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range config.SortedKeys(c.Images) {
		ip := p.Child("images").Key(k)
		img := c.Images[k]
		if !catalogueKey.MatchString(k) {
			errs = append(errs, field.Invalid(ip, k, catalogueKeyRule))
		}
		if ref, err := parseImage(img.Image); err != nil {
			errs = append(errs, field.Invalid(ip.Child("image"), img.Image, err.Error()))
		} else if msg := noUserData(ref); msg != "" {
			errs = append(errs, field.Invalid(ip.Child("image"), img.Image, msg))
		}
		if _, err := squid.ParseFamily(img.Family); err != nil {
			errs = append(errs, field.Invalid(ip.Child("family"), img.Family, err.Error()))
		}
	}
	switch {
	case c.DefaultImage == "":
	case len(c.Images) > 0:
		if _, ok := c.Images[c.DefaultImage]; !ok {
			errs = append(errs, field.NotFound(p.Child("defaultImage"), c.DefaultImage))
		}
	default:
		if ref, err := parseImage(c.DefaultImage); err != nil {
			errs = append(errs, field.Invalid(p.Child("defaultImage"), c.DefaultImage, err.Error()))
		} else if msg := noUserData(ref); msg != "" {
			errs = append(errs, field.Invalid(p.Child("defaultImage"), c.DefaultImage, msg))
		}
	}
	return errs
}

// noUserData is why an image cannot serve a Proxy at all ("" when it can).
func noUserData(ref imageRef) string {
	if _, _, reads := imageSupport(ref.project); !reads {
		return "images of project " + ref.project + " do not run cloud-init, so an instance would never read its user-data (docs/gcp-provider.md); use e.g. " + DefaultImage
	}
	return ""
}

// validLabels checks the entry's extra labels: GCE's rules, none of the
// operator's mark keys, and room for the three marks within the 64 labels
// an instance may carry.
func validLabels(p *field.Path, labels map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, k := range config.SortedKeys(labels) {
		kp := p.Key(k)
		switch {
		case !labelKey.MatchString(k):
			errs = append(errs, field.Invalid(kp, k, "a label key must be 1-63 lower-case letters, digits, '_' or '-', starting with a letter"))
		case k == provider.MarkManaged || k == provider.MarkUID || k == provider.MarkInstallation:
			errs = append(errs, field.Forbidden(kp, "the operator's own mark; it is set on every instance"))
		}
		if v := labels[k]; !labelValue.MatchString(v) {
			errs = append(errs, field.Invalid(kp, v, "a label value must be at most 63 lower-case letters, digits, '_' or '-'"))
		}
	}
	if len(labels) > maxLabels-3 {
		errs = append(errs, field.TooMany(p, len(labels), maxLabels-3))
	}
	return errs
}

// managesFirewall says whether the entry keeps the per-instance rules.
func (c *Config) managesFirewall() bool { return c.ManageFirewall == nil || *c.ManageFirewall }

// Parse decodes a `gcp` block strictly, fills in defaults and validates it;
// errors are under path (the entry's SettingsPath). Nil raw is an error: a
// project is required.
func Parse(raw json.RawMessage, path *field.Path) (Config, field.ErrorList) {
	return config.Decode[Config](raw, path)
}

// ---- references to GCE resources, parsed once ----

// apiPrefixes are what a resource URL may start with; the rest is its
// path ("projects/...").
var apiPrefixes = []string{
	"https://www.googleapis.com/compute/v1/",
	"https://compute.googleapis.com/compute/v1/",
}

// trimURL turns a resource URL into its path; a path stays as it is.
func trimURL(s string) string {
	for _, pre := range apiPrefixes {
		if strings.HasPrefix(s, pre) {
			return strings.TrimPrefix(s, pre)
		}
	}
	return s
}

// parseNetwork reads a network reference: a name in project, or
// projects/<p>/global/networks/<n>. It returns the network's project and
// path.
func parseNetwork(project, s string) (netProject, netPath string, err error) {
	s = trimURL(s)
	if gceName.MatchString(s) {
		return project, "projects/" + project + "/global/networks/" + s, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) == 5 && parts[0] == "projects" && projectID.MatchString(parts[1]) && parts[2] == "global" &&
		parts[3] == "networks" && gceName.MatchString(parts[4]) {
		return parts[1], s, nil
	}
	return "", "", fmt.Errorf("must be a network name or projects/<project>/global/networks/<name>")
}

// subnet is a parsed subnetwork reference.
type subnet struct {
	name    string
	project string // empty: the instance's project
	region  string // empty: the instance's region
}

// parseSubnetwork reads a subnetwork reference: a name, or
// [projects/<p>/]regions/<r>/subnetworks/<s>.
func parseSubnetwork(project, s string) (subnet, error) {
	s = trimURL(s)
	if gceName.MatchString(s) {
		return subnet{name: s}, nil
	}
	parts := strings.Split(s, "/")
	sn := subnet{project: project}
	if len(parts) == 6 && parts[0] == "projects" && projectID.MatchString(parts[1]) {
		sn.project, parts = parts[1], parts[2:]
	}
	if len(parts) == 4 && parts[0] == "regions" && regionName.MatchString(parts[1]) && parts[2] == "subnetworks" && gceName.MatchString(parts[3]) {
		sn.region, sn.name = parts[1], parts[3]
		return sn, nil
	}
	return subnet{}, fmt.Errorf("must be a subnetwork name or [projects/<project>/]regions/<region>/subnetworks/<name>")
}

// path is the subnetwork's path for an instance of project in region.
func (s subnet) path(project, region string) string {
	if s.project != "" {
		project = s.project
	}
	if s.region != "" {
		region = s.region
	}
	return "projects/" + project + "/regions/" + region + "/subnetworks/" + s.name
}

// imageRef is a parsed image reference.
type imageRef struct {
	// path is projects/<p>/global/images/[family/]<name>.
	path    string
	project string
}

// parseImage reads projects/<p>/global/images/<name> or
// projects/<p>/global/images/family/<family>, or the same as a URL.
func parseImage(s string) (imageRef, error) {
	s = trimURL(s)
	parts := strings.Split(s, "/")
	ok := len(parts) >= 5 && parts[0] == "projects" && projectID.MatchString(parts[1]) && parts[2] == "global" && parts[3] == "images"
	switch {
	case ok && len(parts) == 5 && gceName.MatchString(parts[4]):
	case ok && len(parts) == 6 && parts[4] == "family" && gceName.MatchString(parts[5]):
	default:
		return imageRef{}, fmt.Errorf("must be projects/<project>/global/images/<name> or projects/<project>/global/images/family/<family>")
	}
	return imageRef{path: s, project: parts[1]}, nil
}
