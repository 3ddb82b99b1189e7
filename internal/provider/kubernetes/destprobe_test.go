package kubernetes

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Base-code probe (run in a fresh network namespace with only lo up).
func TestDestinationsDeniedByDefault_RealSquid(t *testing.T) {
	bin := squidBinary(t)
	runDir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(runDir, 0o777); err != nil {
		t.Fatal(err)
	}
	sp := squidParams{ListenAddr: "127.0.0.1", Port: freePort(t),
		Ranges:  []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
		PidFile: filepath.Join(runDir, "squid.pid"), CoredumpDir: runDir, EffectiveUser: "proxy"}
	for d := runDir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o777)
	}
	conf := filepath.Join(runDir, "squid.conf")
	if err := os.WriteFile(conf, []byte(squidConf(sp)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-N", "-f", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { cancel(); <-exited }()
	proxyAddr := net.JoinHostPort(sp.ListenAddr, strconv.Itoa(int(sp.Port)))
	if !waitListening(proxyAddr, exited) {
		t.Fatalf("squid never listened on %s", proxyAddr)
	}
	for _, target := range []string{"http://127.0.0.1:9/", "http://10.0.0.1/", "http://192.168.1.1/", "http://100.64.0.1/", "http://[fd00::1]/"} {
		if code, body := fetchVia(t, proxyAddr, "127.0.0.2", target); code != http.StatusForbidden {
			t.Errorf("fetch %s through the generated config: %d, want 403 (denied destination); body %.80q", target, code, body)
		}
	}
}
