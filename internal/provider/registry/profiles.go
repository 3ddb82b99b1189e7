package registry

import (
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/local"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox"
)

// Profiles returns the profile of every provider type DefaultTypes ships,
// in the order docs/providers.md shows them (the embedded default, the
// cluster, the cloud, the hypervisors). TestProfilesMatchCode checks that
// they cover DefaultTypes exactly and agree with the code.
func Profiles() []provider.Profile {
	return []provider.Profile{
		local.Profile(),
		kubernetes.Profile(),
		gcp.Profile(),
		libvirt.Profile(),
		proxmox.Profile(),
	}
}
