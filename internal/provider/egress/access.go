package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The access log: one line per request, the same fields from both
// enforcements (the generated Squid configuration's logformat, the local
// provider's V(1) line), documented in docs/operations.md ("Access log").
// No field holds a URL path, a query string, a header or a password.
var AccessLogFields = []string{
	"time", "client", "user", "method", "host", "port", "status",
	"bytes_in", "bytes_out", "duration_ms", "decision", "rule",
}

// What decided a request, the access log's decision and rule: Squid's
// configuration annotates each http_access line with them, the local
// provider logs them; both from these names.
const (
	DecisionAllowed = "allowed"
	DecisionRefused = "refused"

	// RuleEntry allowed a request of a Proxy without destination rules:
	// the entry's policy alone decided.
	RuleEntry = "entry"
	// Refusals, in the order both proxies check.
	RuleClientRanges = "client-ranges" // the source is outside allowedSourceRanges
	RuleClientAuth   = "client-auth"   // no or wrong credentials (407)
	RuleScheme       = "scheme"        // a plain request for a scheme other than http(s)
	RulePort         = "port"          // a port the request's form may not reach
	RuleManager      = "manager"       // Squid's cache manager (Squid only)
	RuleUnresolved   = "unresolved"    // the name has no address
	RuleAddress      = "address"       // an address in the refused set
	RuleDestinations = "destinations"  // no rule of spec.destinations matches
)

// NoValue is what the log writes for a field it has no value for, as
// Squid does.
const NoValue = "-"

// RuleName names rule i (0-based) of spec.destinations, the rule
// that allowed a request.
func RuleName(i int) string { return fmt.Sprintf("destinations[%d]", i) }

// Rule is the access log's rule for a refusal of class c.
func (c RefusalClass) Rule() string {
	switch c {
	case RefusedPort:
		return RulePort
	case RefusedScheme:
		return RuleScheme
	case RefusedAddress:
		return RuleAddress
	case RefusedUnresolved:
		return RuleUnresolved
	case RefusedByRules:
		return RuleDestinations
	}
	return NoValue
}

// AccessEntry is one line of the access log.
type AccessEntry struct {
	Time     time.Time
	Client   string
	User     string // as the client sent it, checked or not; "" for none
	Method   string
	Host     string
	Port     uint16 // 0 for none
	Status   int
	BytesIn  int64 // from the client
	BytesOut int64 // to the client
	Duration time.Duration
	Decision string
	Rule     string
}

// KeysAndValues is the entry as a logr line's key/value pairs, in
// AccessLogFields order, each value as Squid's logformat writes it: text
// fields percent-encoded (LogEscape), "-" where there is none.
func (e AccessEntry) KeysAndValues() []any {
	port := NoValue
	if e.Port != 0 {
		port = strconv.Itoa(int(e.Port))
	}
	text := func(s string) string {
		if s == "" {
			return NoValue
		}
		return LogEscape(s)
	}
	return []any{
		"time", e.Time.UTC().Format("2006-01-02T15:04:05.000Z"),
		"client", text(e.Client),
		"user", text(e.User),
		"method", text(e.Method),
		"host", text(LogHost(e.Host)),
		"port", port,
		"status", e.Status,
		"bytes_in", e.BytesIn,
		"bytes_out", e.BytesOut,
		"duration_ms", e.Duration.Milliseconds(),
		"decision", orNoValue(e.Decision),
		"rule", orNoValue(e.Rule),
	}
}

func orNoValue(s string) string {
	if s == "" {
		return NoValue
	}
	return s
}

// logUnsafe are the characters RFC 1738 calls unsafe, which Squid's "#"
// logformat encoding escapes besides controls and non-ASCII bytes.
const logUnsafe = "<>\"#%{}|\\^~[]`' "

// LogEscape is Squid's "#" logformat encoding (rfc1738_escape): control
// characters, bytes outside ASCII and RFC 1738's unsafe characters as %XX,
// so a user name or host a client chose cannot break a JSON line or forge
// another.
func LogEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || strings.IndexByte(logUnsafe, c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Verdict is Decide's answer as the access log writes it: the decision
// and the rule that decided.
func (p *Policy) Verdict(d Destination) (decision, rule string) {
	err := p.CheckRequest(d.Connect, d.Scheme, d.Port)
	if err == nil {
		rule, err = p.AllowedBy(d.Host, d.Addrs, d.Port)
	}
	var r *Refusal
	if errors.As(err, &r) {
		return DecisionRefused, r.Class.Rule()
	}
	return DecisionAllowed, rule
}

// LogHost is a request's host as Squid keeps it, and so logs it: a name
// lower-cased without its trailing dot; an IPv4-mapped address as its IPv4
// address; another IPv6 literal in brackets, an IPv4-compatible one
// (::a.b.c.d) in the dotted form inet_ntop gives it.
func LogHost(host string) string {
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	switch {
	case err != nil:
		return strings.TrimSuffix(strings.ToLower(host), ".")
	case a.Unmap().Is4():
		return a.Unmap().String()
	}
	b := a.WithZone("").As16()
	if b == [16]byte{} || [12]byte(b[:12]) != [12]byte{} || (b[12] == 0 && b[13] == 0) {
		return "[" + a.WithZone("").String() + "]"
	}
	return "[::" + netip.AddrFrom4([4]byte(b[12:])).String() + "]"
}
