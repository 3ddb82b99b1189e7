package proxmox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// fixturesDir is the fake's copy of ../shared/recipes/proxmox/fixtures
// (fakepve's TestFixtures keeps it equal to what the fake answers).
const fixturesDir = "fakepve/testdata/fixtures"

type fixture struct {
	Response struct {
		Status int             `json:"status"`
		Reason string          `json:"reason"`
		Body   json.RawMessage `json:"body"`
	} `json:"response"`
}

func readFixture(t *testing.T, name string) fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, name))
	must(t, err)
	var f fixture
	must(t, json.Unmarshal(b, &f))
	return f
}

// Every captured error answer is classified once, by its text: a missing
// VM's 500 "does not exist" is NotFound, lock and QMP timeouts Transient,
// every 4xx Permanent; what PVE reports for a booting guest or a running
// VM is Transient (Get and Delete read those texts before the class). A
// fixture added without a row here fails the test.
func TestClassifyCapturedAnswers(t *testing.T) {
	want := map[string]struct {
		class error
		msg   string // in the error's text
	}{
		// Get reads these two as the guest's answer before the class
		// (readReport): not answering yet, not an error.
		"agent-file-read-missing.json":                     {provider.ErrTransient, "Agent error: failed to open file '/run/egress-proxy/report' (mode: 'r'): No such file or directory"},
		"agent-file-read-not-running.json":                 {provider.ErrTransient, "QEMU guest agent is not running"},
		"agent-network-get-interfaces-not-configured.json": {provider.ErrTransient, "No QEMU guest agent configured"},
		"agent-network-get-interfaces-not-running.json":    {provider.ErrTransient, "QEMU guest agent is not running"},
		"agent-network-get-interfaces-qmp-timeout.json":    {provider.ErrTransient, "got timeout"},
		"agent-network-get-interfaces-vm-not-running.json": {provider.ErrTransient, "VM 102 is not running"},
		"auth-no-ticket.json":                              {provider.ErrPermanent, "PVE 401: No ticket"},
		"auth-permission-denied.json":                      {provider.ErrPermanent, "VM.Audit"},
		"clone-config-file-exists.json":                    {provider.ErrTransient, "config file already exists"},
		"cluster-nextid-taken.json":                        {provider.ErrPermanent, "Parameter verification failed. (vmid: VM 101 already exists)"},
		"config-does-not-exist.json":                       {provider.ErrNotFound, "does not exist"},
		"delete-running.json":                              {provider.ErrTransient, "destroy failed"},
		"lock-timeout.json":                                {provider.ErrTransient, "got timeout"},
		"param-verification-failed.json":                   {provider.ErrPermanent, "Parameter verification failed. ("},
		// The storage's set-up, which Check reports (StorageNotFound) and an
		// admin fixes: a retry then succeeds, so not Permanent.
		"storage-upload-content-not-enabled.json": {provider.ErrTransient, "does not support 'iso' content"},
		"storage-upload-not-file-based.json":      {provider.ErrTransient, "can't upload to storage type 'lvmthin'"},
		"storage-upload-wrong-extension.json":     {provider.ErrPermanent, "(filename: wrong file extension)"},
	}
	files, err := filepath.Glob(filepath.Join(fixturesDir, "*.json"))
	must(t, err)
	if len(files) < 30 {
		t.Fatalf("%d fixtures in %s, want the captured set", len(files), fixturesDir)
	}
	seen := 0
	for _, path := range files {
		name := filepath.Base(path)
		f := readFixture(t, name)
		if f.Response.Status == 200 {
			continue
		}
		seen++
		w, ok := want[name]
		if !ok {
			t.Errorf("%s (%d %s) has no row: classify it", name, f.Response.Status, f.Response.Reason)
			continue
		}
		err := classifyAPI(decodeError(f.Response.Status, fmt.Sprintf("%d %s", f.Response.Status, f.Response.Reason), f.Response.Body))
		if !errors.Is(err, w.class) || !strings.Contains(err.Error(), w.msg) {
			t.Errorf("%s: %v (%s), want %s with %q", name, err, provider.ClassName(err), provider.ClassName(w.class), w.msg)
		}
	}
	if seen != len(want) {
		t.Errorf("%d error fixtures, %d rows: a row names no fixture", seen, len(want))
	}
}

// Answers the fixtures do not capture, as pveproxy and PVE's handlers
// write them: the proxy's 595/596 for an unreachable node, capacity
// answers (no free VMID, a full storage) as ErrQuotaExceeded.
func TestClassifyAPI(t *testing.T) {
	for _, tc := range []struct {
		status     int
		statusLine string
		body       string
		class      error
	}{
		{595, "595 Connection refused", ``, provider.ErrTransient},
		{596, "596 Connection timed out", ``, provider.ErrTransient},
		{401, "401 authentication failure", ``, provider.ErrPermanent},
		{403, "403 Permission check failed", `{"data":null,"message":"Permission check failed (/storage/local, Datastore.AllocateTemplate)\n"}`, provider.ErrPermanent},
		{501, "501 Method 'GET /x' not implemented", `{"data":null,"message":"Method 'GET /x' not implemented\n"}`, provider.ErrPermanent},
		{500, "500 unable to get any free VMID in range [100, 999999999]", `{"data":null,"message":"unable to get any free VMID in range [100, 999999999]\n"}`, provider.ErrQuotaExceeded},
		{500, "500 error", `{"data":null,"message":"clone failed: lvcreate 'pve/vm-20001-disk-0' error:   Volume group \"pve\" has insufficient free space (10 extents): 768 required.\n"}`, provider.ErrQuotaExceeded},
		{500, "500 error", `{"data":null,"message":"import failed: cp: error writing '/var/lib/vz/template/iso/x.iso': No space left on device\n"}`, provider.ErrQuotaExceeded},
		{500, "500 Configuration file 'nodes/pve2/qemu-server/20001.conf' does not exist", ``, provider.ErrNotFound},
		{500, "500 Internal Server Error", `not json`, provider.ErrTransient},
	} {
		err := classifyAPI(decodeError(tc.status, tc.statusLine, []byte(tc.body)))
		if !errors.Is(err, tc.class) {
			t.Errorf("%s %s: %v is %s, want %s", tc.statusLine, tc.body, err, provider.ClassName(err), provider.ClassName(tc.class))
		}
	}
}

// Task exit statuses, the fixtures' and PVE's texts: OK and WARNINGS: n
// are success; capacity is ErrQuotaExceeded; a lock timeout Transient; a
// VM gone mid-task NotFound.
func TestClassifyTask(t *testing.T) {
	exit := func(name string) string {
		var d struct {
			Data struct {
				ExitStatus string `json:"exitstatus"`
			} `json:"data"`
		}
		must(t, json.Unmarshal(readFixture(t, name).Response.Body, &d))
		return d.Data.ExitStatus
	}
	for _, tc := range []struct {
		exit  string
		class error // nil: success
	}{
		{exit("task-status-ok.json"), nil},
		{exit("task-status-warnings.json"), nil},
		{exit("task-status-failed-clone.json"), provider.ErrTransient},
		{exit("task-status-failed-start.json"), provider.ErrTransient},
		{"can't lock file '/var/lock/qemu-server/lock-20001.conf' - got timeout", provider.ErrTransient},
		{"import failed: cp: error writing '/var/lib/vz/template/iso/x.iso': No space left on device", provider.ErrQuotaExceeded},
		{"clone failed: not enough free space on storage 'local-lvm'", provider.ErrQuotaExceeded},
		{"Configuration file 'nodes/pve1/qemu-server/20001.conf' does not exist", provider.ErrNotFound},
		{"unexpected status", provider.ErrTransient},
	} {
		err := classifyTask("clone", tc.exit)
		switch {
		case tc.class == nil && err != nil:
			t.Errorf("task %q: %v, want success", tc.exit, err)
		case tc.class != nil && !errors.Is(err, tc.class):
			t.Errorf("task %q: %v (%s), want %s", tc.exit, err, provider.ClassName(err), provider.ClassName(tc.class))
		}
	}
}

// A certificate PVE's is not verified by is Permanent (a retry meets the
// same certificate); the rest of the transport's failures, and
// cancellation, are Transient.
func TestClassifyTransport(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx   context.Context
		err   error
		class error
	}{
		{context.Background(), &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, provider.ErrPermanent},
		{context.Background(), fmt.Errorf("Get: %w", x509.HostnameError{Host: "pve"}), provider.ErrPermanent},
		{context.Background(), x509.CertificateInvalidError{Reason: x509.Expired}, provider.ErrPermanent},
		{context.Background(), &net.OpError{Op: "dial", Err: errors.New("connection refused")}, provider.ErrTransient},
		{cancelled, context.Canceled, provider.ErrTransient},
	} {
		if err := classifyTransport(tc.ctx, tc.err); !errors.Is(err, tc.class) {
			t.Errorf("%v: %s, want %s", tc.err, provider.ClassName(err), provider.ClassName(tc.class))
		}
	}
}

// Over the real client: a CA that did not sign pveproxy's certificate is
// a Permanent error naming TLS.
func TestUntrustedCertificateIsPermanent(t *testing.T) {
	e := newEnv(t)
	must(t, os.WriteFile(e.cfg.CAFile, selfSignedPEM(t), 0o600))
	_, err := e.p.ListByTag(context.Background())
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "TLS verification") {
		t.Fatalf("ListByTag with the wrong CA = %v, want Permanent naming TLS verification", err)
	}
}
