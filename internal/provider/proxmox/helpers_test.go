package proxmox

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

const testInstallation = "inst-a"

type env struct {
	fake *fakepve.Server
	p    *Provider
	cfg  Config
	dir  string
}

func newEnv(t *testing.T, opts ...fakepve.Option) *env {
	t.Helper()
	fake := fakepve.New(opts...).Start()
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	tokenFile, caFile, err := fake.WriteCredentials(dir)
	must(t, err)
	cfg := Config{URL: fake.URL(), TokenFile: tokenFile, CAFile: caFile,
		Nodes: []string{"pve1"}, Templates: map[string]int{"debian-12": 9000}, ISOStorage: "local"}
	e := &env{fake: fake, cfg: cfg, dir: dir}
	e.p = e.newProvider(t, testInstallation)
	return e
}

func (e *env) newProvider(t *testing.T, inst string) *Provider {
	t.Helper()
	p, err := New("pve-test", e.cfg, provider.Options{InstallationID: inst})
	must(t, err)
	p.taskPoll = time.Millisecond
	p.execPoll = time.Millisecond
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func request(name, uid string) provider.CreateRequest {
	return provider.CreateRequest{Name: name, UID: uid, Port: 3128, CloudInit: provider.Sensitive("#cloud-config\n")}
}

// waitRunning polls Get until Running.
func waitRunning(t *testing.T, p *Provider, id string) provider.Instance {
	t.Helper()
	var in provider.Instance
	testenv.EventuallyNil(t, "VM "+id+" running", func() error {
		var err error
		in, err = p.Get(context.Background(), id)
		if err != nil {
			return err
		}
		if in.State != provider.StateRunning {
			return fmt.Errorf("state %s (%s)", in.State, in.Progress)
		}
		return nil
	})
	return in
}

func httpRequest(method, url, token string) (*http.Request, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", token)
	return req, nil
}

// logCtx is a ctx whose logger writes every tier to the returned lines
// (the provider logs from its own goroutines).
func logCtx(t *testing.T) (context.Context, *testenv.LogLines) {
	logs := &testenv.LogLines{}
	return logr.NewContext(t.Context(), logs.Logger(10)), logs
}
