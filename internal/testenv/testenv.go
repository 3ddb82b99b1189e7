// Package testenv is the one way tests start a real control plane: a
// kube-apiserver and an etcd built from source (hack/build-control-plane.sh),
// found through KUBEBUILDER_ASSETS, with this project's CRDs installed.
//
// A package whose tests share one control plane starts it in TestMain with
// New and stops it with Stop; a single test uses Start.
package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// modulePath identifies this repository's go.mod while walking up, so a
// nested tools module (hack/tools/*) is never mistaken for the root.
const modulePath = "github.com/egress-proxies-operator/egress-proxies-operator"

// AssetsEnv names the directory holding kube-apiserver and etcd.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// startTimeoutEnv is envtest's own knob; we only raise its default.
const startTimeoutEnv = "KUBEBUILDER_CONTROLPLANE_START_TIMEOUT"

// defaultStartTimeout replaces envtest's 20s, which a 2-core machine busy
// compiling can exceed on a cold kube-apiserver start.
const defaultStartTimeout = 90 * time.Second

// errNoAssets is the message a developer sees when running `go test`
// directly; it says how to get the binaries.
const errNoAssets = "KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver and etcd"

// Scheme knows client-go's built-in types, apiextensions/v1 (so tests can
// read installed CRDs) and this project's api/v1alpha1.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(v1alpha1.AddToScheme(Scheme))
	utilruntime.Must(ipamv1.AddToScheme(Scheme))
}

// Env is a running control plane.
type Env struct {
	// Config is an admin (system:masters) config for the API server.
	Config *rest.Config
	// Client is a controller-runtime client on Config using Scheme; it reads
	// straight from the API server (no cache).
	Client client.Client
	// Environment is the underlying envtest environment.
	Environment *envtest.Environment
	// ServerVersion is the API server's git version, e.g. "v1.37.2".
	ServerVersion string

	mu         sync.Mutex
	kubeconfig []byte // admin user's kubeconfig, made on first use
	stopped    bool
}

// Option changes how New starts the control plane.
type Option func(*options)

type options struct {
	assetsDir string
	crdPaths  []string
	dataDir   string
	logf      func(format string, args ...any)
	advertise string
	apiArgs   [][2]string
}

// WithAssetsDir takes kube-apiserver and etcd from dir instead of
// $KUBEBUILDER_ASSETS.
func WithAssetsDir(dir string) Option {
	return func(o *options) { o.assetsDir = dir }
}

// WithCRDPaths installs the CRDs from these files or directories instead of
// <repo>/config/crd/bases and Cluster API's IPAM types; with no paths, none are
// installed.
func WithCRDPaths(paths ...string) Option {
	return func(o *options) { o.crdPaths = append(make([]string, 0, len(paths)), paths...) }
}

// WithDataDir keeps etcd's data in dir/etcd and the kube-apiserver's
// certificates in dir/kube-apiserver, instead of temporary directories of
// envtest's own. dir must exist; the caller removes it after Stop. Both
// processes then name dir on their command lines, so a program that runs
// the control plane (cmd/demo) can tell its own processes from any other.
func WithDataDir(dir string) Option {
	return func(o *options) { o.dataDir = dir }
}

// WithAdvertiseAddress sets kube-apiserver's --advertise-address, with no
// endpoint reconciler (which refuses a loopback address: the tests need no
// kubernetes Service endpoints). Without it kube-apiserver derives one from
// the default route, and refuses to start where there is none (the libvirt
// test host's namespace, which has no route out).
func WithAdvertiseAddress(ip string) Option {
	return func(o *options) { o.advertise = ip }
}

// WithAPIServerArg sets one more kube-apiserver flag (e.g.
// service-cluster-ip-range, for a test that fills the Service range).
func WithAPIServerArg(name, value string) Option {
	return func(o *options) { o.apiArgs = append(o.apiArgs, [2]string{name, value}) }
}

// WithLogf sends New's progress lines (server version, start time) to logf;
// the default is the standard logger, Start uses t.Logf.
func WithLogf(logf func(format string, args ...any)) Option {
	return func(o *options) { o.logf = logf }
}

// New starts kube-apiserver and etcd, installs the CRDs and returns the
// running environment. The caller must Stop it.
func New(opts ...Option) (*Env, error) {
	o := options{logf: log.Printf}
	for _, opt := range opts {
		opt(&o)
	}

	apiserver, etcd, err := findBinaries(o.assetsDir)
	if err != nil {
		return nil, err
	}
	crdPaths := o.crdPaths
	if crdPaths == nil {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		// Cluster API's IPAM types too, as a cluster that serves address
		// pools has them (config/components/ipam-crds).
		crdPaths = []string{filepath.Join(root, "config", "crd", "bases"), filepath.Join(root, "config", "components", "ipam-crds")}
	}

	te := &envtest.Environment{
		CRDDirectoryPaths:     crdPaths,
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme,
	}
	// Explicit paths, so a stray TEST_ASSET_* or a different
	// KUBEBUILDER_ASSETS cannot pick other binaries than the ones checked.
	te.ControlPlane.APIServer = &envtest.APIServer{Path: apiserver}
	te.ControlPlane.Etcd = &envtest.Etcd{Path: etcd}
	if o.dataDir != "" {
		etcdDir, certDir := filepath.Join(o.dataDir, "etcd"), filepath.Join(o.dataDir, "kube-apiserver")
		for _, dir := range []string{etcdDir, certDir} {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return nil, fmt.Errorf("control plane data directory: %w", err)
			}
		}
		te.ControlPlane.Etcd.DataDir, te.ControlPlane.APIServer.CertDir = etcdDir, certDir
	}
	if o.advertise != "" {
		args := te.ControlPlane.APIServer.Configure()
		args.Set("advertise-address", o.advertise)
		args.Set("endpoint-reconciler-type", "none")
	}
	for _, a := range o.apiArgs {
		te.ControlPlane.APIServer.Configure().Set(a[0], a[1])
	}
	if os.Getenv(startTimeoutEnv) == "" {
		te.ControlPlaneStartTimeout = defaultStartTimeout
	}

	began := time.Now()
	cfg, err := te.Start()
	if err != nil {
		// Start can fail after the processes are up (CRD install); stop
		// them so a failed test run leaves no kube-apiserver behind.
		if stopErr := te.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping after failed start: %w", stopErr))
		}
		return nil, fmt.Errorf("starting the control plane (kube-apiserver %s): %w", apiserver, err)
	}

	e := &Env{Config: cfg, Environment: te}
	if err := e.init(); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	o.logf("testenv: kube-apiserver %s at %s, CRDs installed: %s (ready in %s)",
		e.ServerVersion, cfg.Host, crdNames(te.CRDs), time.Since(began).Round(100*time.Millisecond))
	return e, nil
}

func (e *Env) init() error {
	dc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the server version: %w", err)
	}
	e.ServerVersion = v.GitVersion
	c, err := client.New(e.Config, client.Options{Scheme: Scheme})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	e.Client = c
	return nil
}

// Start is New for one test: it stops the control plane when the test
// ends and fails the test if it cannot start.
func Start(t testing.TB) *Env {
	t.Helper()
	e, err := New(WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	return e
}

// Stop stops kube-apiserver and etcd. A second call does nothing.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	return e.Environment.Stop()
}

// WriteKubeconfig writes a kubeconfig for an admin user (system:masters) to
// path, for processes the test runs (the manager, kubectl).
func (e *Env) WriteKubeconfig(path string) error {
	kc, err := e.adminKubeconfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, kc, 0o600)
}

// KubeconfigFile writes the admin kubeconfig into the test's temporary
// directory and returns its path.
func (e *Env) KubeconfigFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.WriteKubeconfig(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// adminKubeconfig provisions the user once: every AddUser issues a new
// client certificate, which is pointless for the same identity.
func (e *Env) adminKubeconfig() ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kubeconfig != nil {
		return e.kubeconfig, nil
	}
	u, err := e.Environment.AddUser(envtest.User{Name: "testenv-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding the admin user: %w", err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	e.kubeconfig = kc
	return kc, nil
}

// findBinaries returns the paths of kube-apiserver and etcd in dir, or in
// $KUBEBUILDER_ASSETS when dir is empty.
func findBinaries(dir string) (apiserver, etcd string, err error) {
	if dir == "" {
		dir = os.Getenv(AssetsEnv)
	}
	if dir == "" {
		return "", "", errors.New(errNoAssets)
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return "", "", fmt.Errorf("%s=%s has no executable %s: run the tests with `make test`, which builds kube-apiserver and etcd", AssetsEnv, dir, name)
		}
	}
	return filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "etcd"), nil
}

// RepoRoot returns the directory of this repository's go.mod. It walks up
// from the working directory (go test runs in the package's directory) and
// falls back to this source file's location, for binaries run elsewhere.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := goruntime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			if isRepoRoot(dir) {
				return dir, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return "", fmt.Errorf("no go.mod of module %s above %s", modulePath, strings.Join(starts, " or "))
}

func isRepoRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if mod, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(mod), `"`) == modulePath
		}
	}
	return false
}

func crdNames(crds []*apiextensionsv1.CustomResourceDefinition) string {
	names := make([]string, 0, len(crds))
	for _, c := range crds {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// Main runs a package's tests against one control plane shared by all of
// them: it starts it into *env, runs the tests, stops it and exits. Call it
// from TestMain.
func Main(m *testing.M, env **Env) {
	// The managers the tests start log through controller-runtime's
	// logger; left unset, its first use prints a stack ("log.SetLogger
	// was never called") into the test output, where it reads as a crash.
	ctrllog.SetLogger(logr.Discard())
	e, err := New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Namespace makes a namespace of its own for one test (named prefix-xxxxx),
// so tests sharing the API server never collide on names.
func (e *Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}
