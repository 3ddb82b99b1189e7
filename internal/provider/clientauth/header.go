package clientauth

import (
	"encoding/base64"
	"strings"
)

// Realm is the realm both proxies name in their challenge.
const Realm = "egress-proxy"

// Challenge is the Proxy-Authenticate value of a 407; Squid's config sets
// the same realm (auth_param basic realm, from Realm).
const Challenge = `Basic realm="` + Realm + `"`

// ParseProxyAuthorization reads a Proxy-Authorization value of the form
// "Basic base64(user:password)", the scheme in any case. Like Squid it
// splits at the first ':' and refuses credentials without a password, with
// an empty one, or with CR or LF; it also refuses an empty user and a NUL,
// which Squid would cut the credentials short at.
func ParseProxyAuthorization(header string) (user, password string, ok bool) {
	header = strings.TrimLeft(header, " \t")
	sp := strings.IndexAny(header, " \t")
	if sp < 0 || !strings.EqualFold(header[:sp], "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Trim(header[sp:], " \t"))
	if err != nil {
		return "", "", false
	}
	user, password, found := strings.Cut(string(raw), ":")
	if !found || user == "" || password == "" || strings.ContainsAny(string(raw), "\x00\r\n") {
		return "", "", false
	}
	return user, password, true
}
