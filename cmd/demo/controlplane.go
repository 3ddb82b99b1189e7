package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

// controlPlane is the kube-apiserver and etcd of one run, started the way
// the tests start theirs, with the CRDs installed and an admin kubeconfig
// for the manager and for kubectl.
type controlPlane struct {
	out        *printer
	env        *testenv.Env
	assets     string // where kube-apiserver, etcd (and kubectl) are
	kubeconfig string
}

// client reads and writes as the admin, straight from the API server.
func (c *controlPlane) client() client.Client { return c.env.Client }

func (d *demo) startControlPlane(context.Context) error {
	env, err := childproc.StartControlPlane(d.tmp, d.opts.crdDir, "`make demo` builds kube-apiserver and etcd and", d.out.say)
	if err != nil {
		return err
	}
	assets := os.Getenv(testenv.AssetsEnv)
	d.cp = &controlPlane{out: d.out, env: env, assets: assets, kubeconfig: filepath.Join(d.tmp, "kubeconfig")}
	return env.WriteKubeconfig(d.cp.kubeconfig)
}

func (c *controlPlane) stop() error {
	started := time.Now()
	if err := c.env.Stop(); err != nil {
		return err
	}
	c.out.say("control plane stopped in %.1fs", time.Since(started).Seconds())
	return nil
}

// kubectl is the kubectl built next to the control plane (make demo builds
// it), or the one on PATH.
func (c *controlPlane) kubectl() string {
	if k := filepath.Join(c.assets, "kubectl"); isExecutable(k) {
		return k
	}
	return "kubectl"
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
