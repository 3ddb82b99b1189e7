package childproc

import (
	"fmt"
	"os"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// StartControlPlane starts the kube-apiserver and etcd the tests use
// (internal/testenv, binaries from KUBEBUILDER_ASSETS) with the CRDs in
// crdDir installed. Their data lives under dir, so a leftover check knows
// the run's processes by their command lines. how says, in an error, which
// make target sets KUBEBUILDER_ASSETS; extra are more testenv options.
func StartControlPlane(dir, crdDir, how string, logf func(format string, args ...any), extra ...testenv.Option) (*testenv.Env, error) {
	assets := os.Getenv(testenv.AssetsEnv)
	logf("starting kube-apiserver and etcd from %s", assets)
	env, err := testenv.New(append([]testenv.Option{
		testenv.WithAssetsDir(assets),
		testenv.WithCRDPaths(crdDir),
		testenv.WithDataDir(dir),
		testenv.WithLogf(logf),
	}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("%w (%s sets %s)", err, how, testenv.AssetsEnv)
	}
	return env, nil
}
