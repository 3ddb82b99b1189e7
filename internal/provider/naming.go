package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// MaxInstanceNameLen is the longest name every backend accepts: GCE
// instance names, Kubernetes Service names and Proxmox VM names are all
// DNS-1035 labels of at most 63 characters.
const MaxInstanceNameLen = 63

// InstanceNamePrefix starts every instance name: DNS-1035 wants a leading
// letter, and a fixed prefix lets a human tell our instances apart.
const InstanceNamePrefix = "proxy-"

const nameHashLen = 10

// InstanceName derives the backend instance name of a Proxy: the prefix, its
// namespace and name (sanitised and shortened), then a hash of its UID and of
// the shape (whatever in the spec shapes the instance). The same Proxy with
// the same shape always gets the same name, so a crash between Create and the
// status write adopts instead of duplicating; a new shape gets a new name, so
// a replacement can come up before the old instance is gone.
func InstanceName(namespace, name, uid, shape string) string {
	sum := sha256.Sum256([]byte(uid + "\x00" + shape))
	hash := hex.EncodeToString(sum[:])[:nameHashLen]
	room := MaxInstanceNameLen - len(InstanceNamePrefix) - 1 - nameHashLen
	body := SanitizeName(namespace) + "-" + SanitizeName(name)
	if len(body) > room {
		body = strings.TrimRight(body[:room], "-")
	}
	return InstanceNamePrefix + body + "-" + hash
}

// SanitizeName lowercases s and turns every character outside [a-z0-9]
// into '-', collapsing runs, so dots in Kubernetes names cannot reach a
// backend that refuses them: the readable part of every name derived from
// a Kubernetes namespace and name (instances, reserved addresses, a
// group's front).
func SanitizeName(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}

// InstanceMAC is the MAC a VM provider gives an instance's NIC: derived
// from the instance name, so a resumed create writes the same one and a
// static address's network-config can name it before the VM exists, in
// QEMU's locally administered range 52:54:00, lower case.
func InstanceMAC(name string) string {
	sum := sha256.Sum256([]byte(name))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", sum[0], sum[1], sum[2])
}
