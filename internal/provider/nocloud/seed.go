package nocloud

import (
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// VolumeLabel is the volume identifier NoCloud looks for (cloud-init
// matches it case-insensitively; genisoimage's -volid cidata writes the
// same lower-case label).
const VolumeLabel = "cidata"

// The file names NoCloud reads, at the root of the image.
const (
	FileMetaData      = "meta-data"
	FileUserData      = "user-data"
	FileNetworkConfig = "network-config"
	FileVendorData    = "vendor-data"
)

// Seed is what a VM provider passes for one VM's seed.
type Seed struct {
	// InstanceID is meta-data's instance-id. cloud-init runs its
	// per-instance modules again when it changes, and uses it as a
	// directory name under /var/lib/cloud/instances: letters, digits,
	// '.', '_' and '-', at most 255, not starting with '.'. A provider
	// passes a value unique to the VM it creates (its instance name, or
	// the name and the Proxy's UID).
	InstanceID string
	// LocalHostname is meta-data's local-hostname: a lower-case DNS name
	// (RFC 1123), e.g. the instance name.
	LocalHostname string
	// UserData is the user-data file, written even when empty (NoCloud
	// needs the file): the Proxy's cloud-init or the generated cloud-config.
	UserData provider.Sensitive
	// NetworkConfig is the network-config file (cloud-init network config
	// v1 or v2); none is written when empty, and cloud-init then uses its
	// default (DHCP on the first NIC).
	NetworkConfig provider.Sensitive
	// VendorData is the vendor-data file; none is written when empty. VM
	// providers whose hypervisor reads addresses through the QEMU guest
	// agent pass GuestAgentVendorData.
	VendorData provider.Sensitive
}

// File is one file of the seed.
type File struct {
	Name    string
	Content provider.Sensitive
}

// instanceIDPattern keeps instance-id a safe single path component and a
// plain YAML scalar.
var instanceIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}$`)

type metaData struct {
	InstanceID    string `json:"instance-id"`
	LocalHostname string `json:"local-hostname"`
}

// MetaData renders NoCloud's meta-data: a YAML map of instance-id and
// local-hostname, values quoted where YAML would read them as anything but
// a string. Invalid values are ErrPermanent: the same request cannot
// succeed.
func MetaData(instanceID, localHostname string) ([]byte, error) {
	if !instanceIDPattern.MatchString(instanceID) {
		return nil, provider.Errorf(provider.ErrPermanent,
			"nocloud meta-data: instance-id %q must be 1 to 255 letters, digits, '.', '_' or '-', not starting with '.'", instanceID)
	}
	if errs := validation.IsDNS1123Subdomain(localHostname); len(errs) > 0 {
		return nil, provider.Errorf(provider.ErrPermanent,
			"nocloud meta-data: local-hostname %q is not a lower-case DNS name: %s", localHostname, strings.Join(errs, "; "))
	}
	for _, label := range strings.Split(localHostname, ".") {
		if errs := validation.IsDNS1123Label(label); len(errs) > 0 {
			return nil, provider.Errorf(provider.ErrPermanent,
				"nocloud meta-data: local-hostname %q: label %q: %s", localHostname, label, strings.Join(errs, "; "))
		}
	}
	return yaml.Marshal(metaData{InstanceID: instanceID, LocalHostname: localHostname})
}

// Files returns the seed's files in the order they are written: meta-data,
// user-data, then network-config and vendor-data when given.
func (s Seed) Files() ([]File, error) {
	meta, err := MetaData(s.InstanceID, s.LocalHostname)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Name: FileMetaData, Content: provider.Sensitive(meta)},
		{Name: FileUserData, Content: s.UserData},
	}
	if s.NetworkConfig != "" {
		files = append(files, File{Name: FileNetworkConfig, Content: s.NetworkConfig})
	}
	if s.VendorData != "" {
		files = append(files, File{Name: FileVendorData, Content: s.VendorData})
	}
	return files, nil
}
