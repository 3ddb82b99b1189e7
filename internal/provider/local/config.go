package local

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// DefaultBindCIDR is the range instances take their addresses from when the
// config names none: 255 usable addresses, away from 127.0.0.1.
const DefaultBindCIDR = "127.0.100.0/24"

// minUsable is the smallest range worth configuring: one address would make
// every replacement wait for its predecessor to go.
const minUsable = 2

var (
	loopbackNet = netip.MustParsePrefix("127.0.0.0/8")
	// localhost is left to whatever else runs on the host.
	localhost = netip.MustParseAddr("127.0.0.1")
	// loopbackBroadcast binds, but nothing can connect to it.
	loopbackBroadcast = netip.MustParseAddr("127.255.255.255")
)

// Config is the `local` block of a providers config entry.
type Config struct {
	// BindCIDR is the IPv4 range inside 127.0.0.0/8 that instances take
	// their addresses from, one address per instance.
	BindCIDR string `json:"bindCIDR,omitempty"`
	// Settings are the destination policy's keys, allowedDestinations and
	// connectPorts, beside bindCIDR. An origin on this host (loopback) is
	// refused unless allowedDestinations lists its address.
	egress.Settings
}

// Default fills in what the config left out.
func (c *Config) Default() {
	if c.BindCIDR == "" {
		c.BindCIDR = DefaultBindCIDR
	}
}

// Validate checks a defaulted config; every error names its field under path.
func (c *Config) Validate(path *field.Path) field.ErrorList {
	return append(c.validateBindCIDR(path), c.Settings.Validate(path)...)
}

func (c *Config) validateBindCIDR(path *field.Path) field.ErrorList {
	p := path.Child("bindCIDR")
	if c.BindCIDR == "" {
		return field.ErrorList{field.Required(p, "an IPv4 CIDR inside 127.0.0.0/8, such as "+DefaultBindCIDR)}
	}
	prefix, err := netip.ParsePrefix(c.BindCIDR)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, c.BindCIDR, "must be an IPv4 CIDR such as "+DefaultBindCIDR)}
	case !prefix.Addr().Is4():
		return field.ErrorList{field.Invalid(p, c.BindCIDR, "must be an IPv4 CIDR; instances listen on IPv4 loopback addresses")}
	case prefix.Masked() != prefix:
		return field.ErrorList{field.Invalid(p, c.BindCIDR, fmt.Sprintf("has host bits set; did you mean %s?", prefix.Masked()))}
	case prefix.Bits() < loopbackNet.Bits() || !loopbackNet.Contains(prefix.Addr()):
		return field.ErrorList{field.Invalid(p, c.BindCIDR, "must lie wholly inside 127.0.0.0/8 (the loopback range)")}
	}
	if n := usableAddresses(prefix); n < minUsable {
		return field.ErrorList{field.Invalid(p, c.BindCIDR, fmt.Sprintf(
			"holds %d usable addresses, need at least %d (the network address, 127.0.0.1 and 127.255.255.255 are not used)", n, minUsable))}
	}
	return nil
}

// Parse decodes a `local` block strictly, fills in defaults and validates it.
// Nil raw gives the default config.
func Parse(raw json.RawMessage, path *field.Path) (Config, field.ErrorList) {
	return config.Decode[Config](raw, path)
}

// reserved says whether addr is never given to an instance: the network
// address of the range, 127.0.0.1 (other software on the host listens
// there) and the loopback broadcast.
func reserved(prefix netip.Prefix, addr netip.Addr) bool {
	return addr == prefix.Addr() || addr == localhost || addr == loopbackBroadcast
}

// usableAddresses counts the addresses of an IPv4 prefix that reserved lets
// instances have.
func usableAddresses(prefix netip.Prefix) int {
	n := 1 << (32 - prefix.Bits())
	n-- // the network address
	for _, a := range []netip.Addr{localhost, loopbackBroadcast} {
		if prefix.Contains(a) && a != prefix.Addr() {
			n--
		}
	}
	return n
}
