package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/dnstest"
)

// nodeIP is the node's address on the Pods' bridge (hack/cluster/lib.sh's
// node_ip), where the Pods' resolv.conf points: a test that serves DNS
// there gives the Pods names, and without one they resolve nothing.
const nodeIP = "10.244.77.1"

// The sample's users and the passwords its comment gives.
var samplePasswords = map[string]string{"alice": "correct horse battery", "bob": "staple paper clip"}

// partnerSample is config/samples/partner_api.yaml: the Proxy and its
// users' Secret.
func partnerSample(t *testing.T) (*egressv1.Proxy, *corev1.Secret) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "partner_api.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("the sample has %d documents, want the Proxy and the Secret", len(docs))
	}
	px, sec := &egressv1.Proxy{}, &corev1.Secret{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), px); err != nil {
		t.Fatalf("the sample's Proxy: %v", err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), sec); err != nil {
		t.Fatalf("the sample's Secret: %v", err)
	}
	return px, sec
}

// testPartnerAPISample runs config/samples/partner_api.yaml on the
// kubernetes provider (issue 21): its domain rule and its two users, with
// the entry, the client's address and the origin's port put in (the
// origin serves plain HTTP on a high port: a restricted Pod binds no
// 443). The origin is named api.partner.example by the test's own DNS
// server on the node's bridge address, which Squid's Pod asks. Then the
// Secret is rotated and the time until the new user is admitted measured,
// with the Squid Pod kept (no restart, no cut).
func (cl *cluster) testPartnerAPISample(t *testing.T) {
	ctx := context.Background()
	token := "e2e-" + randomHex(t, 16)
	origin := cl.runPod(t, "partner-origin", fmt.Sprintf(
		"echo %s > /srv/index.html && exec busybox httpd -f -p %d -h /srv", token, originPort), true)
	clientPod := cl.runPod(t, "partner-client", "exec busybox sleep 3600", false)
	originAddr := netip.MustParseAddr(origin.Status.PodIP)
	dns := dnstest.Start(t, nodeIP, map[string][]netip.Addr{
		"api.partner.example":   {originAddr},
		"other.partner.example": {originAddr}, // resolves too: its 403 is the rule's
	})

	px, users := partnerSample(t)
	users.Namespace, px.Namespace = cl.ns, cl.ns
	px.Spec.Provider = podsProvider
	px.Spec.Port = proxyPort
	px.Spec.AllowedSourceRanges = []string{clientPod.Status.PodIP + "/32"}
	if len(px.Spec.Destinations) != 1 || len(px.Spec.Destinations[0].Domains) != 1 {
		t.Fatalf("the sample's destinations %+v: want one rule with one domain", px.Spec.Destinations)
	}
	px.Spec.Destinations[0].Ports = []int32{originPort}
	domain := px.Spec.Destinations[0].Domains[0]
	if err := cl.c.Create(ctx, users); err != nil {
		t.Fatal(err)
	}
	if err := cl.c.Create(ctx, px); err != nil {
		t.Fatalf("creating the sample's Proxy: %v", err)
	}
	px = cl.waitReady(t, px)
	squid := fmt.Sprintf("http://%s:%d", px.Status.IP, proxyPort)
	pod := cl.instanceObjects(t, px).pods[0]

	// fetch makes one request through Squid as user (none when empty) and
	// returns wget's status lines and body.
	fetch := func(user, password, host string) string {
		t.Helper()
		header := ""
		if user != "" {
			header = fmt.Sprintf(`--header "Proxy-Authorization: Basic %s" `,
				base64.StdEncoding.EncodeToString([]byte(user+":"+password)))
		}
		out, err := cl.exec(t, clientPod.Name, "sh", "-c", fmt.Sprintf(
			`http_proxy=%s busybox wget -S -O - %shttp://%s:%d/index.html 2>&1; echo "wget exit $?"`, squid, header, host, originPort))
		if err != nil {
			t.Fatalf("request through %s: %v: %s", squid, err, out)
		}
		return out
	}
	for _, c := range []struct {
		what, user, password, host, status string
	}{
		{"alice to the partner", "alice", samplePasswords["alice"], domain, "HTTP/1.1 200 OK"},
		{"bob to the partner", "bob", samplePasswords["bob"], domain, "HTTP/1.1 200 OK"},
		{"alice to another name", "alice", samplePasswords["alice"], "other.partner.example", "HTTP/1.1 403 Forbidden"},
		{"no credentials", "", "", domain, "HTTP/1.1 407 Proxy Authentication Required"},
		{"a wrong password", "alice", "not the password", domain, "HTTP/1.1 407 Proxy Authentication Required"},
	} {
		out := fetch(c.user, c.password, c.host)
		served := strings.Contains(out, token)
		if !strings.Contains(out, c.status) || served != (c.status == "HTTP/1.1 200 OK") {
			t.Errorf("%s: got\n%s\nwant %s (and the origin's token only with 200)", c.what, out, c.status)
			continue
		}
		t.Logf("%s: %s", c.what, c.status)
	}
	if n := dns.Asked(domain); n == 0 {
		t.Errorf("Squid never asked the test's DNS server for %s", domain)
	}

	// Squid's access log (stdout, kubectl logs): one JSON line per
	// request, with the user once admitted and what decided.
	clientIP := clientPod.Status.PodIP
	testenv.EventuallyNil(t, "Squid's access log has each request", func() error {
		logs, lines, err := cl.accessLines(t, pod)
		if err != nil {
			return err
		}
		var found []string
		for _, want := range []map[string]string{
			{"client": clientIP, "user": "alice", "host": domain, "status": "200", "decision": "allowed", "rule": "destinations[0]"},
			{"client": clientIP, "user": "bob", "host": domain, "status": "200", "decision": "allowed", "rule": "destinations[0]"},
			{"client": clientIP, "user": "alice", "host": "other.partner.example", "status": "403", "decision": "refused", "rule": "destinations"},
			{"client": clientIP, "user": "-", "host": domain, "status": "407", "decision": "refused", "rule": "client-auth"},
		} {
			line, ok := squidtest.FindAccess(lines, want)
			if !ok {
				return fmt.Errorf("no access line with %v in:\n%s", want, logs)
			}
			found = append(found, fmt.Sprint(line))
		}
		refusedAuth := 0
		for _, l := range lines {
			if l["status"] == "407" {
				refusedAuth++
			}
		}
		if refusedAuth < 2 {
			return fmt.Errorf("%d lines of 407, want one per refused request (2):\n%s", refusedAuth, logs)
		}
		for _, leak := range []string{samplePasswords["alice"], samplePasswords["bob"], "not the password", "$2y$", "index.html"} {
			if strings.Contains(logs, leak) {
				t.Errorf("Squid's log holds %q", leak)
			}
		}
		t.Logf("access log lines:\n%s", strings.Join(found, "\n"))
		return nil
	})

	// Rotation: carol joins. The Proxy keeps its instance; the operator
	// rewrites the Pod's Secret at the Proxy's next pass (its running
	// resync), the kubelet syncs the file (its sync period) and Squid's
	// helper reads it; the bound only stops a hung test.
	const carolPassword = "carol's new password"
	before := px.Status.InstanceName
	if err := cl.c.Get(ctx, client.ObjectKeyFromObject(users), users); err != nil {
		t.Fatal(err)
	}
	users.StringData = nil
	users.Data["htpasswd"] = append(users.Data["htpasswd"], []byte(clientauthtest.Line(t, "carol", carolPassword))...)
	if err := cl.c.Update(ctx, users); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	testenv.EventuallyNilWithin(t, 6*time.Minute, "carol admitted after the rotation", func() error {
		if out := fetch("carol", carolPassword, domain); !strings.Contains(out, token) {
			return fmt.Errorf("carol got:\n%s", out)
		}
		return nil
	})
	t.Logf("rotation: carol admitted %s after the Secret changed (the Proxy's next pass, then the kubelet's sync)", time.Since(rotated).Round(time.Second))
	if err := cl.c.Get(ctx, client.ObjectKeyFromObject(px), px); err != nil {
		t.Fatal(err)
	}
	now := cl.instanceObjects(t, px).pods
	if px.Status.InstanceName != before || len(now) != 1 || now[0].UID != pod.UID ||
		len(now[0].Status.ContainerStatuses) != 1 || now[0].Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the rotation replaced or restarted the proxy: instance %s (was %s), pods %d", px.Status.InstanceName, before, len(now))
	}
	if out := fetch("alice", samplePasswords["alice"], domain); !strings.Contains(out, token) {
		t.Errorf("alice after the rotation:\n%s", out)
	}
}
