// Package gcptest is what tests of the gcp provider need beside the fake
// Compute API (internal/provider/gcp/fakecompute): an OAuth token endpoint
// on loopback that grants the JWT-bearer requests service account keys make
// (the flow the provider's key file and Application Default Credentials
// use), service account key files pointing at it, and an Env wiring both
// to a fake. Nothing leaves loopback. It is imported by tests only.
package gcptest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
)

// Tokens is the token endpoint. It grants a token to a JWT signed by a key
// it made (WriteKey), for that key's service account only, and refuses any
// other: a key file that was replaced by one of an unknown account, or
// tampered with, gets 400 invalid_grant, as Google's endpoint answers.
type Tokens struct {
	srv *httptest.Server

	mu      sync.Mutex
	keys    map[string]*rsa.PublicKey // by client_email
	issued  map[string]int
	written map[string]int // keys written per client_email
}

// keyCache holds the RSA keys made so far, shared by every Tokens of the
// test binary (the n-th key written for an e-mail is the same key in every
// test: a 2048-bit key takes a while to make, and a rotation needs a
// different key, not a fresh one per test).
var keyCache struct {
	mu   sync.Mutex
	keys map[string]*rsa.PrivateKey
}

func cachedKey(t testing.TB, email string, n int) *rsa.PrivateKey {
	keyCache.mu.Lock()
	defer keyCache.mu.Unlock()
	id := fmt.Sprintf("%s#%d", email, n)
	if k := keyCache.keys[id]; k != nil {
		return k
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if keyCache.keys == nil {
		keyCache.keys = map[string]*rsa.PrivateKey{}
	}
	keyCache.keys[id] = k
	return k
}

// NewTokens starts the endpoint; it stops with the test.
func NewTokens(t testing.TB) *Tokens {
	t.Helper()
	ts := &Tokens{keys: map[string]*rsa.PublicKey{}, issued: map[string]int{}, written: map[string]int{}}
	ts.srv = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.srv.Close)
	return ts
}

// URL is the token_uri key files name.
func (ts *Tokens) URL() string { return ts.srv.URL + "/token" }

// Token is the access token the endpoint grants to email's key.
func (ts *Tokens) Token(email string) string {
	return "gcptest-token-" + strings.NewReplacer("@", "-at-", ".", "-").Replace(email)
}

// Issued is how many tokens email's keys were granted.
func (ts *Tokens) Issued(email string) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.issued[email]
}

// Forget makes the endpoint refuse email's keys from now on (a key that
// was deleted or disabled).
func (ts *Tokens) Forget(email string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.keys, email)
}

// WriteKey writes a new service account key for email to path (0600), in
// the form `gcloud iam service-accounts keys create` writes, with token_uri
// this endpoint. Writing again rotates the key: the old one is no longer
// granted.
func (ts *Tokens) WriteKey(t testing.TB, path, email string) {
	t.Helper()
	ts.mu.Lock()
	n := ts.written[email]
	ts.written[email]++
	ts.mu.Unlock()
	key := cachedKey(t, email, n)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	kid := fmt.Sprintf("%x", sha256.Sum256(der))[:40]
	doc := map[string]string{
		"type": "service_account", "project_id": "proj-1", "private_key_id": kid,
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": email, "client_id": "100000000000000000001",
		"auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": ts.URL(),
		"universe_domain": "googleapis.com",
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	ts.mu.Lock()
	ts.keys[email] = &key.PublicKey
	ts.mu.Unlock()
	// Written next to the target and renamed over it, as the kubelet swaps
	// a Secret's files: a reader never sees half a key.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// serve is the token endpoint: POST grant_type=urn:ietf:params:oauth:
// grant-type:jwt-bearer with an RS256 assertion.
func (ts *Tokens) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, errCode, desc string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": errCode, "error_description": desc})
	}
	if r.Method != http.MethodPost || r.URL.Path != "/token" {
		fail(http.StatusNotFound, "not_found", "no such endpoint")
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		fail(http.StatusBadRequest, "unsupported_grant_type", "Invalid grant_type.")
		return
	}
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	if len(parts) != 3 {
		fail(http.StatusBadRequest, "invalid_grant", "Invalid JWT.")
		return
	}
	var claims struct {
		Iss   string `json:"iss"`
		Scope string `json:"scope"`
		Aud   string `json:"aud"`
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(payload, &claims) != nil {
		fail(http.StatusBadRequest, "invalid_grant", "Invalid JWT payload.")
		return
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		fail(http.StatusBadRequest, "invalid_grant", "Invalid JWT Signature.")
		return
	}
	ts.mu.Lock()
	pub := ts.keys[claims.Iss]
	ts.mu.Unlock()
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if pub == nil || rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) != nil {
		fail(http.StatusBadRequest, "invalid_grant", "Invalid JWT Signature.")
		return
	}
	if claims.Scope == "" {
		fail(http.StatusBadRequest, "invalid_scope", "Invalid OAuth scope or ID token audience provided.")
		return
	}
	ts.mu.Lock()
	ts.issued[claims.Iss]++
	ts.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": ts.Token(claims.Iss), "token_type": "Bearer", "expires_in": 3599,
	})
}

// Env is a fake Compute API served on loopback, a token endpoint, and a key
// file the fake accepts (RequireToken: a request without its token is 401).
type Env struct {
	Fake    *fakecompute.Server
	Server  *httptest.Server
	Tokens  *Tokens
	KeyFile string
	// Email is the key file's service account.
	Email string
	// Project is the fake's project.
	Project string
}

// Email is the service account of a new Env's key file.
const Email = "egress-operator@proj-1.iam.gserviceaccount.com"

// New starts an Env; everything stops with the test.
func New(t testing.TB, opts ...fakecompute.Option) *Env {
	t.Helper()
	e := &Env{Fake: fakecompute.New(opts...), Tokens: NewTokens(t), Email: Email, Project: "proj-1"}
	e.Server = httptest.NewServer(e.Fake)
	t.Cleanup(e.Server.Close)
	e.KeyFile = filepath.Join(t.TempDir(), "key.json")
	e.Tokens.WriteKey(t, e.KeyFile, e.Email)
	e.Fake.RequireToken(e.Tokens.Token(e.Email))
	return e
}

// Endpoint is the entry's endpoint for the fake.
func (e *Env) Endpoint() string { return e.Server.URL }
