package squid

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// directives are every squid.conf directive Config writes.
var directives = []string{"http_port", "acl", "http_access", "cache", "cache_mem", "access_log", "cache_log",
	"cache_store_log", "netdb_filename", "pinger_enable", "logfile_rotate", "pid_filename", "coredump_dir",
	"cache_effective_user", "forwarded_for", "shutdown_lifetime"}

// wantAccess are the http_access rules, in order, whatever the inputs.
func wantAccess(allowed bool) []string {
	dest := "http_access deny denied_destinations"
	if allowed {
		dest += " !allowed_destinations"
	}
	return []string{"http_access deny CONNECT !connect_ports", "http_access deny !CONNECT !safe_ports",
		"http_access deny manager", dest, "http_access allow allowed_clients", "http_access deny all"}
}

// FuzzConfig renders squid.conf from what reaches it from outside: a
// Proxy's port and client ranges, an entry's allowedDestinations,
// connectPorts and (kubernetes) clusterCIDRs, each list comma-separated and
// parsed and validated as the providers do. Whatever they hold, every line
// is a comment, blank or one of Config's own directives (no input breaks a
// directive across lines), each input range is one ACL line of its own,
// nothing ever says "http_access allow all", and the access rules are the
// fixed sequence ending in "http_access deny all", before the trailing
// settings.
func FuzzConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, port int32, clientList, allowedList, connectList, clusterList string) {
		clients := parsed(clientList)
		var ports []int32
		for _, s := range split(connectList) {
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32); err == nil {
				ports = append(ports, int32(n))
			}
		}
		settings := egress.Settings{AllowedDestinations: split(allowedList), ConnectPorts: ports}
		if errs := settings.Validate(field.NewPath("x")); len(errs) > 0 {
			return // the registry refuses such an entry
		}
		var extra []egress.Range
		for _, p := range parsed(clusterList) {
			extra = append(extra, egress.Range{Prefix: p, Why: "the cluster's Service or Pod range (clusterCIDRs)"})
		}
		policy := settings.Policy(extra...)
		conf := Config(Params{Port: port, Clients: clients, Destinations: policy, PidFile: "/run/squid.pid", CoredumpDir: "/var/spool/squid"})

		if !strings.HasSuffix(conf, "\n") {
			t.Fatalf("squid.conf does not end in a newline:\n%s", conf)
		}
		lines := strings.Split(strings.TrimSuffix(conf, "\n"), "\n")
		var access, srcs, denied, allowedACL []string
		var connect string
		lastAccess, firstTrailing := -1, -1
		for i, l := range lines {
			if l == "" || strings.HasPrefix(l, "# ") {
				continue
			}
			word, rest, _ := strings.Cut(l, " ")
			if !slices.Contains(directives, word) {
				t.Fatalf("line %d %q is no directive Config writes:\n%s", i+1, l, conf)
			}
			switch {
			case word == "http_access":
				access = append(access, l)
				lastAccess = i
			case word != "acl" && word != "http_port" && firstTrailing < 0:
				firstTrailing = i
			}
			if v, ok := strings.CutPrefix(rest, "allowed_clients src "); ok {
				srcs = append(srcs, v)
			}
			if v, ok := strings.CutPrefix(rest, "denied_destinations dst "); ok {
				denied = append(denied, v)
			}
			if v, ok := strings.CutPrefix(rest, "allowed_destinations dst "); ok {
				allowedACL = append(allowedACL, v)
			}
			if v, ok := strings.CutPrefix(rest, "connect_ports port "); ok {
				connect = v
			}
		}
		if want := wantAccess(len(policy.Allowed()) > 0); !slices.Equal(access, want) {
			t.Fatalf("http_access rules %q, want %q:\n%s", access, want, conf)
		}
		if slices.Contains(access, "http_access allow all") {
			t.Fatalf("squid.conf allows all:\n%s", conf)
		}
		if firstTrailing < lastAccess {
			t.Fatalf("a setting (line %d) comes before the last http_access (line %d):\n%s", firstTrailing+1, lastAccess+1, conf)
		}
		wantSrcs := strs(clients)
		if len(clients) == 0 {
			wantSrcs = []string{"127.0.0.1/32", "::1/128"}
		}
		if err := sameRanges(srcs, wantSrcs); err != nil {
			t.Fatalf("allowed_clients %q for %q: %v", srcs, wantSrcs, err)
		}
		var wantDenied []string
		for _, d := range policy.Denied() {
			wantDenied = append(wantDenied, d.Prefix.String())
		}
		if err := sameRanges(denied, wantDenied); err != nil {
			t.Fatalf("denied_destinations %q for %q: %v", denied, wantDenied, err)
		}
		if err := sameRanges(allowedACL, strs(policy.Allowed())); err != nil {
			t.Fatalf("allowed_destinations %q for %q: %v", allowedACL, strs(policy.Allowed()), err)
		}
		var wantConnect []string
		for _, p := range policy.ConnectPorts() {
			if p == 0 {
				t.Fatalf("connect port 0 from %q", connectList)
			}
			wantConnect = append(wantConnect, fmt.Sprint(p))
		}
		if connect != strings.Join(wantConnect, " ") {
			t.Fatalf("connect_ports %q, want %q", connect, wantConnect)
		}
	})
}

// sameRanges checks an ACL's written ranges against the ones asked for:
// written in the order asked, each one asked for, every asked range
// inside a written one (the ACL matches the same addresses), and none
// inside another written one (Squid would warn and ignore one of them).
func sameRanges(written, asked []string) error {
	var ws []netip.Prefix
	last := -1
	for _, w := range written {
		i := slices.Index(asked, w)
		if i < 0 {
			return fmt.Errorf("%s was not asked for", w)
		}
		if i < last {
			return fmt.Errorf("%s is out of the asked order", w)
		}
		last = i
		ws = append(ws, netip.MustParsePrefix(w))
	}
	for _, a := range asked {
		p := netip.MustParsePrefix(a)
		if !slices.ContainsFunc(ws, func(w netip.Prefix) bool { return w.Bits() <= p.Bits() && w.Contains(p.Addr()) }) {
			return fmt.Errorf("%s is inside no written range", a)
		}
	}
	for i, p := range ws {
		for j, q := range ws {
			if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
				return fmt.Errorf("%s is inside %s, both written", p, q)
			}
		}
	}
	return nil
}

func split(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// parsed are the canonical ranges in list, as the providers admit them.
func parsed(list string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range split(list) {
		if p, err := egress.ParseCanonical(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func strs(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}
