package local

import (
	"encoding/base64"
	"net/http"
	"os"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// With clientAuth, a request needs a user and password of the file as well
// as an admitted address: 407 with the challenge otherwise, before any
// destination is looked at. Neither the file, the header nor a password
// reaches an error or a log line at any tier, a malformed file included.
func TestClientAuth(t *testing.T) {
	const sentinel = "SENTINEL-clientauth-pw"
	hash, err := bcrypt.GenerateFromPassword([]byte(sentinel), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, testInstallation, 24)
	ctx, logs := logCtx(2)

	bad := request("auth-bad")
	bad.ClientAuth = provider.Sensitive("alice:" + string(hash) + "\n" + sentinel + "\n")
	_, err = p.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "clientAuth: line 2") || strings.Contains(err.Error(), sentinel) {
		t.Errorf("Create with a malformed line 2: %v; want a refusal naming clientAuth and line 2, without the line", err)
	}

	req := request("auth")
	req.ClientAuth = provider.Sensitive("alice:" + string(hash) + "\n")
	inst, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	target := "GET http://nowhere.test/ HTTP/1.1\r\nHost: nowhere.test\r\n"
	for _, tc := range []struct{ name, header string }{
		{"no credentials", ""},
		{"wrong password", "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+sentinel+"x")) + "\r\n"},
		{"a password typed as the user", "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(sentinel+":x")) + "\r\n"},
	} {
		resp, body := rawRequest(t, inst, target+tc.header+"\r\n")
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") != clientauth.Challenge ||
			body != textAuthRequired+"\n" {
			t.Errorf("%s: %d %q %q; want 407 with %q", tc.name, resp.StatusCode, resp.Header.Get("Proxy-Authenticate"), body, clientauth.Challenge)
		}
	}
	// The right password gets past authentication to the destination
	// policy, which refuses the unresolvable name: 403, not 407.
	good := "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+sentinel)) + "\r\n"
	if resp, body := rawRequest(t, inst, target+good+"\r\n"); resp.StatusCode != http.StatusForbidden || body != textUnresolved+"\n" {
		t.Errorf("the right password: %d %q; want the policy's 403 for an unresolvable name", resp.StatusCode, body)
	}
	if len(logs.Find("refused client without valid credentials")) != 3 {
		t.Errorf("want one V(1) line per refused request:\n%s", logs.String())
	}
	for _, needle := range []string{sentinel, string(hash), base64.StdEncoding.EncodeToString([]byte("alice:" + sentinel))} {
		if strings.Contains(logs.String(), needle) {
			t.Errorf("a log line holds %q:\n%s", needle, logs.String())
		}
	}
}

// The sample Proxy config/samples/partner_api.yaml works as its comments
// say: its Secret's users with the passwords written there get past
// authentication, and then only the partner's name on port 443 is allowed.
func TestPartnerAPISample(t *testing.T) {
	data, err := os.ReadFile("../../../config/samples/partner_api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	var px struct {
		Spec struct {
			Destinations []egress.DestinationRule `json:"destinations"`
		} `json:"spec"`
	}
	var sec struct {
		StringData map[string]string `json:"stringData"`
	}
	if len(docs) != 2 || yaml.Unmarshal([]byte(docs[0]), &px) != nil || yaml.Unmarshal([]byte(docs[1]), &sec) != nil {
		t.Fatalf("the sample is not a Proxy and a Secret")
	}
	p := newTestProvider(t, testInstallation, 24)
	req := request("partner-api", "127.0.0.0/8")
	req.Destinations = px.Spec.Destinations
	req.ClientAuth = provider.Sensitive(sec.StringData["htpasswd"])
	inst := mustCreate(t, p, req)
	for _, user := range []string{"alice:correct horse battery", "bob:staple paper clip"} {
		auth := "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user)) + "\r\n"
		// A name no rule matches, by address: refused by the rules, not
		// for its credentials.
		resp, body := rawRequest(t, inst, "CONNECT 203.0.114.7:443 HTTP/1.1\r\nHost: 203.0.114.7:443\r\n"+auth+"\r\n")
		if resp.StatusCode != http.StatusForbidden || body != textRefused+"\n" {
			t.Errorf("CONNECT 203.0.114.7:443 as %s: %d %q; want the rules' 403", strings.Split(user, ":")[0], resp.StatusCode, body)
		}
	}
	if resp, _ := rawRequest(t, inst, "CONNECT 203.0.114.7:443 HTTP/1.1\r\nHost: 203.0.114.7:443\r\n\r\n"); resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("CONNECT without credentials: %d, want 407", resp.StatusCode)
	}
}
