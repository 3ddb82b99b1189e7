package kubernetes

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// DefaultImage is the Squid image Pods run when the entry names none. The
// Pod runs `squid` from PATH with its own config file, so any image with
// Squid 5 or later on PATH and a non-root user works.
const DefaultImage = "docker.io/ubuntu/squid:6.10-24.10_beta"

// DefaultRunAsUser is the UID Squid runs as: "proxy" in Debian and Ubuntu
// images. Pod Security "restricted" needs a non-root UID, and a numeric one
// lets the kubelet verify it without reading the image.
const DefaultRunAsUser int64 = 13

// Default resources: enough for a small egress proxy with a memory-only
// cache (cache_mem in the generated config is a fraction of this).
const (
	DefaultCPU    = "100m"
	DefaultMemory = "256Mi"
)

// Service types an entry may choose (serviceType).
const (
	// ServiceHeadless gives each instance a headless Service (clusterIP:
	// None): the DNS name <instance>.<namespace>.svc resolves to the Pod
	// IP, with no virtual IP to allocate from the cluster's Service range,
	// no kube-proxy rules per proxy on every node, and no kube-proxy SNAT
	// hiding the client's source address from Squid's allowedSourceRanges.
	// The default: the endpoint the operator reports is the Pod anyway.
	ServiceHeadless = "Headless"
	// ServiceClusterIP gives each instance a ClusterIP Service: a virtual
	// IP that survives the Pod's replacement, for clients that pin an IP.
	// Each one takes an address from the Service range.
	ServiceClusterIP = "ClusterIP"
)

// Config is the `kubernetes` block of a providers config entry.
type Config struct {
	// Namespace runs every instance in this namespace. Empty: each instance
	// runs in its Proxy's namespace, which is also the only case where the
	// objects get an OwnerReference to the Proxy (Kubernetes refuses
	// cross-namespace owners).
	Namespace string `json:"namespace,omitempty"`
	// Image is the Squid image.
	Image string `json:"image,omitempty"`
	// RunAsUser is the non-root UID Squid runs as.
	RunAsUser *int64 `json:"runAsUser,omitempty"`
	// Resources are the Pod's CPU and memory when the Proxy names no
	// machine type; requests and limits are equal (Guaranteed QoS, and a
	// ResourceQuota on limits accepts the Pod).
	Resources MachineType `json:"resources,omitempty"`
	// MachineTypes is the catalogue placement.machineType picks from.
	MachineTypes map[string]MachineType `json:"machineTypes,omitempty"`
	// ClientQPS and ClientBurst are a client-side rate limit for the
	// provider's own API client (docs/operations.md, "Client rate
	// limits"): sustained requests per second, and the burst above it.
	// Unset (the default), the client has none, as the manager's.
	ClientQPS   float32 `json:"clientQPS,omitempty"`
	ClientBurst int     `json:"clientBurst,omitempty"`
	// ServiceType is ServiceHeadless (the default) or ServiceClusterIP.
	ServiceType string `json:"serviceType,omitempty"`
	// ClusterCIDRs are the cluster's Service and Pod ranges. The proxies
	// deny them as destinations like the private ranges (which usually hold
	// them already), so a cluster on other addresses is covered too.
	ClusterCIDRs []string `json:"clusterCIDRs,omitempty"`
	// PodLabels and PodAnnotations are added to every proxy Pod of the
	// entry (not to its Service, ConfigMap, NetworkPolicy or Secret), so
	// a CNI egress gateway policy can select the proxies. They can never
	// hold a key the provider sets itself (reservedPodLabels,
	// reservedPodAnnotations). Like image, they are read when a Pod is
	// made: a change reaches new Pods, not running ones.
	PodLabels      map[string]string `json:"podLabels,omitempty"`
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`
	// Settings are the destination policy's keys, allowedDestinations and
	// connectPorts, beside the type's own.
	egress.Settings
}

// MachineType is a CPU and memory size.
type MachineType struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// Default fills in what the config left out.
func (c *Config) Default() {
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.RunAsUser == nil {
		u := DefaultRunAsUser
		c.RunAsUser = &u
	}
	if c.Resources.CPU == "" {
		c.Resources.CPU = DefaultCPU
	}
	if c.Resources.Memory == "" {
		c.Resources.Memory = DefaultMemory
	}
	if c.ServiceType == "" {
		c.ServiceType = ServiceHeadless
	}
	if c.ClientQPS > 0 && c.ClientBurst == 0 {
		c.ClientBurst = DefaultClientBurst
	}
	// PodLabels and PodAnnotations have no default: without them the Pod
	// carries the provider's own labels and annotation only.
}

// Validate checks a defaulted config; every error names its field under path.
func (c *Config) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(c.Namespace) {
			errs = append(errs, field.Invalid(path.Child("namespace"), c.Namespace, msg))
		}
	}
	if c.Image == "" {
		errs = append(errs, field.Required(path.Child("image"), "a Squid image reference"))
	}
	if c.RunAsUser == nil || *c.RunAsUser <= 0 {
		errs = append(errs, field.Invalid(path.Child("runAsUser"), c.RunAsUser,
			"must be a UID above 0: Pod Security \"restricted\" forbids root"))
	}
	if c.ServiceType != ServiceHeadless && c.ServiceType != ServiceClusterIP {
		errs = append(errs, field.NotSupported(path.Child("serviceType"), c.ServiceType, []string{ServiceHeadless, ServiceClusterIP}))
	}
	errs = append(errs, c.Resources.validate(path.Child("resources"), true)...)
	if c.ClientQPS < 0 {
		errs = append(errs, field.Invalid(path.Child("clientQPS"), c.ClientQPS, "must not be negative: leave it out for no client-side limit"))
	}
	switch {
	case c.ClientBurst < 0 || c.ClientQPS > 0 && c.ClientBurst < 1:
		errs = append(errs, field.Invalid(path.Child("clientBurst"), c.ClientBurst, "must be at least 1"))
	case c.ClientQPS == 0 && c.ClientBurst > 0:
		errs = append(errs, field.Invalid(path.Child("clientBurst"), c.ClientBurst, "is the burst of a limit: set clientQPS too, or leave both out for no client-side limit"))
	}
	_, rangeErrs := egress.ParseRanges(c.ClusterCIDRs, path.Child("clusterCIDRs"))
	errs = append(errs, rangeErrs...)
	errs = append(errs, c.Settings.Validate(path)...)
	errs = append(errs, validatePodLabels(c.PodLabels, path.Child("podLabels"))...)
	errs = append(errs, validatePodAnnotations(c.PodAnnotations, path.Child("podAnnotations"))...)
	names := make([]string, 0, len(c.MachineTypes))
	for n := range c.MachineTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := path.Child("machineTypes").Key(n)
		if n == "" {
			errs = append(errs, field.Invalid(p, n, "a machine type needs a name"))
		}
		errs = append(errs, c.MachineTypes[n].validate(p, true)...)
	}
	return errs
}

// reservedPodLabels are the label keys the provider sets on a Pod, each
// with why an entry may not set it. Every key meta gives an object is here
// (TestReservedKeysCoverMeta), so a new one cannot be forgotten.
var reservedPodLabels = map[string]string{
	labelInstance: "the provider sets it to the instance name, and with " + provider.MarkManaged +
		" it is what the instance's Service and NetworkPolicy select: a value of the entry's would change which Pods they select",
	provider.MarkManaged: "the operator's managed mark, which the instance's Service and NetworkPolicy select and " +
		"adoption, listing and garbage collection read",
	provider.MarkUID:          "the operator's mark naming the owning Proxy, which adoption and the Proxy's deletion read",
	provider.MarkInstallation: "the operator's mark naming the installation, which listing and garbage collection select",
	labelName:                 "the provider sets it to " + labelNameValue + " on every object of an instance",
	labelManagedBy:            "the provider sets it to " + managedByValue + " on every object of an instance",
	labelGroupUID: "the provider sets it to the ProxyGroup's UID on the group's member Pods, and it is what the group's " +
		"Service, PodDisruptionBudget and the members' anti-affinity select: a value of the entry's would add Pods to a group or take them out",
}

// reservedPodAnnotations are the annotation keys the provider sets on a Pod.
var reservedPodAnnotations = map[string]string{
	annotationProxy: "the provider sets it to the Proxy the Pod serves (<namespace>/<name>)",
}

// Prefixes kept for the operator's own keys, present and future: the
// marks are proxy-operator-*, the operator's annotations live under its
// domain.
var reservedKeyPrefixes = []string{"proxy-operator-", operatorDomain + "/"}

const operatorDomain = "egress.proxy-operator.dev"

// reservedKey says why key is not the entry's to set, or "" when it is.
// Compared in lower case: the API server takes annotation keys in any case.
func reservedKey(key string, reserved map[string]string) string {
	key = strings.ToLower(key)
	if why, ok := reserved[key]; ok {
		return why
	}
	for _, pfx := range reservedKeyPrefixes {
		if strings.HasPrefix(key, pfx) {
			return fmt.Sprintf("keys starting with %q are kept for the operator's own marks and annotations", pfx)
		}
	}
	return ""
}

// podAnnotationRoom is what the entry's annotations may take of the API
// server's limit on a Pod's annotations: the provider's own annotation
// (its key and a value of up to a namespace, a slash and a Proxy name)
// is added to them.
const podAnnotationRoom = apivalidation.TotalAnnotationSizeLimitB -
	(len(annotationProxy) + validation.DNS1123LabelMaxLength + 1 + validation.DNS1123SubdomainMaxLength)

// validatePodLabels checks podLabels as the API server checks a Pod's
// labels (metav1validation.ValidateLabels), naming each key in the path.
func validatePodLabels(labels map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range sortedKeys(labels) {
		p := path.Key(k)
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p, k, "the key: "+msg))
		}
		for _, msg := range validation.IsValidLabelValue(labels[k]) {
			errs = append(errs, field.Invalid(p, labels[k], msg))
		}
		if why := reservedKey(k, reservedPodLabels); why != "" {
			errs = append(errs, field.Forbidden(p, "reserved: "+why))
		}
	}
	return errs
}

// validatePodAnnotations checks podAnnotations as the API server checks a
// Pod's annotations (apivalidation.ValidateAnnotations: qualified-name
// keys in any case, a total size), naming each key in the path.
func validatePodAnnotations(annotations map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	size := 0
	for _, k := range sortedKeys(annotations) {
		p := path.Key(k)
		size += len(k) + len(annotations[k])
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(p, k, "the key: "+msg))
		}
		if why := reservedKey(k, reservedPodAnnotations); why != "" {
			errs = append(errs, field.Forbidden(p, "reserved: "+why))
		}
	}
	if size > podAnnotationRoom {
		errs = append(errs, field.TooLong(path, fmt.Sprintf("%d bytes of keys and values", size), podAnnotationRoom))
	}
	return errs
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (m MachineType) validate(path *field.Path, required bool) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct{ name, value, example string }{
		{"cpu", m.CPU, "250m"}, {"memory", m.Memory, "256Mi"},
	} {
		p := path.Child(f.name)
		if f.value == "" {
			if required {
				errs = append(errs, field.Required(p, "a Kubernetes quantity such as "+f.example))
			}
			continue
		}
		q, err := resource.ParseQuantity(f.value)
		if err != nil {
			errs = append(errs, field.Invalid(p, f.value, "must be a Kubernetes quantity such as "+f.example))
		} else if q.Sign() <= 0 {
			errs = append(errs, field.Invalid(p, f.value, "must be above zero"))
		}
	}
	return errs
}

// destinations is the policy of a validated config: the defaults, the
// cluster's ranges denied too, the entry's exceptions.
func (c *Config) destinations() *egress.Policy {
	prefixes, _ := egress.ParseRanges(c.ClusterCIDRs, nil)
	extra := make([]egress.Range, 0, len(prefixes))
	for _, pfx := range prefixes {
		extra = append(extra, egress.Range{Prefix: pfx, Why: "the cluster's Service or Pod range (clusterCIDRs)"})
	}
	return c.Settings.Policy(extra...)
}

// Parse decodes a `kubernetes` block strictly, fills in defaults and
// validates it. Nil raw gives the default config.
func Parse(raw json.RawMessage, path *field.Path) (Config, field.ErrorList) {
	return config.Decode[Config](raw, path)
}
