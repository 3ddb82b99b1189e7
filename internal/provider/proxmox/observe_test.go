package proxmox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

func countLines(text, sub string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// insecureSkipTLSVerify is warned: one V(0) line naming the provider and
// the URL when the client is built (New has no logger), and every Check
// message says so; a verifying entry warns nothing.
func TestInsecureSkipTLSVerifyIsWarned(t *testing.T) {
	e := newEnv(t)
	e.cfg.CAFile, e.cfg.InsecureSkipTLSVerify = "", true
	insecure := provider.WithBoundary("pve-test", Type, e.newProvider(t, testInstallation))
	verified := provider.WithBoundary("pve-test", Type, e.p).Checker

	ctx, logs := logCtx(t)
	res := insecure.Checker.Check(ctx)
	if _, err := insecure.Provider.ListByTag(ctx); err != nil {
		t.Fatal(err)
	}
	if !res.Healthy || !strings.Contains(res.Message, insecureCheckNote) {
		t.Errorf("Check of the insecure entry = %+v, want healthy with %q in the message", res, insecureCheckNote)
	}
	text := logs.String()
	if n := countLines(text, insecureLine); n != 1 {
		t.Fatalf("%d insecure warnings over two calls, want 1:\n%s", n, text)
	}
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, insecureLine) && (!strings.Contains(l, `"level"=0`) || !strings.Contains(l, `"provider"="pve-test"`) || !strings.Contains(l, `"url"="`+e.fake.URL()+`"`)) {
			t.Errorf("the warning is not a V(0) line naming the provider and the URL: %s", l)
		}
	}

	ctx, logs = logCtx(t)
	if res := verified.Check(ctx); !res.Healthy || strings.Contains(res.Message, "WARNING") {
		t.Errorf("Check of the verifying entry = %+v, want healthy without a warning", res)
	}
	if strings.Contains(logs.String(), insecureLine) {
		t.Errorf("a verifying entry warned:\n%s", logs)
	}
}

// The wire log is V(5): one line per request with the operation, path and
// the bodies' sizes, never a body or the Authorization header.
func TestWireLogElidesPayloads(t *testing.T) {
	e := newEnv(t)
	b := provider.WithBoundary("pve-test", Type, e.p).Provider
	ctx, logs := logCtx(t)
	req := request("proxy-wire", "81111111-2222-3333-4444-555555555555")
	req.CloudInit = "#cloud-config\n# SENTINEL-wire-user-data\n"
	in, err := b.Create(ctx, req)
	must(t, err)
	testenv.EventuallyNil(t, "running", func() error {
		got, err := b.Get(ctx, in.ID)
		if err == nil && got.State != provider.StateRunning {
			err = fmt.Errorf("state %s", got.State)
		}
		return err
	})
	text := logs.String()
	var upload string
	for _, l := range strings.Split(text, "\n") {
		if !strings.Contains(l, `"msg"="proxmox wire"`) {
			continue
		}
		if !strings.Contains(l, `"level"=5`) {
			t.Errorf("wire line not at V(5): %s", l)
		}
		if strings.Contains(l, `"method"="POST"`) && strings.Contains(l, "/storage/local/upload") {
			upload = l
		}
	}
	if !strings.Contains(upload, `"op"="create.step"`) || !strings.Contains(upload, `"requestBody"="elided `) {
		t.Errorf("the upload's wire line: %q\n%s", upload, text)
	}
	if n, m := countLines(text, `"msg"="proxmox wire"`), countLines(text, `"msg"="proxmox api call"`); n == 0 || n != m {
		t.Errorf("%d wire lines and %d api call lines, want one of each per request", n, m)
	}
	for _, secret := range []string{"SENTINEL-wire-user-data", "Authorization", "PVEAPIToken", tokenSecret(e.fake)} {
		if strings.Contains(text, secret) {
			t.Errorf("%q reached the log", secret)
		}
	}
}

func tokenSecret(f *fakepve.Server) string {
	_, s, _ := strings.Cut(f.Token(), "=") // PVEAPIToken=<id>=<secret>
	_, s, _ = strings.Cut(s, "=")
	return s
}

// Over a whole lifecycle with failures (an upload refused, a start task
// that fails, a token that does not verify, a CA file that is no PEM, a
// token file that is no token), the token's secret, the cloud-init and the
// CA never reach a log line (any tier), an error, a progress message or a
// Check message. The seed does carry the cloud-init: it is absent from the
// logs not for lack of use.
func TestSecretsNeverInLogsErrorsOrProgress(t *testing.T) {
	e := newEnv(t)
	const ciSentinel, badSecret, badCA = "SENTINEL-cloud-init-5d1c", "SENTINEL-wrong-secret-77aa", "SENTINEL-not-a-pem-3b9e"
	bounded := provider.WithBoundary("pve-test", Type, e.p)
	b := bounded.Provider
	ctx, logs := logCtx(t)
	var texts []string
	note := func(err error) {
		if err != nil {
			texts = append(texts, err.Error())
		}
	}
	req := request("proxy-sentinel", "91111111-2222-3333-4444-555555555555")
	req.CloudInit = provider.Sensitive("#cloud-config\nwrite_files: [{path: /etc/x, content: " + ciSentinel + "}]\n")
	e.fake.FailNext(fakepve.Fault{Method: "POST", Path: "nodes/pve1/storage/local/upload",
		Err: &fakepve.Error{Status: 500, Message: "storage 'local' does not support 'iso' content\n"}})
	e.fake.FailNext(fakepve.Fault{Method: "POST", Path: "nodes/pve1/qemu/*/status/start", Task: &fakepve.TaskOutcome{Error: "start failed: QEMU exited with code 1"}})
	in, err := b.Create(ctx, req)
	must(t, err)
	failures := 0
	testenv.EventuallyNil(t, "running after the failures", func() error {
		got, err := b.Get(ctx, in.ID)
		texts = append(texts, got.Progress)
		if err != nil {
			note(err)
			failures++
			_, cerr := b.Create(ctx, req)
			note(cerr)
			return fmt.Errorf("step failed (%v); Create called again (%v)", err, cerr)
		}
		if got.State != provider.StateRunning {
			return fmt.Errorf("state %s (%s)", got.State, got.Progress)
		}
		return nil
	})
	if failures < 2 {
		t.Errorf("%d step failures seen, want the upload's and the start's: %v", failures, texts)
	}
	if ud := seedUserData(t, e.fake, "pve1", req.Name); !strings.Contains(ud, ciSentinel) {
		t.Fatal("the seed does not carry the cloud-init")
	}
	_, err = b.ListByTag(ctx)
	note(err)
	_, err = bounded.Secondary.ListSecondary(ctx)
	note(err)
	check := bounded.Checker
	texts = append(texts, check.Check(ctx).Message)

	// A token that does not verify, a CA file that is no PEM, a token file
	// that is no token: each fails, and says so without the content.
	token, err := os.ReadFile(e.cfg.TokenFile)
	must(t, err)
	ca, err := os.ReadFile(e.cfg.CAFile)
	must(t, err)
	id, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(token)), "PVEAPIToken="), "=")
	for _, bad := range []struct{ file, content string }{
		{e.cfg.TokenFile, id + "=" + badSecret + "\n"},
		{e.cfg.TokenFile, badSecret + "\n"},
		{e.cfg.CAFile, badCA + "\n"},
	} {
		must(t, os.WriteFile(bad.file, []byte(bad.content), 0o600))
		res := check.Check(ctx)
		if res.Healthy {
			t.Errorf("Check with %s holding %q is healthy", filepath.Base(bad.file), bad.content)
		}
		texts = append(texts, res.Message)
		e.p.forgetResources()
		_, err := b.Get(ctx, in.ID)
		if err == nil {
			t.Errorf("Get with %s holding %q succeeded", filepath.Base(bad.file), bad.content)
		}
		note(err)
		must(t, os.WriteFile(e.cfg.TokenFile, token, 0o600))
		must(t, os.WriteFile(e.cfg.CAFile, ca, 0o600))
	}

	must(t, b.Delete(ctx, in.ID))
	testenv.EventuallyNil(t, "gone", func() error {
		_, err := b.Get(ctx, in.ID)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("Get after Delete: %v", err)
	})

	all := logs.String()
	if !strings.Contains(all, `"msg"="proxmox wire"`) || !strings.Contains(all, taskFailLine) {
		t.Fatalf("the V(5) and task failure lines were not captured:\n%s", all)
	}
	caLines := strings.Split(strings.TrimSpace(string(ca)), "\n")
	secrets := map[string]string{
		"the token's secret":         tokenSecret(e.fake),
		"the cloud-init":             ciSentinel,
		"the wrong token's secret":   badSecret,
		"the bad CA file's content":  badCA,
		"the CA's first base64 line": caLines[1],
		"the CA's last base64 line":  caLines[len(caLines)-2],
	}
	for what, s := range map[string]string{"logs": all, "errors, progress and check messages": strings.Join(texts, "\n")} {
		for name, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%s is in the %s:\n%s", name, what, s)
			}
		}
	}
}
