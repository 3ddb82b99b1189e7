// Package squid generates squid.conf for the providers that run Squid (the
// kubernetes provider's Pods, and VMs through the cloud-config CloudConfig
// builds), so the access rules live in one place. The destination rules
// are rendered from the shared egress.Policy, the one the local provider
// enforces itself. A Pod and a VM get the same rules; Params says where
// they differ (paths, logs, user), never a second template.
package squid

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// Params are the inputs of a generated squid.conf.
type Params struct {
	// Generator names who generated the file, for its first line.
	Generator string
	// ListenAddr is the address Squid binds; empty means every address.
	ListenAddr string
	Port       int32
	// Clients are the admitted client ranges, already parsed; empty admits
	// loopback clients only.
	Clients []netip.Prefix
	// Destinations is what the clients may reach; nil is egress.Default().
	Destinations *egress.Policy
	// PidFile and CoredumpDir must be writable (a Pod mounts emptyDir
	// volumes there because its root filesystem is read-only; a VM uses
	// the distro's /run/squid.pid, which its squid.service expects).
	PidFile     string
	CoredumpDir string
	// AccessLog (an access_log module:place) and CacheLog (a file) are
	// where Squid logs; empty means the process's stdout and stderr, for a
	// container. A VM's Squid runs under systemd, whose stdout is a socket
	// Squid cannot reopen, so it logs its access lines to syslog (the
	// journal) and its cache log into the distro's /var/log/squid.
	AccessLog string
	CacheLog  string
	// Auth, when set, makes Squid ask every admitted client for a user and
	// password (HTTP basic) that the htpasswd file at Auth.PasswordFile
	// holds; nil: clients are admitted by range alone.
	Auth *Auth
	// ServingProbe makes Squid answer the guest's serving reporter
	// (servingreport): a request from the VM's own loopback for
	// servingreport.ProbeHost is refused by Squid itself, before any
	// rule that resolves or connects, and is not logged. With an echo in
	// Destinations (egress.Policy.Echo), the reporter's GET of exactly that
	// URL from 127.0.0.1 is let through past the policy, and logged.
	ServingProbe bool
	// EchoProber, with an echo in Destinations, lets the operator ask the
	// echo through this Squid from any address: a GET of exactly that URL
	// carrying the instance's token is let through past the clients' rule,
	// clientAuth and the policy, and logged. Nil, or no echo: nothing.
	EchoProber *EchoProber
	// EffectiveUser is written as cache_effective_user when set. Squid
	// started as a non-root user stays that user, so a Pod leaves it empty;
	// so does a VM, whose packaged Squid drops to the package's user.
	EffectiveUser string
	// OutgoingAddress, when valid, is the address Squid's connections to
	// destinations of its family leave from (tcp_outgoing_address): a
	// group's virtual address, which this member may not hold at the
	// moment, so its host must allow non-local binds (vrrp.Sysctl).
	// Destinations see the group's address whichever member serves.
	OutgoingAddress netip.Addr
}

// Auth is where Squid reads the users of a Proxy's clientAuth.
type Auth struct {
	// PasswordFile is the htpasswd file (bcrypt entries, checked by
	// clientauth.Parse before it is written), readable by Squid's user.
	PasswordFile string
}

// EchoProber is where Squid reads the token of the operator's ask of the
// echo. The token is in a file (a mounted Secret), never in squid.conf,
// which a Pod gets from a ConfigMap.
type EchoProber struct {
	// TokenFile holds EchoProberTokenFile's content, readable by Squid when
	// it reads its config (at start and at every reconfigure): an
	// absolute path with no white space, quote or '#', as squid.conf
	// takes it between quotes.
	TokenFile string
}

// EchoProberHeader carries the token on the operator's ask of the echo.
// Squid removes it from every request it forwards, whoever sent it.
const EchoProberHeader = "X-Egress-Probe"

// echoProberTokenLen is a token's length: 32 random bytes in hex.
const echoProberTokenLen = 64

// NewEchoProberToken is a new instance's token: 32 random bytes, hex.
func NewEchoProberToken() (string, error) {
	b := make([]byte, echoProberTokenLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("echo prober token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// EchoProberTokenFile is the content of EchoProber.TokenFile for token:
// the one regular expression Squid's req_header ACL matches the header's
// whole value against. Only 64 lower-case hex characters are taken, so
// the token is a literal in the expression (and never a pattern that a
// shorter or another value would match). The error never holds the token.
func EchoProberTokenFile(token string) (string, error) {
	if len(token) != echoProberTokenLen || strings.IndexFunc(token, func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f')
	}) >= 0 {
		return "", errors.New("echo prober token: want 64 lower-case hex characters")
	}
	return "^" + token + "$\n", nil
}

// EchoProberTokenOf is the token in a file EchoProberTokenFile wrote;
// false for anything else.
func EchoProberTokenOf(file []byte) (string, bool) {
	s := strings.TrimSuffix(string(file), "\n")
	s, ok1 := strings.CutPrefix(s, "^")
	s, ok2 := strings.CutSuffix(s, "$")
	if !ok1 || !ok2 {
		return "", false
	}
	if _, err := EchoProberTokenFile(s); err != nil {
		return "", false
	}
	return s, true
}

// validTokenFile says squid.conf can take path between quotes: Squid ends a
// quoted file name at the first quote of either kind, and a file name
// with white space or '#' is one no reader of the config should have to
// puzzle over.
func validTokenFile(path string) bool {
	return strings.HasPrefix(path, "/") && !strings.ContainsFunc(path, func(r rune) bool {
		return r <= ' ' || r == 0x7f || strings.ContainsRune(`"'#\`, r)
	})
}

// BasicAuthHelper is Debian's helper that checks a user and password
// against an htpasswd file (crypt(3), so bcrypt through libxcrypt).
const BasicAuthHelper = "/usr/lib/squid/basic_ncsa_auth"

// loopbackClients are admitted when no client range is given: the
// contract's "only clients on the proxy's own host".
var loopbackClients = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}

// Config renders squid.conf. Access is denied by default: only the admitted
// clients may use the proxy; a plain request reaches only the safe ports
// and the web's schemes, CONNECT only the policy's connect ports (443); no
// destination with an address in the policy's refused set, nor a name with
// no address; the cache manager never; and the last rule is "deny all".
// Squid's dst ACL matches when any address a host name resolves to is in
// the ranges, and Squid then connects to the addresses it checked (its
// ipcache), so a name that also resolves to an internal address is refused. Squid keeps no disk cache and, unless
// Params say otherwise, logs to stdout and stderr, so it needs no writable
// root filesystem.
func Config(sp Params) string {
	dest := sp.Destinations
	if dest == nil {
		dest = egress.Default()
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	gen := sp.Generator
	if gen == "" {
		gen = "egress-proxies-operator"
	}
	w("# Generated by %s; do not edit.", gen)
	if sp.ListenAddr != "" {
		w("http_port %s", netip.AddrPortFrom(netip.MustParseAddr(sp.ListenAddr), uint16(sp.Port)))
	} else {
		w("http_port %d", sp.Port)
	}
	w("")
	clients := sp.Clients
	if len(clients) == 0 {
		clients = loopbackClients
	}
	// Each ACL lists no range inside another of its ranges: Squid would
	// warn at every start and ignore one of the two, the wider one when
	// the narrower comes first (so [10.1.2.3/32, 10.1.0.0/16] would admit
	// only 10.1.2.3).
	for _, r := range egress.Disjoint(clients) {
		w("acl allowed_clients src %s", r)
	}
	if sp.Auth != nil {
		// casesensitive: the file and the local proxy compare user names
		// byte for byte, while Squid's default lower-cases them first.
		w("auth_param basic program %s %s", BasicAuthHelper, sp.Auth.PasswordFile)
		w("auth_param basic children 5 startup=1 idle=1")
		w("auth_param basic realm %s", clientauth.Realm)
		w("auth_param basic casesensitive on")
		w("auth_param basic credentialsttl %d seconds", int(clientauth.CredentialsTTL/time.Second))
		w("acl authenticated proxy_auth REQUIRED")
	}
	w("acl connect_ports port %s", joinPorts(dest.ConnectPorts()))
	w("acl safe_ports port %s", joinRanges(egress.SafePorts()))
	w("acl web_protos proto %s", strings.ToUpper(strings.Join(egress.Schemes, " ")))
	// The policy's refused set, one line per reason (squid.conf has no
	// trailing comments). It is the denied ranges with the allowed ones
	// already cut out, so one dst ACL decides: Squid's dst matches when any
	// address of a name is in it, which refuses a name with one allowed and
	// one refused address, as the local provider does.
	for _, g := range byReason(dest.Refused()) {
		w("# %s", g.why)
		for chunk := range slices.Chunk(g.prefixes, rangesPerLine) {
			w("acl refused_destinations dst %s", strings.Join(chunk, " "))
		}
	}
	// A dst ACL does not match a name that does not resolve, whatever its
	// ranges: "not any address" is how Squid says "no address".
	w("acl resolved_destinations dst all")
	allows := writeRules(w, dest.Rules())
	// What decided a request, for the access log: each http_access line
	// ends with an ACL that always matches and annotates the transaction,
	// so it is reached only when the rest of its line matched; a later
	// line's annotation replaces an earlier one.
	w("# What decided, for the access log (%%{decision}note, %%{rule}note).")
	refusals := []string{egress.RuleClientRanges, egress.RuleScheme, egress.RulePort, egress.RuleManager,
		egress.RuleUnresolved, egress.RuleAddress, egress.RuleDestinations}
	if sp.Auth != nil {
		refusals = append(refusals, egress.RuleClientAuth)
	}
	for _, r := range refusals {
		w("acl %s annotate_transaction decision=%s rule=%s", decidedACL(r), egress.DecisionRefused, r)
	}
	for _, a := range allows {
		w("acl %s annotate_transaction decision=%s rule=%s", decidedACL(a.rule), egress.DecisionAllowed, a.rule)
	}
	if sp.ServingProbe {
		w("acl serving_probe_client src 127.0.0.1/32")
		w("acl serving_probe_host dstdomain -n %s", servingreport.ProbeHost)
		w("acl %s annotate_transaction rule=%s", decidedACL(ruleServingProbe), ruleServingProbe)
		w("acl serving_probe note rule %s", ruleServingProbe)
	}
	echo := dest.Echo()
	prober := sp.EchoProber != nil && !echo.IsZero()
	if (sp.ServingProbe || prober) && !echo.IsZero() {
		writeEchoACLs(w, echo)
	}
	if prober {
		if !validTokenFile(sp.EchoProber.TokenFile) {
			panic(fmt.Sprintf("squid: EchoProber.TokenFile %q: want an absolute path without white space, quotes or '#'", sp.EchoProber.TokenFile))
		}
		// A quoted value is a file to read the values from: the token
		// stays in the Secret.
		w("# The operator's ask of the echo carries the instance's token (%s);", EchoProberHeader)
		w("# Squid reads the expression that matches it from this file.")
		w("acl egress_prober req_header %s \"%s\"", EchoProberHeader, sp.EchoProber.TokenFile)
	}
	w("")
	if sp.ServingProbe {
		// The reporter's question is answered here, before the clients'
		// rule (loopback may not be an admitted client) and before any
		// rule that would resolve the name.
		w("http_access deny serving_probe_client serving_probe_host %s", decidedACL(ruleServingProbe))
		if !echo.IsZero() {
			// The reporter's ask of the echo, past the policy (which
			// usually refuses the echo's address) and the clients' rule;
			// nothing on the line resolves a name.
			w("http_access allow serving_probe_client %s", echoACLs)
		}
	}
	if prober {
		// The operator's ask of the echo, from its own address: before the
		// clients' rule and clientAuth (it is neither), past the policy;
		// nothing on the line resolves a name.
		w("http_access allow egress_prober %s", echoACLs)
	}
	// Clients first: a client that may not use the proxy makes it resolve
	// nothing.
	w("http_access deny !allowed_clients %s", decidedACL(egress.RuleClientRanges))
	if sp.Auth != nil {
		// Before any destination rule: a client without credentials learns
		// nothing of the policy. Squid answers 407 for a deny whose last
		// ACL is an authentication one, so the annotation comes first
		// (a line that then does not match leaves it for the next).
		w("http_access deny %s !authenticated", decidedACL(egress.RuleClientAuth))
	}
	// The scheme before the port, as egress.Policy.CheckRequest.
	w("http_access deny !CONNECT !web_protos %s", decidedACL(egress.RuleScheme))
	w("http_access deny CONNECT !connect_ports %s", decidedACL(egress.RulePort))
	w("http_access deny !CONNECT !safe_ports %s", decidedACL(egress.RulePort))
	w("http_access deny manager %s", decidedACL(egress.RuleManager))
	w("http_access deny !resolved_destinations %s", decidedACL(egress.RuleUnresolved))
	w("http_access deny refused_destinations %s", decidedACL(egress.RuleAddress))
	for _, a := range allows {
		w("http_access allow %s %s", a.acls, decidedACL(a.rule))
	}
	w("http_access deny all %s", decidedACL(egress.RuleDestinations))
	w("")
	w("# An egress proxy, not a cache: no object is stored.")
	w("cache deny all")
	w("cache_mem 8 MB")
	w("logformat egress %s", accessLogFormat(accessLogCodes["user"]))
	accessLog := orDefault(sp.AccessLog, "stdio:/dev/stdout")
	// Only requests: a connection that sends none (a TCP readiness probe,
	// every few seconds) is no line.
	w("acl has_request has request")
	logged := "has_request"
	if sp.ServingProbe {
		// The reporter's question every few seconds is no line.
		logged += " !serving_probe"
	}
	if sp.Auth != nil {
		// A name that failed authentication is not logged (it may be a
		// password typed into the wrong field): such lines get a format
		// without it.
		w("acl refused_by_auth note rule %s", egress.RuleClientAuth)
		w("logformat egress_refused_auth %s", accessLogFormat(`"`+egress.NoValue+`"`))
		w("access_log %s logformat=egress_refused_auth %s refused_by_auth", accessLog, logged)
		w("access_log %s logformat=egress %s !refused_by_auth", accessLog, logged)
	} else {
		w("access_log %s logformat=egress %s", accessLog, logged)
	}
	w("cache_log %s", orDefault(sp.CacheLog, "/dev/stderr"))
	w("cache_store_log none")
	w("netdb_filename none")
	w("# No ICMP RTT probes: nothing here uses them, and minimal images")
	w("# (the kubernetes provider's) carry no pinger helper.")
	w("pinger_enable off")
	w("logfile_rotate 0")
	w("pid_filename %s", sp.PidFile)
	w("coredump_dir %s", sp.CoredumpDir)
	if sp.EffectiveUser != "" {
		w("cache_effective_user %s", sp.EffectiveUser)
	}
	if sp.OutgoingAddress.IsValid() {
		w("# The group's address: destinations see it whichever member serves.")
		w("tcp_outgoing_address %s", sp.OutgoingAddress.Unmap())
	}
	w("# Nothing about the proxy's host or its clients leaves: no version,")
	w("# no host name, no cache headers, no forwarding headers.")
	w("httpd_suppress_version_string on")
	w("visible_hostname %s", VisibleHostname)
	w("# Squid adds Via before these rules apply, so they remove its own too")
	w("# (\"via off\" would warn at every start).")
	for _, h := range []string{"Via", "X-Cache", "X-Cache-Lookup"} {
		w("reply_header_access %s deny all", h)
	}
	w("forwarded_for delete")
	for _, h := range egress.HiddenRequestHeaders {
		if h != "X-Forwarded-For" { // forwarded_for delete removes it
			w("request_header_access %s deny all", h)
		}
	}
	if prober {
		// The token never leaves: not to the echo, nor from a client that
		// sends the header anywhere.
		w("request_header_access %s deny all", EchoProberHeader)
	}
	w("# Shorter than a Pod's termination grace period and systemd's stop timeout.")
	w("shutdown_lifetime 5 seconds")
	return b.String()
}

// ruleServingProbe is the access log's rule for the reporter's question
// (never written: the line is not logged).
const ruleServingProbe = "serving-probe"

// ruleEgressEcho is the access log's rule for the reporter's ask of the
// entry's egress-IP echo: real egress, so it is logged.
const ruleEgressEcho = "egress-echo"

// echoACLs are the terms after serving_probe_client or egress_prober on
// the echo's allow lines, the cheap ones first, its annotation last.
var echoACLs = "egress_echo_method egress_echo_proto egress_echo_port egress_echo_path egress_echo_host " + decidedACL(ruleEgressEcho)

// writeEchoACLs writes the ACLs of the one request the reporter
// (servingreport) or the operator (EchoProber) sends the echo: GET
// http://<host:port><path>, nothing else on that host, and never by a name
// lookup (-n: an address host must be written as that address, a name is
// matched as written). Squid matches the path %-decoded, so another
// spelling of the same path (/%69p for /ip) passes too: still only to the
// echo's host and port, from 127.0.0.1 or with the token.
func writeEchoACLs(w func(string, ...any), e egress.Echo) {
	w("# The entry's egress-IP echo (egressIPEcho), asked by the serving reporter")
	w("# (from 127.0.0.1) or the operator (with its token): only a GET of exactly this URL.")
	w("acl egress_echo_method method GET")
	w("acl egress_echo_proto proto HTTP")
	w("acl egress_echo_port port %d", e.Port)
	w("acl egress_echo_path urlpath_regex ^%s$", ereLiteral(e.Path))
	if e.Addr.IsValid() {
		w("acl egress_echo_host dst -n %s", netip.PrefixFrom(e.Addr, e.Addr.BitLen()))
	} else {
		// As Squid keeps the request's host: lower case, no trailing dot.
		w("acl egress_echo_host dstdomain -n %s", strings.TrimSuffix(strings.ToLower(e.Host), "."))
	}
	w("acl %s annotate_transaction decision=%s rule=%s", decidedACL(ruleEgressEcho), egress.DecisionAllowed, ruleEgressEcho)
}

// ereLiteral writes s as a POSIX extended regular expression that matches
// s itself: a backslash before each ERE special character, which POSIX
// defines as that character ("]" and "}" are not special outside a bracket
// expression). Squid reads an unquoted regex token as written; egress.ParseEcho
// admits none of what its config parser would read (space, quote, #, $).
func ereLiteral(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`.[\()*+?{|^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// allow is one http_access allow line: its ACLs and the access log's rule
// for what it lets through.
type allow struct{ acls, rule string }

// decidedACL names the annotate_transaction ACL that records rule.
func decidedACL(rule string) string {
	return "decided_" + aclNameSafe.Replace(rule)
}

// aclNameSafe is built once: a Replacer builds its tables on first use,
// and one per call was 15% of all the manager allocated in a wave of
// 10,000 Pods (docs/performance.md). A Replacer is safe for concurrent use.
var aclNameSafe = strings.NewReplacer("-", "_", "[", "_", "]", "")

// accessLogCodes are Squid's logformat codes for egress.AccessLogFields:
// text that a client chooses is "#"-encoded (egress.LogEscape), so no
// line stops being JSON; the URL's path and query are never written.
var accessLogCodes = map[string]string{
	"time":        `"%{%Y-%m-%dT%H:%M:%S}tg.%03tuZ"`,
	"client":      `"%>a"`,
	"user":        `"%#un"`,
	"method":      `"%#rm"`,
	"host":        `"%#>rd"`,
	"port":        `"%>rP"`,
	"status":      `%>Hs`,
	"bytes_in":    `%>st`,
	"bytes_out":   `%<st`,
	"duration_ms": `%tr`,
	"decision":    `"%{decision}note"`,
	"rule":        `"%{rule}note"`,
}

// accessLogFormat is the JSON line of the access log, one key per field,
// with user as the user field's code.
func accessLogFormat(user string) string {
	parts := make([]string, len(egress.AccessLogFields))
	for i, f := range egress.AccessLogFields {
		code, ok := accessLogCodes[f]
		if !ok {
			panic("squid: no logformat code for access log field " + f)
		}
		if f == "user" {
			code = user
		}
		parts[i] = `"` + f + `":` + code
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// writeRules writes the ACLs of a Proxy's destination rules and returns
// the http_access allow lines that let a request through: one per way a
// rule can match (its names, the names under it, its CIDRs), each with the
// rule's ports. No rules: every admitted client's request that got past
// the entry's denies. Domain ACLs carry -n: Squid would otherwise look up
// the name of an IP-literal target, and a PTR record would let it match.
func writeRules(w func(string, ...any), rules []egress.Rule) []allow {
	if len(rules) == 0 {
		return []allow{{"allowed_clients", egress.RuleEntry}}
	}
	w("# The Proxy's destination rules (spec.destinations): a request must")
	w("# match one of them.")
	var allows []allow
	for i, r := range rules {
		name := fmt.Sprintf("rule%d", i+1)
		decided := egress.RuleName(i)
		ports := ""
		if len(r.Ports) > 0 {
			w("acl %s_ports port %s", name, joinPorts(r.Ports))
			ports = " " + name + "_ports"
		}
		if names := dstdomains(r); len(names) > 0 {
			for chunk := range slices.Chunk(names, rangesPerLine) {
				w("acl %s_names dstdomain -n %s", name, strings.Join(chunk, " "))
			}
			allows = append(allows, allow{name + "_names" + ports, decided})
		}
		if len(r.Under) > 0 {
			for _, u := range r.Under {
				w("acl %s_under dstdom_regex -n -i \\.%s$", name, strings.ReplaceAll(u, ".", "\\."))
			}
			allows = append(allows, allow{name + "_under" + ports, decided})
		}
		if len(r.CIDRs) > 0 {
			// "Every address in the CIDRs" is "no address outside them".
			for chunk := range slices.Chunk(r.Outside(), rangesPerLine) {
				w("acl %s_outside dst %s", name, joinPrefixes(chunk))
			}
			allows = append(allows, allow{"!" + name + "_outside" + ports, decided})
		}
	}
	return allows
}

// dstdomains are a rule's exact names and suffixes as dstdomain writes
// them (".example.com" for a suffix), less those another entry covers:
// Squid warns about, and ignores one of, two entries that nest.
func dstdomains(r egress.Rule) []string {
	// under: a suffix of the rule other than name itself holds name.
	under := func(name string) bool {
		return slices.ContainsFunc(r.Suffixes, func(s string) bool { return strings.HasSuffix(name, "."+s) })
	}
	var out []string
	for _, n := range slices.Compact(slices.Sorted(slices.Values(r.Names))) {
		if !slices.Contains(r.Suffixes, n) && !under(n) {
			out = append(out, n)
		}
	}
	for _, s := range slices.Compact(slices.Sorted(slices.Values(r.Suffixes))) {
		if !under(s) {
			out = append(out, "."+s)
		}
	}
	return out
}

// joinPrefixes writes ranges for a dst ACL. Squid reads 0.0.0.0/0 as
// "all", which matches IPv6 addresses too, so it is written as its two
// halves (a rule with only IPv6 CIDRs has all of IPv4 outside them).
func joinPrefixes(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		if p.Bits() == 0 && p.Addr().Is4() {
			s = append(s, "0.0.0.0/1", "128.0.0.0/1")
			continue
		}
		s = append(s, p.String())
	}
	return strings.Join(s, " ")
}

// VisibleHostname is the name Squid gives itself in its error pages, in
// place of the host's.
const VisibleHostname = "egress-proxy"

// rangesPerLine keeps acl lines short enough to read.
const rangesPerLine = 8

type reasonGroup struct {
	why      string
	prefixes []string
}

// byReason groups ranges by reason, in the order reasons first appear.
func byReason(rs []egress.Range) []reasonGroup {
	var out []reasonGroup
	index := map[string]int{}
	for _, r := range rs {
		i, ok := index[r.Why]
		if !ok {
			i = len(out)
			index[r.Why] = i
			out = append(out, reasonGroup{why: r.Why})
		}
		out[i].prefixes = append(out[i].prefixes, strings.Fields(joinPrefixes([]netip.Prefix{r.Prefix}))...)
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func joinPorts(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, " ")
}

func joinRanges(rs []egress.PortRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, " ")
}
