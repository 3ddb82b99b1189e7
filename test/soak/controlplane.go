package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

const (
	// proxyNamespace holds the Proxies.
	proxyNamespace = "soak"
	// entryName is the providers config entry the Proxies name.
	entryName = "soaked"
	// installationID is the manager's --installation-id, marked on every
	// instance it makes.
	installationID = "soak"
)

type controlPlane struct {
	env        *testenv.Env
	kubeconfig string
	providers  string
}

func (c *controlPlane) client() client.Client { return c.env.Client }

func (s *soak) startControlPlane() error {
	var extra []testenv.Option
	if s.opts.provider == providerLibvirt {
		// The libvirt test host's namespace has no default route to
		// derive the advertise address from.
		extra = append(extra, testenv.WithAdvertiseAddress("127.0.0.1"))
	}
	env, err := childproc.StartControlPlane(s.tmp, s.opts.crdDir, "`make soak`", s.out.say, extra...)
	if err != nil {
		return err
	}
	s.cp = &controlPlane{env: env, kubeconfig: filepath.Join(s.tmp, "kubeconfig"), providers: filepath.Join(s.tmp, "providers.yaml")}
	if err := env.WriteKubeconfig(s.cp.kubeconfig); err != nil {
		return err
	}
	if err := os.WriteFile(s.cp.providers, []byte(s.backend.providersConfig()), 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range append([]string{proxyNamespace}, s.backend.namespaces()...) {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	return nil
}

// printer serialises the soak's lines; each carries the wall-clock time
// and the seconds since the start.
type printer struct {
	mu    sync.Mutex
	start time.Time
}

func newPrinter() *printer { return &printer{start: time.Now()} }

func (p *printer) say(format string, args ...any) {
	now := time.Now()
	line := fmt.Sprintf("%s [%6.1fs] %s\n", now.Format("15:04:05"), now.Sub(p.start).Seconds(), fmt.Sprintf(format, args...))
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = os.Stdout.WriteString(line)
}
