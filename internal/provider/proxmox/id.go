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

var idRE = regexp.MustCompile(`^vms/([1-9][0-9]{2,8})/(.+)$`)

func parseID(id string) (int, string, error) {
	m := idRE.FindStringSubmatch(id)
	if m == nil || strings.Contains(m[2], "/") {
		return 0, "", provider.Errorf(provider.ErrPermanent, "malformed proxmox ID %q (want vms/<vmid>/<name>)", id)
	}
	n, _ := strconv.Atoi(m[1])
	return n, m[2], nil
}

// vmidFor is the VMID probe sequence: a hash of the UID into the range,
// then forward.
func (p *Provider) vmidFor(uid string, attempt int) int {
	h := sha256.Sum256([]byte(uid))
	span := uint64(p.cfg.VMIDMax - p.cfg.VMIDMin + 1)
	return p.cfg.VMIDMin + int((binary.BigEndian.Uint64(h[:8])+uint64(attempt))%span)
}

func seedName(name string) string { return name + "-seed.iso" }
