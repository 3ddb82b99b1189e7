package proxmox

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func formatID(vmid int, name string) string { return fmt.Sprintf("vms/%d/%s", vmid, name) }

// idRE: the name is a VM name as PVE's dns-name format allows it, so a
// mangled ID (a NUL, a newline, a path) is refused before any request; a
// VM mid-clone has no name to compare with (get reads it as locked).
var idRE = regexp.MustCompile(`^vms/([1-9][0-9]{2,8})/((?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?\.)*[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)$`)

func parseID(id string) (int, string, error) {
	m := idRE.FindStringSubmatch(id)
	if m == nil || strings.Contains(m[2], "/") {
		return 0, "", provider.Errorf(provider.ErrPermanent, "malformed proxmox ID %q (want vms/<vmid>/<name>)", id)
	}
	n, _ := strconv.Atoi(m[1])
	return n, m[2], nil
}

// maxProbes is how many VMIDs a create tries before ErrQuotaExceeded.
const maxProbes = 64

// vmidFor is the VMID probe sequence: a hash of the UID into the range,
// then forward.
func (p *Provider) vmidFor(uid string, attempt int) int {
	h := sha256.Sum256([]byte(uid))
	span := uint64(p.cfg.VMIDMax - p.cfg.VMIDMin + 1)
	return p.cfg.VMIDMin + int((binary.BigEndian.Uint64(h[:8])+uint64(attempt))%span)
}

// Seed ISOs are volumes without metadata, so their name is their mark:
//
//	<instance>_<installation tag>_<uid>_seed.iso
//
// '_' is in none of the parts (instance names are DNS labels, the tag and
// UIDs hex and '-'), so a name splits back; PVE's iso volume names allow
// [A-Za-z0-9._-], and the upload keeps the name as given.
const (
	seedSep    = "_"
	seedSuffix = "seed.iso"
	// kindSeed is the collector's Kind for seed ISOs.
	kindSeed = "seed-iso"
)

// seedTag is the installation's short digest in seed names (the same as
// the poi- tag's).
func seedTag(installation string) string { return strings.TrimPrefix(installTag(installation), "poi-") }

// seedPrefix starts the name of every seed of instance name made by
// installation, whatever its UID.
func seedPrefix(name, installation string) string {
	return name + seedSep + seedTag(installation) + seedSep
}

func seedName(name, installation, uid string) string {
	return seedPrefix(name, installation) + strings.ToLower(uid) + seedSep + seedSuffix
}

// seedVolume is what a seed ISO's file name says.
type seedVolume struct {
	Instance string
	Tag      string
	UID      string
}

// parseSeedName splits a seed's file name (without "iso/"); ok is false
// for any other file.
func parseSeedName(file string) (seedVolume, bool) {
	parts := strings.Split(file, seedSep)
	if len(parts) != 4 || parts[3] != seedSuffix || parts[0] == "" || len(parts[1]) != len(seedTag("")) || parts[2] == "" {
		return seedVolume{}, false
	}
	return seedVolume{Instance: parts[0], Tag: parts[1], UID: parts[2]}, true
}
