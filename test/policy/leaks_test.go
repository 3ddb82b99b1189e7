package policy

import (
	"os"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/dnstest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/netns"
)

// TestNothingAboutTheHostLeaks: through either proxy, a destination learns
// nothing of the clients' forwarding chain (the headers egress hides are
// removed, none is added), a client learns nothing of the proxy's host
// (no Via, no X-Cache headers, no version, no host name in error pages),
// and the local provider's errors are its fixed texts, naming no address.
func TestNothingAboutTheHostLeaks(t *testing.T) {
	// A host name that nothing else in an answer could contain by chance.
	const hostname = "proxyhost-7c1e9a"
	if !netns.Run(t, netns.Setup{Addrs: onLoopback, Nameserver: nameserver, Hostname: hostname}) {
		return
	}
	dnstest.Start(t, nameserver, names)
	c := startCatch(t)
	settings := policies[0].settings
	squidAddr, _, _ := startSquid(t, settings.Policy(), "")
	localAddr, _ := startLocal(t, settings, nil, "", "127.0.100.0/24")
	proxies := map[string]string{"local": localAddr, "squid": squidAddr}
	if h, err := os.Hostname(); err != nil || h != hostname {
		t.Fatalf("host name %q %v, want the namespace's %q", h, err, hostname)
	}
	forwarding := []string{
		"Forwarded: for=192.0.2.7;host=intranet.internal\r\n",
		"X-Forwarded-For: 192.0.2.7\r\n",
		"X-Forwarded-Host: intranet.internal\r\n",
		"X-Forwarded-Proto: https\r\n",
		"Via: 1.1 inner-proxy\r\n",
	}
	for name, addr := range proxies {
		o := send(t, addr, probe{scheme: "http", host: "a.test", port: plainPort}, "leak-"+name, c, forwarding...)
		if o.class != "passed" {
			t.Fatalf("%s: GET a.test %s %d", name, o.class, o.status)
		}
		_, arrived := c.by("leak-" + name)
		for _, h := range egress.HiddenRequestHeaders {
			if v := arrived.Values(h); len(v) > 0 {
				t.Errorf("%s: the destination received %s %q", name, h, v)
			}
		}
		for h, vs := range arrived {
			for _, v := range vs {
				if strings.Contains(strings.ToLower(v), "squid") || strings.Contains(v, hostname) {
					t.Errorf("%s: the destination received %s: %q, which names the proxy", name, h, v)
				}
			}
		}
		checkAnswerHides(t, name+" GET a.test (200)", o, hostname)

		// The proxies' own answers: refused, cannot resolve, cannot connect.
		for _, p := range []probe{
			{scheme: "http", host: "loop.test", port: plainPort},
			{scheme: "http", host: "nx.test", port: plainPort},
			{scheme: "http", host: "dead.test", port: plainPort},
			{connect: true, host: "dead.test", port: connectPort},
		} {
			o := send(t, addr, p, "err-"+name, c)
			checkAnswerHides(t, name+" "+p.String(), o, hostname)
			if name != "local" {
				continue
			}
			// Go's dial and lookup errors name the destination, the
			// resolver and the proxy's own address, and tell a refused
			// connection from a timeout.
			for _, leak := range []string{allowed4Dead, "127.0.", nameserver, "dial tcp", "lookup", "connection refused", "no such host", "i/o timeout"} {
				if strings.Contains(o.body, leak) {
					t.Errorf("local %s: the body %q names %q", p, o.body, leak)
				}
			}
		}
	}
}

// checkAnswerHides fails when an answer carries Via or the X-Cache headers,
// or names the proxy's version or host.
func checkAnswerHides(t *testing.T, what string, o outcome, hostname string) {
	t.Helper()
	for _, h := range []string{"Via", "X-Cache", "X-Cache-Lookup"} {
		if v := o.header.Values(h); len(v) > 0 {
			t.Errorf("%s: the answer carries %s %q", what, h, v)
		}
	}
	for h, vs := range o.header {
		for _, v := range vs {
			if strings.Contains(v, "squid/") || strings.Contains(v, hostname) {
				t.Errorf("%s: the answer's %s %q names the proxy's version or host", what, h, v)
			}
		}
	}
	if strings.Contains(o.body, "squid/") || strings.Contains(o.body, hostname) {
		t.Errorf("%s: the body names the proxy's version or host %q:\n%s", what, hostname, o.body)
	}
}
