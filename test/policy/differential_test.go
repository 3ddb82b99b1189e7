package policy

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/dnstest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/netns"
)

// TestLocalAndSquidDecideAlike runs the corpus under each entry policy
// through the local provider's proxy and through the real Squid with the
// generated config, and checks that
//   - both decide alike: passed, refused (403) or failed (5xx, the proxy
//     tried and could not connect);
//   - a request either refuses reached no catch server, and one that passed
//     reached only addresses the policy allows;
//   - the Go policy (egress.Policy.Decide, what local calls) and the model
//     of Squid's rules (squidtest.Access, what the fuzzer compares with it)
//     predict what each real proxy did.
func TestLocalAndSquidDecideAlike(t *testing.T) {
	if !netns.Run(t, netns.Setup{Addrs: onLoopback, Nameserver: nameserver}) {
		return
	}
	dnstest.Start(t, nameserver, names)
	c := startCatch(t)
	requests := 0
	for n, pol := range policies {
		entry := pol.settings.Policy()
		rules, errs := entry.ParseRules(pol.rules, field.NewPath("destinations"))
		if len(errs) > 0 {
			t.Fatalf("rules of %q: %v", pol.name, errs)
		}
		policy := entry.Narrow(rules)
		localAddr, localLines := startLocal(t, pol.settings, pol.rules, "", fmt.Sprintf("127.0.%d.0/24", 100+n))
		proxies := []struct {
			name, addr string
		}{{"local", localAddr}}
		squidAddr, access, squidLines := startSquid(t, policy, "")
		proxies = append(proxies, struct{ name, addr string }{"squid", squidAddr})
		for i, p := range corpus() {
			requests++
			got := map[string]outcome{}
			for _, px := range proxies {
				o := send(t, px.addr, p, fmt.Sprintf("p%d-%d-%s", n, i, px.name), c)
				got[px.name] = o
				checkReached(t, pol.name, p, px.name, o, policy)
			}
			if got["local"].class != got["squid"].class {
				t.Errorf("%s under %q: local %s (%d), squid %s (%d, %s); reached: local %v, squid %v", p, pol.name,
					got["local"].class, got["local"].status, got["squid"].class, got["squid"].status,
					got["squid"].header.Get("X-Squid-Error"), got["local"].reached, got["squid"].reached)
			}
			dst := egress.Destination{Connect: p.connect, Scheme: p.scheme, Host: p.host, Port: p.port, Addrs: answers(p.host)}
			// The access lines: what decided, the same on both; Squid
			// refuses a scheme it does not speak (501) before its rules
			// and logs no decision.
			ll, sl := logged(t, localLines, i+1), logged(t, squidLines, i+1)
			if got["squid"].status == http.StatusNotImplemented {
				if ll["decision"] != egress.DecisionRefused || ll["rule"] != egress.RuleScheme {
					t.Errorf("%s under %q: local logs %s by %s, want refused by scheme", p, pol.name, ll["decision"], ll["rule"])
				}
			} else if diff := sameLine(ll, sl, got["local"].class == got["squid"].class && got["local"].class != "failed"); diff != "" {
				t.Errorf("%s under %q: the access lines differ: %s", p, pol.name, diff)
			}
			if decision, rule := policy.Verdict(dst); ll["decision"] != decision || ll["rule"] != rule {
				t.Errorf("%s under %q: local logs %s by %s, egress.Policy.Verdict says %s by %s", p, pol.name, ll["decision"], ll["rule"], decision, rule)
			}
			if decided := policy.Decide(dst) == nil; decided != (got["local"].class != "refused") {
				t.Errorf("%s under %q: egress.Policy.Decide says allowed=%t, local %s", p, pol.name, decided, got["local"].class)
			}
			model := access.Allows(squidtest.Request{Client: netip.MustParseAddr("127.0.0.1"), Connect: p.connect, Scheme: p.scheme, Host: p.host, Port: p.port, Addrs: dst.Addrs})
			if model != (got["squid"].class != "refused") {
				t.Errorf("%s under %q: the model of Squid's rules says allowed=%t, the real Squid %s (%s)", p, pol.name, model, got["squid"].class, got["squid"].header.Get("X-Squid-Error"))
			}
		}
	}
	if !t.Failed() {
		t.Logf("%d requests (%d per policy, %d policies), each through local and the real Squid: every decision and access line equal, and equal to egress.Policy.Decide and Verdict and to the model of Squid's rules",
			requests, len(corpus()), len(policies))
	}
}

// checkReached fails the test when a request that did not pass reached a
// catch server, or one that passed reached an address the policy refuses.
func checkReached(t *testing.T, policyName string, p probe, proxy string, o outcome, policy *egress.Policy) {
	t.Helper()
	for _, r := range o.reached {
		ap := netip.MustParseAddrPort(r)
		if o.class != "passed" {
			t.Errorf("%s under %q through %s: %s (%d), yet it reached the catch server at %s", p, policyName, proxy, o.class, o.status, r)
			continue
		}
		if err := policy.CheckAddr(ap.Addr()); err != nil {
			t.Errorf("%s under %q through %s: reached %s, which the policy refuses: %v", p, policyName, proxy, r, err)
		}
	}
}
