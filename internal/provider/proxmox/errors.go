package proxmox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// apiError is PVE's answer to a failed request: the status and the
// message (the body's, or the reason phrase when there is none, as on 401).
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("PVE %d: %s", e.Status, e.Message) }

// decodeError reads PVE's error answer: the body's message, else the
// reason phrase (pve-http-server's own errors, such as 401, have no body),
// with a 400's per-parameter errors appended in key order.
func decodeError(status int, statusLine string, body []byte) *apiError {
	var env struct {
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	_ = json.Unmarshal(body, &env)
	msg := strings.TrimSpace(env.Message)
	if msg == "" {
		_, msg, _ = strings.Cut(statusLine, " ")
	}
	if len(env.Errors) > 0 {
		keys := make([]string, 0, len(env.Errors))
		for k := range env.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ": " + strings.TrimSpace(env.Errors[k])
		}
		msg += " (" + strings.Join(parts, "; ") + ")"
	}
	return &apiError{Status: status, Message: msg}
}

// classifyTransport: TLS verification failures are Permanent (a retry
// meets the same certificate); the rest, cancellation included, Transient.
func classifyTransport(ctx context.Context, err error) error {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return provider.Errorf(provider.ErrPermanent, "TLS verification of pveproxy failed: %w", err)
	}
	if ctx.Err() != nil {
		return provider.Errorf(provider.ErrTransient, "PVE request: %w", ctx.Err())
	}
	return provider.Errorf(provider.ErrTransient, "PVE request: %w", err)
}

// classifyAPI classifies PVE's answers once, by PVE's captured answer texts.
func classifyAPI(e *apiError) error {
	m := e.Message
	switch {
	case isCapacity(m):
		return provider.Errorf(provider.ErrQuotaExceeded, "%w", e)
	case strings.Contains(m, "can't clone VM to node"):
		// "(VM uses local storage)": the same clone fails until someone
		// moves the template's disks to shared storage.
		return provider.Errorf(provider.ErrPermanent, "%w (a clone to another node needs the template's disks on shared storage, or a template on that node)", e)
	case e.Status == 500 && strings.Contains(m, "does not exist"):
		return provider.Errorf(provider.ErrNotFound, "%w", e)
	case strings.Contains(m, "got timeout"), e.Status == 595, e.Status == 596:
		return provider.Errorf(provider.ErrTransient, "%w", e)
	case e.Status >= 400 && e.Status < 500, e.Status == 501:
		return provider.Errorf(provider.ErrPermanent, "%w", e)
	default:
		return provider.Errorf(provider.ErrTransient, "%w", e)
	}
}

func isCapacity(m string) bool {
	return strings.Contains(m, "No space left on device") || strings.Contains(m, "not enough free space") ||
		strings.Contains(m, "insufficient free space") || strings.Contains(m, "unable to get any free VMID")
}

// classifyTask classifies a task's exit status; WARNINGS: n is success.
func classifyTask(what, exit string) error {
	if exit == "OK" || strings.HasPrefix(exit, "WARNINGS:") {
		return nil
	}
	e := &apiError{Status: 500, Message: exit}
	switch {
	case isCapacity(exit):
		return provider.Errorf(provider.ErrQuotaExceeded, "%s task: %w", what, e)
	case strings.Contains(exit, "got timeout"):
		return provider.Errorf(provider.ErrTransient, "%s task: %w", what, e)
	case strings.Contains(exit, "does not exist"), strings.Contains(exit, "unable to find configuration file"):
		return provider.Errorf(provider.ErrNotFound, "%s task: %w", what, e)
	default:
		return provider.Errorf(provider.ErrTransient, "%s task: %w", what, e)
	}
}
