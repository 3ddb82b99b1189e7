package nocloud

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// captureOutput runs f with the process's stdout, stderr, the standard
// logger and slog's default handler captured, and returns all they got.
func captureOutput(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = w, w
	var logged bytes.Buffer
	logOut, logFlags := log.Writer(), log.Flags()
	log.SetOutput(&logged)
	slogDefault := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	func() {
		defer func() {
			os.Stdout, os.Stderr = stdout, stderr
			log.SetOutput(logOut)
			log.SetFlags(logFlags)
			slog.SetDefault(slogDefault)
			_ = w.Close()
		}()
		f()
	}()
	return string(<-done) + logged.String()
}

// The seed's files are secrets: no error, no log line and no printout of
// a failed or successful build carries them, and no scratch file outlives
// the build.
func TestNoCloudSeed_SecretsNeverInErrorsOrLogs(t *testing.T) {
	const sentinel = "SENTINEL-password-0xC0FFEE"
	secret := func(s Seed) Seed {
		s.UserData = "#cloud-config\npassword: " + sentinel + "\n"
		s.NetworkConfig = "version: 2 # " + sentinel + "\n"
		s.VendorData = "#!/bin/sh\necho " + sentinel + "\n"
		return s
	}
	tests := []struct {
		name    string
		seed    Seed
		tmpdir  func(t *testing.T) string
		wantErr bool
	}{
		{name: "success", seed: secret(Seed{InstanceID: "i", LocalHostname: "h"})},
		{name: "bad instance-id", seed: secret(Seed{InstanceID: "a/b", LocalHostname: "h"}), wantErr: true},
		{name: "bad hostname", seed: secret(Seed{InstanceID: "i", LocalHostname: "bad_host"}), wantErr: true},
		{name: "no scratch space", seed: secret(Seed{InstanceID: "i", LocalHostname: "h"}),
			tmpdir: func(t *testing.T) string { return filepath.Join(t.TempDir(), "missing") }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			if tt.tmpdir != nil {
				tmp = tt.tmpdir(t)
			}
			t.Setenv("TMPDIR", tmp)
			var (
				img []byte
				err error
			)
			out := captureOutput(t, func() { img, err = Build(tt.seed) })
			if tt.wantErr != (err != nil) {
				t.Fatalf("Build error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
					if strings.Contains(s, sentinel) {
						t.Errorf("the error carries the secret: %s", s)
					}
				}
			} else if !bytes.Contains(img, []byte(sentinel)) {
				t.Fatal("the image does not hold the sentinel: this test would not see a leak")
			}
			if strings.Contains(out, sentinel) {
				t.Errorf("output or a log line carries the secret:\n%s", out)
			}
			if tt.tmpdir == nil {
				left, err := os.ReadDir(tmp)
				if err != nil {
					t.Fatal(err)
				}
				if len(left) != 0 {
					t.Errorf("Build left %d entries in TMPDIR: %v", len(left), left)
				}
			}
		})
	}
}
