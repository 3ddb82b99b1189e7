package gcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// computeScope is all the provider's calls need.
const computeScope = "https://www.googleapis.com/auth/compute"

// envCredentials is the Application Default Credentials' file variable.
const envCredentials = "GOOGLE_APPLICATION_CREDENTIALS"

// discardSlog is handed to the SDK and the auth library, whose debug
// loggers would otherwise write request bodies (user-data) and token
// responses to slog's default when GOOGLE_SDK_GO_LOGGING_LEVEL is set.
var discardSlog = slog.New(slog.DiscardHandler)

// credentialError is a failure to get a token: the key file is missing or
// unusable, or the token endpoint refused. The Checker reports it as
// Unauthorized; its message never quotes the file.
type credentialError struct{ err error }

func (e *credentialError) Error() string { return e.err.Error() }
func (e *credentialError) Unwrap() error { return e.err }

// credentialSource hands out tokens from the entry's key file or from
// Application Default Credentials. A key file (and the file
// GOOGLE_APPLICATION_CREDENTIALS names) is checked on every token request
// and re-read when it changed, so a rotated Secret is used from its next
// request on; ADC's other sources (workload identity, the metadata server)
// refresh themselves. Nothing is read or fetched before the first request.
type credentialSource struct {
	// file is the entry's credentialsFile; empty means ADC.
	file string
	// client fetches tokens.
	client *http.Client

	mu sync.Mutex
	// loaded is what the current credentials were built from: the file's
	// path, its modification time and size, and its content's digest.
	loaded fileStamp
	creds  *auth.Credentials
	// detect builds ADC (a test seam; credentials.DetectDefault).
	detect func(*credentials.DetectOptions) (*auth.Credentials, error)
}

type fileStamp struct {
	path    string
	modTime time.Time
	size    int64
	sum     [sha256.Size]byte
}

func newCredentialSource(file string, client *http.Client) *credentialSource {
	return &credentialSource{file: file, client: client, detect: credentials.DetectDefault}
}

// describe says where the credentials come from, for the Checker's details
// and log lines (never their content).
func (s *credentialSource) describe() string {
	if s.file != "" {
		return "key file " + s.file
	}
	if f := os.Getenv(envCredentials); f != "" {
		return "application default credentials (" + envCredentials + "=" + f + ")"
	}
	return "application default credentials"
}

func (s *credentialSource) options() *credentials.DetectOptions {
	return &credentials.DetectOptions{
		Scopes: []string{computeScope}, Client: s.client, Logger: discardSlog,
		// Synchronous refresh: no goroutine outlives a call.
		DisableAsyncRefresh: true,
	}
}

// current returns the credentials to use now, (re)loading the key file
// when it is new or changed.
func (s *credentialSource) current() (*auth.Credentials, error) {
	file, typed := s.file, true
	if file == "" {
		file, typed = os.Getenv(envCredentials), false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if file == "" {
		// ADC without a file: workload identity or the metadata server,
		// which refresh their own tokens.
		if s.creds == nil || s.loaded.path != "" {
			creds, err := s.detect(s.options())
			if err != nil {
				return nil, &credentialError{provider.Errorf(provider.ErrPermanent,
					"no application default credentials: set credentialsFile in the entry, mount a key and set %s, or run with workload identity (%v)", envCredentials, err)}
			}
			s.creds, s.loaded = creds, fileStamp{}
		}
		return s.creds, nil
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, &credentialError{keyFileError(file, err)}
	}
	if s.creds != nil && s.loaded.path == file && s.loaded.modTime.Equal(fi.ModTime()) && s.loaded.size == fi.Size() {
		return s.creds, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &credentialError{keyFileError(file, err)}
	}
	defer clear(data) // the key lives no longer than the parse
	sum := sha256.Sum256(data)
	if s.creds != nil && s.loaded.path == file && s.loaded.sum == sum {
		s.loaded.modTime, s.loaded.size = fi.ModTime(), fi.Size()
		return s.creds, nil
	}
	var creds *auth.Credentials
	if typed {
		// The entry's key file may only be a service account key: other
		// credential types can name URLs or programs to run.
		creds, err = credentials.NewCredentialsFromJSON(credentials.ServiceAccount, bytes.Clone(data), s.options())
	} else {
		opts := s.options()
		opts.CredentialsJSON = bytes.Clone(data)
		creds, err = s.detect(opts)
	}
	if err != nil {
		// The parser's text is not passed on: it can quote what it read.
		return nil, &credentialError{provider.Errorf(provider.ErrPermanent,
			"credentials file %s is not a usable %s (JSON with the private key, as `gcloud iam service-accounts keys create` writes it)", file, keyKind(typed))}
	}
	s.creds = creds
	s.loaded = fileStamp{path: file, modTime: fi.ModTime(), size: fi.Size(), sum: sum}
	return creds, nil
}

func keyKind(typed bool) string {
	if typed {
		return "service account key"
	}
	return "credentials file"
}

func keyFileError(file string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return provider.Errorf(provider.ErrPermanent,
			"credentials file %s does not exist (is the gcp-credentials Secret mounted? see docs/gcp-provider.md)", file)
	case errors.Is(err, fs.ErrPermission):
		return provider.Errorf(provider.ErrPermanent, "credentials file %s is not readable by the operator", file)
	default:
		return provider.Errorf(provider.ErrTransient, "reading credentials file %s: %v", file, err)
	}
}

// token returns a valid token for a request made with ctx.
func (s *credentialSource) token(ctx context.Context) (*auth.Token, error) {
	creds, err := s.current()
	if err != nil {
		return nil, err
	}
	tok, err := creds.Token(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, provider.Errorf(provider.ErrTransient, "getting a token: %w", ctx.Err())
		}
		// A refused key (revoked, disabled, wrong project) is retried:
		// the file is re-read, so a rotated Secret recovers without a
		// spec change. The auth library's text names the token
		// endpoint's answer, never the key.
		return nil, &credentialError{provider.Errorf(provider.ErrTransient, "getting a token with %s: %v", s.describe(), err)}
	}
	return tok, nil
}

// authTransport adds the bearer token to every request.
type authTransport struct {
	src  *credentialSource
	next http.RoundTripper
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := t.src.token(req.Context())
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	out := req.Clone(req.Context())
	typ := tok.Type
	if typ == "" {
		typ = "Bearer"
	}
	out.Header.Set("Authorization", typ+" "+tok.Value)
	return t.next.RoundTrip(out)
}

func (t *authTransport) String() string { return fmt.Sprintf("gcp auth (%s)", t.src.describe()) }
