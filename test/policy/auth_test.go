package policy

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/dnstest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/netns"
)

// users of the htpasswd file both proxies read; the second password holds
// what Squid URL-escapes on its way to its helper (a space, %, :, +).
var users = map[string]string{"alice": "correct horse", "bob": "p@ss w:rd%41+x"}

// htpasswdFile is users as an htpasswd file, bcrypt at the lowest cost
// (the cost does not change what is compared), bob's as $2y$ as
// `htpasswd -B` writes it.
func htpasswdFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, u := range []string{"alice", "bob"} {
		h, err := bcrypt.GenerateFromPassword([]byte(users[u]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		hash := string(h)
		if u == "bob" {
			hash = "$2y$" + strings.TrimPrefix(hash, "$2a$")
		}
		fmt.Fprintf(&b, "%s:%s\n", u, hash)
	}
	return b.String()
}

func basic(user, password string) string {
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password)) + "\r\n"
}

// TestLocalAndSquidAuthenticateAlike: with the same htpasswd file, both
// proxies admit the same users with the same passwords, answer 407 with the
// same challenge to everyone else, before any destination rule (a client
// without credentials learns nothing of the policy), and decide alike once
// admitted.
func TestLocalAndSquidAuthenticateAlike(t *testing.T) {
	if !netns.Run(t, netns.Setup{Addrs: onLoopback, Nameserver: nameserver}) {
		return
	}
	dnstest.Start(t, nameserver, names)
	c := startCatch(t)
	file := htpasswdFile(t)
	settings := policies[0].settings
	squidAddr, access, squidLines := startSquid(t, settings.Policy(), file)
	localAddr, localLines := startLocal(t, settings, nil, file, "127.0.100.0/24")
	proxies := map[string]string{"local": localAddr, "squid": squidAddr}
	credentials := []struct {
		name, header string
		valid        bool
		user         string // logged: the admitted user
	}{
		{"none", "", false, ""},
		{"alice", basic("alice", users["alice"]), true, "alice"},
		{"bob ($2y$, escaped characters)", basic("bob", users["bob"]), true, "bob"},
		{"alice, bob's password", basic("alice", users["bob"]), false, ""},
		{"alice, wrong case of the user", basic("Alice", users["alice"]), false, ""},
		{"an unknown user", basic("mallory", users["alice"]), false, ""},
		{"alice, empty password", basic("alice", ""), false, ""},
		{"not base64", "Proxy-Authorization: Basic !!!\r\n", false, ""},
		{"another scheme", "Proxy-Authorization: Bearer " + users["alice"] + "\r\n", false, ""},
		{"scheme in lower case", strings.Replace(basic("alice", users["alice"]), "Basic", "basic", 1), true, "alice"},
	}
	probes := []probe{
		{scheme: "http", host: "a.test", port: plainPort},
		{connect: true, host: "a.test", port: connectPort},
		{scheme: "http", host: "loop.test", port: plainPort},
		{scheme: "http", host: "nx.test", port: plainPort},
	}
	requests, lines := 0, 0
	for i, cr := range credentials {
		for j, p := range probes {
			lines++
			got := map[string]outcome{}
			for name, addr := range proxies {
				got[name] = send(t, addr, p, fmt.Sprintf("auth-%d-%d-%s", i, j, name), c, cr.header)
				requests++
			}
			l, s := got["local"], got["squid"]
			if l.class != s.class {
				t.Errorf("%s with credentials %s: local %s (%d), squid %s (%d)", p, cr.name, l.class, l.status, s.class, s.status)
			}
			if !cr.valid && (l.class != "auth" || len(l.reached)+len(s.reached) > 0) {
				t.Errorf("%s with credentials %s: local %s, reached %v %v; want 407 and nothing reached", p, cr.name, l.class, l.reached, s.reached)
			}
			for name, o := range got {
				if o.class == "auth" && o.header.Get("Proxy-Authenticate") != clientauth.Challenge {
					t.Errorf("%s through %s: 407 with Proxy-Authenticate %q, want %q", p, name, o.header.Get("Proxy-Authenticate"), clientauth.Challenge)
				}
			}
			// Both access lines say the same: the user only when it was
			// admitted, and what decided.
			ll, sl := logged(t, localLines, lines), logged(t, squidLines, lines)
			if diff := sameLine(ll, sl, l.class == s.class && l.class != "failed"); diff != "" {
				t.Errorf("%s with credentials %s: the access lines differ: %s", p, cr.name, diff)
			}
			if want := cmp.Or(cr.user, egress.NoValue); sl["user"] != want {
				t.Errorf("%s with credentials %s: Squid logs user %q, want %q (a name is logged once admitted)", p, cr.name, sl["user"], want)
			}
			model := access.Allows(squidtest.Request{Client: netip.MustParseAddr("127.0.0.1"), Connect: p.connect, Scheme: p.scheme,
				Host: p.host, Port: p.port, Addrs: answers(p.host), Authenticated: cr.valid})
			if model != (s.class == "passed" || s.class == "failed") {
				t.Errorf("%s with credentials %s: the model of Squid's rules says allowed=%t, the real Squid %s", p, cr.name, model, s.class)
			}
		}
	}
	if !t.Failed() {
		t.Logf("%d requests (%d credentials × %d targets, each through local and the real Squid with basic_ncsa_auth): every decision and access line equal",
			requests, len(credentials), len(probes))
	}
}
