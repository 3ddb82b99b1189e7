package gcp

import (
	"strconv"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// An instance ID is zones/<zone>/instances/<name>, the instance's path
// within the entry's project (the earlier gcp provider's form, so IDs it recorded
// still parse). The project comes from the config.
const (
	idZones     = "zones"
	idInstances = "instances"
)

// formatID is the ID of the instance named name in zone.
func formatID(zone, name string) string {
	return idZones + "/" + zone + "/" + idInstances + "/" + name
}

// parseID splits an ID into zone and instance name. Both must be GCE names
// (a zone name, a resource name), so a malformed ID is Permanent and never
// reaches the API.
func parseID(id string) (zone, name string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 4 || parts[0] != idZones || parts[2] != idInstances ||
		!zoneName.MatchString(parts[1]) || !gceName.MatchString(parts[3]) {
		return "", "", provider.Errorf(provider.ErrPermanent,
			"malformed instance ID %q: want %s/<zone>/%s/<instance name>", id, idZones, idInstances)
	}
	return parts[1], parts[3], nil
}

// A secondary resource's ID is firewalls/<rule name>/<rule's numeric id>:
// the numeric id names the exact rule listed, so a rule made again under
// the same name since is never deleted by an old verdict.
const idFirewalls = "firewalls"

func formatRuleID(name string, id uint64) string {
	return idFirewalls + "/" + name + "/" + strconv.FormatUint(id, 10)
}

func parseRuleID(id string) (name string, ruleID uint64, err error) {
	parts := strings.Split(id, "/")
	if len(parts) == 3 && parts[0] == idFirewalls && gceName.MatchString(parts[1]) {
		// Only the canonical spelling: "012" would be a second ID of rule 12.
		if n, perr := strconv.ParseUint(parts[2], 10, 64); perr == nil && n > 0 && strconv.FormatUint(n, 10) == parts[2] {
			return parts[1], n, nil
		}
	}
	return "", 0, provider.Errorf(provider.ErrPermanent,
		"malformed secondary resource ID %q: want %s/<rule name>/<rule id>", id, idFirewalls)
}

// A reserved egress address's secondary ID is
// regions/<region>/addresses/<name>/<address's numeric id>: its path, so it
// never reads as a rule's ID, and the numeric id, so an address reserved
// again under the name since is never deleted by an old verdict.
const (
	idRegions   = "regions"
	idAddresses = "addresses"
)

func formatAddressID(region, name string, id uint64) string {
	return idRegions + "/" + region + "/" + idAddresses + "/" + name + "/" + strconv.FormatUint(id, 10)
}

// isAddressID tells an address's secondary ID from a rule's.
func isAddressID(id string) bool { return strings.HasPrefix(id, idRegions+"/") }

func parseAddressID(id string) (region, name string, addrID uint64, err error) {
	parts := strings.Split(id, "/")
	if len(parts) == 5 && parts[0] == idRegions && regionName.MatchString(parts[1]) && parts[2] == idAddresses && gceName.MatchString(parts[3]) {
		if n, perr := strconv.ParseUint(parts[4], 10, 64); perr == nil && n > 0 && strconv.FormatUint(n, 10) == parts[4] {
			return parts[1], parts[3], n, nil
		}
	}
	return "", "", 0, provider.Errorf(provider.ErrPermanent,
		"malformed secondary resource ID %q: want %s/<region>/%s/<address name>/<address id>", id, idRegions, idAddresses)
}

// regionOf is the region of a zone (us-central1-a: us-central1).
func regionOf(zone string) string {
	if m := zoneName.FindStringSubmatch(zone); m != nil {
		return m[1]
	}
	return ""
}

// lastSegment is the last path segment of a URL or path.
func lastSegment(s string) string { return s[strings.LastIndex(s, "/")+1:] }
