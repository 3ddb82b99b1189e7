package egress

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Echo is an entry's egress-IP echo (egressIPEcho): a plain-HTTP URL that
// answers a GET with the caller's address as text, as checkip-style
// services do. An instance asks it through its own proxy, so the answer is
// the address destinations see (docs/api.md, status.egressIP).
//
// Only the instance itself, or the operator with the instance's token, may
// ask it past the policy (the generated Squid admits 127.0.0.1, or a
// request carrying the token a Pod's Secret holds, to exactly this URL,
// with GET): the echo usually sits at an address the policy refuses to
// clients, and must not open it to them.
type Echo struct {
	// URL is the URL as written in the providers config.
	URL string
	// Host is the URL's host: a name, or an address (Addr set).
	Host string
	Addr netip.Addr
	// Port is the URL's port, 80 when it names none.
	Port uint16
	// Path is the path and query the request asks for ("/" for none).
	Path string
}

// IsZero says the entry names no echo.
func (e Echo) IsZero() bool { return e.URL == "" }

// HostPort is the Host header's value: host[:port], brackets for IPv6.
func (e Echo) HostPort() string {
	if e.Port == 80 {
		if e.Addr.Is6() {
			return "[" + e.Host + "]"
		}
		return e.Host
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
}

// echoURLChars are the characters an echo URL may hold: the URL goes into a
// systemd unit's ExecStart, a shell script's argument and a squid.conf
// regular expression, none of which should need quoting rules of its own
// (no %, quotes, spaces, backslashes, $, ;, # or backquotes), and no @: a
// user and password have no place in it.
const echoURLChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~:/?&=+,[]"

// maxEchoURL bounds the URL: a request line, not a document.
const maxEchoURL = 200

// ParseEcho parses an egressIPEcho URL; every error names the field. ""
// is no echo.
func ParseEcho(s string, path *field.Path) (Echo, *field.Error) {
	if s == "" {
		return Echo{}, nil
	}
	bad := func(why string) (Echo, *field.Error) { return Echo{}, field.Invalid(path, s, why) }
	if len(s) > maxEchoURL {
		return bad("longer than 200 characters")
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return !strings.ContainsRune(echoURLChars, r) }); i >= 0 {
		return bad("may hold only letters, digits and -._~:/?&=+,[] (it is written into a unit file, a script and squid.conf unquoted)")
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("not a URL: " + err.Error())
	}
	switch {
	case u.Scheme != "http":
		return bad("must be an http:// URL: the guest asks it through its proxy with no TLS client (the answer is an address, nothing secret)")
	case u.Host == "" || u.Hostname() == "":
		return bad("names no host")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return bad("must not have a fragment")
	}
	e := Echo{URL: s, Host: u.Hostname(), Port: 80, Path: u.RequestURI()}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return bad("port must be 1-65535")
		}
		e.Port = uint16(n)
	}
	if a, err := netip.ParseAddr(e.Host); err == nil {
		if a.Zone() != "" {
			return bad("an IPv6 address with a zone cannot be reached through a proxy")
		}
		e.Addr = a.Unmap()
	} else if strings.ContainsAny(e.Host, ":[]") {
		return bad("host is neither a name nor an address")
	}
	return e, nil
}
