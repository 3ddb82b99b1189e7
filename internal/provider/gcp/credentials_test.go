package gcp

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

// The key file is re-read when it changes: after the Secret is rotated
// (here to another service account's key, and the old one revoked) the
// next request uses the new key, without a restart.
func TestKeyFileRotationNeedsNoRestart(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	ctx, logs := logCtx(t)
	if _, err := b.ListByTag(ctx); err != nil {
		t.Fatal(err)
	}
	const rotated = "rotated@proj-1.iam.gserviceaccount.com"
	env.Tokens.WriteKey(t, env.KeyFile, rotated)
	env.Tokens.Forget(env.Email)
	env.Fake.RequireToken(env.Tokens.Token(rotated))
	if _, err := b.ListByTag(ctx); err != nil {
		t.Fatalf("ListByTag after the key was rotated: %v", err)
	}
	if env.Tokens.Issued(rotated) != 1 {
		t.Errorf("the rotated key was granted %d tokens, want 1", env.Tokens.Issued(rotated))
	}
	for _, secret := range []string{env.Tokens.Token(env.Email), env.Tokens.Token(rotated), "PRIVATE KEY"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a credential (%q) reached the log", secret)
		}
	}
	if res := checked(p).Check(t.Context()); !res.Healthy || !strings.Contains(res.Details["credentials"], env.KeyFile) {
		t.Errorf("Check after the rotation: %+v", res)
	}
}

// A key file that is missing (Secret not mounted) or is not a service
// account key is Permanent for the calls and Unauthorized for the Checker,
// and its content is never quoted.
func TestUnusableKeyFile(t *testing.T) {
	env := gcptest.New(t)
	const sentinel = "SENTINEL-key-content"
	dir := t.TempDir()
	notAKey := filepath.Join(dir, "user.json")
	if err := os.WriteFile(notAKey, []byte(`{"type":"authorized_user","client_id":"x","client_secret":"`+sentinel+`","refresh_token":"`+sentinel+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.json")
	if err := os.WriteFile(garbage, []byte(sentinel+" not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"missing", filepath.Join(dir, "absent.json"), "does not exist (is the gcp-credentials Secret mounted?"},
		{"another credential type", notAKey, "is not a usable service account key"},
		{"not JSON", garbage, "is not a usable service account key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestProvider(t, env, func(c *Config) { c.CredentialsFile = tc.file })
			b := bounded(p)
			_, err := b.Create(t.Context(), testRequest("cred"))
			if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), sentinel) {
				t.Errorf("Create: %v; want Permanent with %q and no content", err, tc.want)
			}
			res := checked(p).Check(t.Context())
			if res.Healthy || res.Reason != provider.ReasonUnauthorized || !strings.Contains(res.Message, tc.want) || strings.Contains(res.Message, sentinel) {
				t.Errorf("Check: %+v", res)
			}
		})
	}
}

// A key the token endpoint refuses (deleted, disabled) is Transient for
// the calls (the file is re-read: a rotated Secret recovers without a spec
// change) and Unauthorized for the Checker.
func TestRefusedKey(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	env.Tokens.Forget(env.Email)
	_, err := b.ListByTag(t.Context())
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "invalid_grant") {
		t.Errorf("ListByTag with a refused key: %v", err)
	}
	if res := checked(p).Check(t.Context()); res.Healthy || res.Reason != provider.ReasonUnauthorized {
		t.Errorf("Check with a refused key: %+v", res)
	}
}

// Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS names a
// key file, which is read like the entry's own (and re-read too).
func TestApplicationDefaultCredentialsFromTheEnvironment(t *testing.T) {
	env := gcptest.New(t)
	t.Setenv(envCredentials, env.KeyFile)
	p := newTestProvider(t, env, func(c *Config) { c.CredentialsFile = "" })
	b := bounded(p)
	if _, err := b.ListByTag(t.Context()); err != nil {
		t.Fatal(err)
	}
	res := checked(p).Check(t.Context())
	if !res.Healthy || !strings.Contains(res.Details["credentials"], "application default credentials") {
		t.Errorf("Check: %+v", res)
	}
}

// Without a key file and without ADC the calls fail Permanent and the
// Checker says Unauthorized with what to do. (ADC's detection is replaced:
// the real one would ask the metadata server, which tests never reach.)
func TestNoCredentials(t *testing.T) {
	env := gcptest.New(t)
	t.Setenv(envCredentials, "")
	p := newTestProvider(t, env, func(c *Config) { c.CredentialsFile = "" })
	p.creds.detect = func(*credentials.DetectOptions) (*auth.Credentials, error) {
		return nil, errors.New("credentials: could not find default credentials")
	}
	b := bounded(p)
	if _, err := b.ListByTag(t.Context()); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "no application default credentials") {
		t.Errorf("ListByTag: %v", err)
	}
	if res := checked(p).Check(t.Context()); res.Healthy || res.Reason != provider.ReasonUnauthorized {
		t.Errorf("Check: %+v", res)
	}
}
