package proxmox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// owned: our name and this installation's mark (tags, else the
// description).
func (p *Provider) owned(ctx context.Context, r resource, name string) (bool, error) {
	if r.Name != name {
		return false, nil
	}
	if m := p.marksFromTags(r.Tags); m.Managed {
		return m.Installation == p.opts.InstallationID, nil
	}
	cfg, err := p.api.config(ctx, r.Node, r.VMID)
	if err != nil {
		return false, err
	}
	d, _ := cfg["description"].(string)
	m := marksFromDescription(d)
	return m.Managed && m.Installation == p.opts.InstallationID, nil
}

// createdFromTags reads the poc-<unix seconds> tag: /cluster/resources has
// no creation time, and ListByTag must not read configs.
func createdFromTags(tags string) time.Time {
	for _, t := range splitTags(tags) {
		if v, ok := strings.CutPrefix(t, "poc-"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.Unix(n, 0)
			}
		}
	}
	return time.Time{}
}

const tagManaged = "proxy-operator"

// installTag is the installation's tag: a hash, since PVE tags allow only
// [a-z0-9_+.-].
func installTag(inst string) string {
	h := sha256.Sum256([]byte(inst))
	return "poi-" + hex.EncodeToString(h[:6])
}

func uidTag(uid string) string { return "pou-" + strings.ToLower(uid) }

// tagReporter marks a VM whose seed installs the serving reporter
// (servingreport), written with the config that attaches that seed: Get
// reads the report only where the tag says one is written, so a VM made
// before the reporter existed keeps reporting no serving signal (Ready on
// its state and address) instead of "not reported yet" for ever.
const tagReporter = "pos-1"

// tags is the VM's tag set; reporter adds tagReporter.
func (p *Provider) tags(uid string, created time.Time, reporter bool) string {
	t := []string{tagManaged, installTag(p.opts.InstallationID), uidTag(uid), fmt.Sprintf("poc-%d", created.Unix())}
	if reporter {
		t = append(t, tagReporter)
	}
	return strings.Join(t, ";")
}

func splitTags(tags string) []string {
	return strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

func hasTag(tags, tag string) bool {
	for _, t := range splitTags(tags) {
		if t == tag {
			return true
		}
	}
	return false
}

// marksFromTags reads the mark from /cluster/resources' tags (";" or ","
// separated). Installation is the hashed tag compared with ours.
func (p *Provider) marksFromTags(tags string) provider.Marks {
	var m provider.Marks
	for _, t := range splitTags(tags) {
		switch {
		case t == tagManaged:
			m.Managed = true
		case t == installTag(p.opts.InstallationID):
			m.Installation = p.opts.InstallationID
		case strings.HasPrefix(t, "poi-"):
			m.Installation = t
		case strings.HasPrefix(t, "pou-"):
			m.UID = strings.TrimPrefix(t, "pou-")
		}
	}
	return m
}

func (p *Provider) description(uid string) string {
	return fmt.Sprintf("%s=%s\n%s=%s\n%s=%s\n", provider.MarkManaged, provider.MarkManagedValue,
		provider.MarkUID, uid, provider.MarkInstallation, p.opts.InstallationID)
}

func marksFromDescription(d string) provider.Marks {
	kv := map[string]string{}
	for _, l := range strings.Split(d, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			kv[k] = v
		}
	}
	return provider.MarksFromLabels(kv)
}
