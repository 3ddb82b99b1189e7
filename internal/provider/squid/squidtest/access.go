package squidtest

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Request is one request as Squid's http_access checks see it.
type Request struct {
	Client  netip.Addr
	Connect bool
	// Scheme is a plain request's URL scheme, lower case.
	Scheme string
	// Host is the target's host as the client wrote it.
	Host string
	Port uint16
	// Addrs are every address of the destination; none when its name does
	// not resolve.
	Addrs []netip.Addr
	// Authenticated: the request carries a user and password the
	// configured helper accepts.
	Authenticated bool
	// Method is a plain request's method; empty is GET (a CONNECT is
	// Connect).
	Method string
	// Path is a plain request's path and query as Squid matches them
	// (percent-decoded); empty is "/".
	Path string
	// Header is the request's header fields, as the client sent them.
	Header http.Header
}

// method is the request's method as Squid's method ACL reads it.
func (r Request) method() string {
	switch {
	case r.Connect:
		return "CONNECT"
	case r.Method == "":
		return "GET"
	}
	return r.Method
}

// path is the request's path and query as urlpath_regex reads them.
func (r Request) path() string {
	if r.Path == "" {
		return "/"
	}
	return r.Path
}

// Access is a model of how Squid 5 evaluates the http_access rules of a
// generated squid.conf, for the ACL types the generator writes (src, dst
// with or without -n, port, proto, method, urlpath_regex, req_header,
// dstdomain and dstdom_regex with -n, proxy_auth REQUIRED,
// annotate_transaction, and the predefined all, CONNECT and manager). A
// quoted value is a file that holds the values, one a line, as Squid
// reads it. It is checked
// against the real Squid on the differential test's corpus (test/policy),
// and lets a fuzzer compare the generated rules with the Go policy on
// inputs no corpus lists.
type Access struct {
	acls  map[string]*acl
	rules []rule
}

type acl struct {
	kind   string
	ranges []netip.Prefix
	all    bool
	// noLookup (dst -n): only an address written as the host matches.
	noLookup bool
	methods  []string
	ports    [][2]uint16
	protos   []string
	domains  []string
	regexps  []*regexp.Regexp
	// header is the field a req_header ACL matches.
	header string
	// notes an annotate_transaction ACL sets when it is reached.
	notes map[string]string
}

type term struct {
	name string
	not  bool
}

type rule struct {
	allow bool
	terms []term
}

// ParseAccess reads the acl and http_access lines of conf. Any other ACL
// type, or an http_access naming an ACL not defined, is an error: the model
// must not guess.
func ParseAccess(conf string) (*Access, error) {
	a := &Access{acls: map[string]*acl{
		"all":     {kind: "all"},
		"CONNECT": {kind: "CONNECT"},
		"manager": {kind: "manager"},
	}}
	for n, line := range strings.Split(conf, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "acl":
			if len(f) < 4 {
				return nil, fmt.Errorf("line %d: %q", n+1, line)
			}
			if err := a.addACL(f[1], f[2], f[3:]); err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
		case "http_access":
			if len(f) < 3 || (f[1] != "allow" && f[1] != "deny") {
				return nil, fmt.Errorf("line %d: %q", n+1, line)
			}
			r := rule{allow: f[1] == "allow"}
			for _, t := range f[2:] {
				name, not := strings.CutPrefix(t, "!")
				if a.acls[name] == nil {
					return nil, fmt.Errorf("line %d: acl %q is not defined", n+1, name)
				}
				r.terms = append(r.terms, term{name: name, not: not})
			}
			a.rules = append(a.rules, r)
		}
	}
	return a, nil
}

func (a *Access) addACL(name, kind string, values []string) error {
	c := a.acls[name]
	if c == nil {
		c = &acl{kind: kind}
		a.acls[name] = c
	} else if c.kind != kind {
		return fmt.Errorf("acl %s is %s and %s", name, c.kind, kind)
	}
	if kind == "req_header" {
		// The field's name comes first, then the expressions.
		if c.header != "" && !strings.EqualFold(c.header, values[0]) {
			return fmt.Errorf("acl %s: req_header %s and %s", name, c.header, values[0])
		}
		c.header, values = values[0], values[1:]
	}
	values, err := fromFiles(values)
	if err != nil {
		return fmt.Errorf("acl %s: %w", name, err)
	}
	for _, v := range values {
		switch kind {
		case "src", "dst":
			if kind == "dst" && v == "-n" {
				c.noLookup = true
				continue
			}
			// Squid reads 0.0.0.0/0 as "all" ("needs to be replaced by the
			// term 'all'"), which matches IPv6 addresses too.
			if v == "all" || v == "0.0.0.0/0" {
				c.all = true
				continue
			}
			p, err := netip.ParsePrefix(v)
			if err != nil {
				addr, aerr := netip.ParseAddr(v)
				if aerr != nil {
					return fmt.Errorf("acl %s: %q is no range", name, v)
				}
				p = netip.PrefixFrom(addr, addr.BitLen())
			}
			c.ranges = append(c.ranges, p)
		case "port":
			lo, hi, isRange := strings.Cut(v, "-")
			if !isRange {
				hi = lo
			}
			l, err1 := strconv.ParseUint(lo, 10, 16)
			h, err2 := strconv.ParseUint(hi, 10, 16)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("acl %s: %q is no port", name, v)
			}
			c.ports = append(c.ports, [2]uint16{uint16(l), uint16(h)})
		case "proto":
			c.protos = append(c.protos, v)
		case "method":
			c.methods = append(c.methods, v)
		case "urlpath_regex", "req_header":
			if strings.HasPrefix(v, "-") {
				return fmt.Errorf("acl %s: flag %s is not modelled", name, v)
			}
			// Squid compiles it as a POSIX extended expression, case
			// sensitive.
			re, err := regexp.CompilePOSIX(v)
			if err != nil {
				return fmt.Errorf("acl %s: %v", name, err)
			}
			c.regexps = append(c.regexps, re)
		case "note", "has":
			// Read by access_log lines only, which the model leaves out.
		case "annotate_transaction":
			k, val, ok := strings.Cut(v, "=")
			if !ok || strings.HasSuffix(k, "+") {
				return fmt.Errorf("acl %s: only key=value annotations are modelled, not %q", name, v)
			}
			if c.notes == nil {
				c.notes = map[string]string{}
			}
			c.notes[k] = val
		case "proxy_auth":
			if v != "REQUIRED" {
				return fmt.Errorf("acl %s: only proxy_auth REQUIRED is modelled", name)
			}
		case "dstdomain", "dstdom_regex":
			// Only -n is modelled: a name lookup for an IP literal is
			// what the generator must never ask for.
			if v == "-n" || (kind == "dstdom_regex" && v == "-i") {
				continue
			}
			if strings.HasPrefix(v, "-") {
				return fmt.Errorf("acl %s: flag %s is not modelled", name, v)
			}
			if kind == "dstdomain" {
				c.domains = append(c.domains, strings.ToLower(v))
				continue
			}
			re, err := regexp.Compile("(?i)" + v)
			if err != nil {
				return fmt.Errorf("acl %s: %v", name, err)
			}
			c.regexps = append(c.regexps, re)
		default:
			return fmt.Errorf("acl type %q is not modelled", kind)
		}
	}
	return nil
}

// Allows says whether Squid would let r past http_access: the first rule
// whose terms all match decides; with none, the opposite of the last rule.
func (a *Access) Allows(r Request) bool {
	allow, _ := a.Decide(r)
	return allow
}

// Decide is Allows with the annotations the transaction carries at the
// end: an annotate_transaction ACL sets its notes when it is reached (every
// term before it on its line matched), and a later one replaces them, as
// in Squid, so a line that then fails to match still leaves its notes.
func (a *Access) Decide(r Request) (bool, map[string]string) {
	notes := map[string]string{}
	for _, rl := range a.rules {
		if a.matchAll(rl.terms, r, notes) {
			return rl.allow, notes
		}
	}
	return len(a.rules) > 0 && !a.rules[len(a.rules)-1].allow, notes
}

func (a *Access) matchAll(terms []term, r Request, notes map[string]string) bool {
	for _, t := range terms {
		c := a.acls[t.name]
		for k, v := range c.notes {
			notes[k] = v
		}
		if a.match(c, r) == t.not {
			return false
		}
	}
	return true
}

func (a *Access) match(c *acl, r Request) bool {
	switch c.kind {
	case "all", "annotate_transaction":
		return true
	case "CONNECT":
		return r.Connect
	case "manager":
		return false // the corpus never asks for cache_object: URLs
	case "src":
		return c.all || inRanges(c.ranges, r.Client)
	case "dst":
		if c.noLookup {
			// Squid looks nothing up: a name never matches.
			addr, err := netip.ParseAddr(strings.Trim(r.Host, "[]"))
			return err == nil && (c.all || inRanges(c.ranges, addr))
		}
		// Any address of the name; a name with none matches nothing, not
		// even "all" (Squid's lookup failure is a mismatch).
		return slices.ContainsFunc(r.Addrs, func(addr netip.Addr) bool { return c.all || inRanges(c.ranges, addr) })
	case "port":
		return slices.ContainsFunc(c.ports, func(p [2]uint16) bool { return p[0] <= r.Port && r.Port <= p[1] })
	case "proto":
		return !r.Connect && slices.Contains(c.protos, strings.ToUpper(r.Scheme))
	case "dstdomain":
		host := urlHost(r.Host)
		return slices.ContainsFunc(c.domains, func(d string) bool {
			if rest, ok := strings.CutPrefix(d, "."); ok {
				return host == rest || strings.HasSuffix(host, d)
			}
			return host == d
		})
	case "method":
		return slices.Contains(c.methods, r.method())
	case "urlpath_regex":
		return !r.Connect && slices.ContainsFunc(c.regexps, func(re *regexp.Regexp) bool { return re.MatchString(r.path()) })
	case "req_header":
		// Squid matches every field of that name as one value, joined
		// with ", "; a request without the field matches nothing.
		vs := r.Header.Values(c.header)
		if len(vs) == 0 {
			return false
		}
		v := strings.Join(vs, ", ")
		return slices.ContainsFunc(c.regexps, func(re *regexp.Regexp) bool { return re.MatchString(v) })
	case "proxy_auth":
		return r.Authenticated
	case "dstdom_regex":
		host := urlHost(r.Host)
		return slices.ContainsFunc(c.regexps, func(re *regexp.Regexp) bool { return re.MatchString(host) })
	}
	return false
}

// fromFiles replaces each quoted value ("path") with the values the file
// holds, as Squid reads them: a line each, trimmed, blank lines and lines
// starting with '#' skipped. A line with white space inside (which Squid
// reads up to a trailing comment) is not modelled, and a file that cannot
// be read is an error (Squid warns and keeps the ACL empty).
func fromFiles(values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		path, quoted := strings.CutPrefix(v, `"`)
		if !quoted {
			out = append(out, v)
			continue
		}
		path, ok := strings.CutSuffix(path, `"`)
		if !ok {
			return nil, fmt.Errorf("%s: a quoted value must end in a quote", v)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(raw), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case line == "" || strings.HasPrefix(line, "#"):
			case strings.ContainsFunc(line, unicode.IsSpace):
				return nil, fmt.Errorf("%s: a line with white space inside is not modelled", path)
			default:
				out = append(out, line)
			}
		}
	}
	return out, nil
}

// urlHost is the host as Squid keeps it from a request: lower case, with no
// trailing dot.
func urlHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// inRanges matches as Squid does: it keeps every IPv4 address and range in
// the IPv4-mapped IPv6 form, so an IPv6 range that holds ::ffff:0:0/96
// matches IPv4 addresses too.
func inRanges(ranges []netip.Prefix, addr netip.Addr) bool {
	addr = netip.AddrFrom16(addr.WithZone("").As16())
	for _, p := range ranges {
		if p.Addr().Is4() {
			p = netip.PrefixFrom(netip.AddrFrom16(p.Addr().As16()), p.Bits()+96)
		}
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
