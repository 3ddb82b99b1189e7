package fakepve

import (
	"crypto/sha1"
	"encoding/hex"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A VM config is kept as PVE's config file is: ordered "key: value" lines,
// all strings. The API renders the keys whose schema type is integer,
// boolean or number as JSON numbers (parse_vm_config runs check_type, which
// numifies them); everything else, property strings such as memory,
// agent, net0 and scsi0 included, stays a string.

func itoa(i int) string { return strconv.Itoa(i) }

func atoi(s string) int {
	i, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return i
}

func sortStrings(s []string) { sort.Strings(s) }

type vmConfig []KV

func (c vmConfig) get(k string) (string, bool) {
	for _, kv := range c {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return "", false
}

func (c vmConfig) val(k string) string { v, _ := c.get(k); return v }

func (c *vmConfig) set(k, v string) {
	for i := range *c {
		if (*c)[i].Key == k {
			(*c)[i].Value = v
			return
		}
	}
	*c = append(*c, KV{k, v})
}

func (c *vmConfig) del(k string) {
	for i := range *c {
		if (*c)[i].Key == k {
			*c = append((*c)[:i:i], (*c)[i+1:]...)
			return
		}
	}
}

func (c vmConfig) clone() vmConfig { return append(vmConfig(nil), c...) }

// digest is the SHA-1 of the config as written: sorted "key: value" lines.
func (c vmConfig) digest() string {
	lines := make([]string, 0, len(c))
	for _, kv := range c {
		lines = append(lines, kv.Key+": "+kv.Value)
	}
	sort.Strings(lines)
	sum := sha1.Sum([]byte(strings.Join(lines, "\n") + "\n"))
	return hex.EncodeToString(sum[:])
}

// numericKeys are config options of type integer or boolean.
var numericKeys = map[string]bool{
	"cores": true, "sockets": true, "vcpus": true, "balloon": true, "shares": true, "cpuunits": true,
	"onboot": true, "autostart": true, "template": true, "protection": true, "numa": true, "kvm": true,
	"acpi": true, "tablet": true, "localtime": true, "reboot": true, "freeze": true, "migrate_speed": true,
	"keephugepages": true, "cpulimit": true, "migrate_downtime": true,
}

func configValue(k, v string) any {
	if numericKeys[k] && reNumber.MatchString(v) {
		return num(strings.TrimPrefix(v, "+"))
	}
	return v
}

// ---- property strings and drives ----

var reDriveKey = regexp.MustCompile(`^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$`)
var reUnused = regexp.MustCompile(`^unused\d+$`)
var reNetKey = regexp.MustCompile(`^net\d+$`)

func isDriveKey(k string) bool { return reDriveKey.MatchString(k) || reUnused.MatchString(k) }

// drive is a parsed disk option: "local-lvm:vm-101-disk-0,iothread=1,size=20G".
type drive struct {
	file string
	opts []KV
}

func parseDrive(v string) (drive, bool) {
	var d drive
	for i, part := range strings.Split(v, ",") {
		k, val, hasEq := strings.Cut(part, "=")
		switch {
		case !hasEq && i == 0:
			d.file = part
		case hasEq && k == "file" && d.file == "":
			d.file = val
		case hasEq && k != "" && val != "":
			d.opts = append(d.opts, KV{k, val})
		default:
			return drive{}, false
		}
	}
	return d, d.file != ""
}

func (d drive) opt(k string) string {
	for _, kv := range d.opts {
		if kv.Key == k {
			return kv.Value
		}
	}
	return ""
}

func (d *drive) setOpt(k, v string) {
	for i := range d.opts {
		if d.opts[i].Key == k {
			d.opts[i].Value = v
			return
		}
	}
	d.opts = append(d.opts, KV{k, v})
}

func (d drive) String() string {
	parts := []string{d.file}
	for _, kv := range d.opts {
		parts = append(parts, kv.Key+"="+kv.Value)
	}
	return strings.Join(parts, ",")
}

func (d drive) isCDROM() bool {
	return d.opt("media") == "cdrom" || d.file == "none" || d.file == "cdrom"
}

// volid splits "storage:volname"; ok is false for paths and "none".
func splitVolid(volid string) (storage, volname string, ok bool) {
	storage, volname, ok = strings.Cut(volid, ":")
	if !ok || storage == "" || volname == "" || strings.HasPrefix(volid, "/") {
		return "", "", false
	}
	return storage, volname, true
}

var reSize = regexp.MustCompile(`^(\d+(?:\.\d+)?)([KMGT]?)$`)

// parseSize reads a size= value (bytes without unit, as PVE writes sizes).
func parseSize(s string) (int64, bool) {
	m := reSize.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "K":
		f *= 1 << 10
	case "M":
		f *= 1 << 20
	case "G":
		f *= 1 << 30
	case "T":
		f *= 1 << 40
	}
	return int64(f), true
}

// formatSize writes a size as PVE's format_size does: the largest unit that
// divides it, down to K.
func formatSize(b int64) string {
	switch {
	case b%(1<<40) == 0 && b >= 1<<40:
		return strconv.FormatInt(b>>40, 10) + "T"
	case b%(1<<30) == 0 && b >= 1<<30:
		return strconv.FormatInt(b>>30, 10) + "G"
	case b%(1<<20) == 0 && b >= 1<<20:
		return strconv.FormatInt(b>>20, 10) + "M"
	case b%(1<<10) == 0:
		return strconv.FormatInt(b>>10, 10) + "K"
	}
	return strconv.FormatInt(b, 10)
}

// memoryMiB is the config's memory (its current= part), 512 by default.
func memoryMiB(c vmConfig) int64 {
	v, ok := c.get("memory")
	if !ok {
		return 512
	}
	for _, part := range strings.Split(v, ",") {
		k, val, hasEq := strings.Cut(part, "=")
		if !hasEq {
			val = k
		} else if k != "current" {
			continue
		}
		if n, err := strconv.ParseInt(val, 10, 64); err == nil {
			return n
		}
	}
	return 512
}

func cpus(c vmConfig) int {
	if v := atoi(c.val("vcpus")); v > 0 {
		return v
	}
	s, cr := atoi(c.val("sockets")), atoi(c.val("cores"))
	if s == 0 {
		s = 1
	}
	if cr == 0 {
		cr = 1
	}
	return s * cr
}

// bootDiskSize is the size of the first disk of the boot order (or of the
// first disk at all), as vmstatus reports it in maxdisk.
func bootDiskSize(c vmConfig) int64 {
	var order []string
	if b, ok := c.get("boot"); ok {
		for _, part := range strings.Split(b, ",") {
			if k, v, _ := strings.Cut(part, "="); k == "order" {
				order = strings.Split(v, ";")
			}
		}
	}
	for _, kv := range c {
		if reDriveKey.MatchString(kv.Key) && !strings.HasPrefix(kv.Key, "efidisk") && !strings.HasPrefix(kv.Key, "tpmstate") {
			order = append(order, kv.Key)
		}
	}
	for _, k := range order {
		v, ok := c.get(k)
		if !ok {
			continue
		}
		d, ok := parseDrive(v)
		if !ok || d.isCDROM() {
			continue
		}
		n, _ := parseSize(d.opt("size"))
		return n
	}
	return 0
}

// agentEnabled is get_qga_key($conf, 'enabled'): "agent: 1" or
// "agent: enabled=1,...".
func agentEnabled(c vmConfig) bool {
	v, ok := c.get("agent")
	if !ok {
		return false
	}
	for _, part := range strings.Split(v, ",") {
		k, val, hasEq := strings.Cut(part, "=")
		if !hasEq && parseBoolean(k) == "1" {
			return true
		}
		if hasEq && k == "enabled" && parseBoolean(val) == "1" {
			return true
		}
	}
	return false
}

// macOf is net0's MAC address ("virtio=BC:24:11:2E:C5:4A,bridge=...").
func macOf(c vmConfig, key string) string {
	v, _ := c.get(key)
	for _, part := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(part, "=")
		if netModels[k] || k == "macaddr" {
			if reMAC.MatchString(val) {
				return val
			}
		}
	}
	return ""
}

// setMAC replaces (or adds) the MAC of a net value.
func setMAC(v, mac string) string {
	parts := strings.Split(v, ",")
	for i, part := range parts {
		k, _, _ := strings.Cut(part, "=")
		if netModels[k] {
			parts[i] = k + "=" + mac
			return strings.Join(parts, ",")
		}
	}
	return v
}
