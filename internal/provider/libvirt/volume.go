package libvirt

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// An instance's own volumes (its secondary resources) are named after it,
// this installation and its Proxy: storage volumes carry no metadata, so the
// name is the only mark they can have, and ListSecondary and Delete find
// them by it:
//
//	<instance>_<installation tag>_<uid>_disk.qcow2   the overlay
//	<instance>_<installation tag>_<uid>_seed.iso     the NoCloud seed
//
// '_' appears in none of the parts (instance names are DNS labels, the tag
// is hex, UIDs are hex and '-'), so a name splits back unambiguously.
const (
	volumeSep     = "_"
	diskSuffix    = "disk.qcow2"
	seedSuffix    = "seed.iso"
	installTagLen = 10
)

// Secondary kinds, as the collector's metrics name them.
const (
	kindOverlay = "overlay"
	kindSeed    = "seed-iso"
)

// installationTag is a short digest of the installation ID, which may be
// long and hold characters volume names should not.
func installationTag(installation string) string {
	sum := sha256.Sum256([]byte(installation))
	return hex.EncodeToString(sum[:])[:installTagLen]
}

// volumePrefix starts the names of every volume of instance name made by
// this installation.
func volumePrefix(name, installation string) string {
	return name + volumeSep + installationTag(installation) + volumeSep
}

func overlayName(name, installation, uid string) string {
	return volumePrefix(name, installation) + uid + volumeSep + diskSuffix
}

func seedName(name, installation, uid string) string {
	return volumePrefix(name, installation) + uid + volumeSep + seedSuffix
}

// instanceVolume is what a volume name says, when it is one of ours.
type instanceVolume struct {
	Instance string
	Tag      string
	UID      string
	Kind     string
}

// parseVolumeName splits an instance volume's name; ok is false for any
// other volume (the image cache's, somebody else's).
func parseVolumeName(vol string) (v instanceVolume, ok bool) {
	parts := strings.Split(vol, volumeSep)
	if len(parts) != 4 || parts[0] == "" || len(parts[1]) != installTagLen || parts[2] == "" {
		return instanceVolume{}, false
	}
	v = instanceVolume{Instance: parts[0], Tag: parts[1], UID: parts[2]}
	switch parts[3] {
	case diskSuffix:
		v.Kind = kindOverlay
	case seedSuffix:
		v.Kind = kindSeed
	default:
		return instanceVolume{}, false
	}
	return v, true
}
