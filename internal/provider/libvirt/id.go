package libvirt

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// An instance ID is hosts/<host>/domains/<name>: the host's configured name
// and the domain name, which is the instance name.
const (
	idHosts   = "hosts"
	idDomains = "domains"
)

// formatID is the ID of the domain named name on host.
func formatID(host, name string) string {
	return idHosts + "/" + host + "/" + idDomains + "/" + name
}

// parseID splits an ID into host and domain name. Both must be DNS labels
// (host names are validated as such; instance names are DNS-1035 labels),
// so a malformed ID is Permanent and never reaches a host.
func parseID(id string) (host, name string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 4 || parts[0] != idHosts || parts[2] != idDomains ||
		len(validation.IsDNS1123Label(parts[1])) > 0 || len(validation.IsDNS1123Label(parts[3])) > 0 {
		return "", "", provider.Errorf(provider.ErrPermanent,
			"malformed instance ID %q: want %s/<host>/%s/<instance name>", id, idHosts, idDomains)
	}
	return parts[1], parts[3], nil
}
