package testenv

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// env is shared by the tests that need a control plane; starting one
// costs seconds.
var env *Env

func TestMain(m *testing.M) {
	Main(m, &env)
}

func TestServerVersion(t *testing.T) {
	t.Logf("kube-apiserver %s", env.ServerVersion)
	// v0.0.0-master means the build lost its -ldflags version stamp.
	if !strings.HasPrefix(env.ServerVersion, "v1.") {
		t.Fatalf("ServerVersion = %q, want a v1.x release", env.ServerVersion)
	}
}

func TestCRDsInstalled(t *testing.T) {
	for _, name := range []string{"proxies.egress.proxy-operator.dev", "providerhealths.egress.proxy-operator.dev"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatalf("get CRD %s: %v", name, err)
		}
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("CRD %s not Established: %+v", name, crd.Status.Conditions)
		}
	}
	// The client's scheme knows our kinds: a list round-trips.
	if err := env.Client.List(t.Context(), &v1alpha1.ProxyList{}); err != nil {
		t.Fatalf("list proxies: %v", err)
	}
}

func TestKubeconfigFileIsAdmin(t *testing.T) {
	path := env.KubeconfigFile(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatalf("kubeconfig does not load: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// Ask the API server who the kubeconfig authenticates as.
	review := &authnv1.SelfSubjectReview{}
	if err := c.Create(t.Context(), review); err != nil {
		t.Fatalf("self subject review: %v", err)
	}
	u := review.Status.UserInfo
	if u.Username != "testenv-admin" || !slices.Contains(u.Groups, "system:masters") {
		t.Fatalf("kubeconfig user = %q groups %v, want testenv-admin in system:masters", u.Username, u.Groups)
	}

	// A second file carries the same identity: the user is provisioned once.
	other := filepath.Join(t.TempDir(), "again")
	if err := env.WriteKubeconfig(other); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(data) {
		t.Error("WriteKubeconfig wrote a different kubeconfig the second time")
	}
}

func TestCountingConfigCountsWrites(t *testing.T) {
	ctx := t.Context()
	cfg, counter := CountingConfig(env.Config)
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatal(err)
	}

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "counted"},
		Data:       map[string]string{"a": "1"},
	}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data["a"] = "2"
	if err := c.Patch(ctx, cm, patch); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}

	if got := counter.Writes(); got != 3 {
		t.Errorf("Writes() = %d, want 3; requests: %+v", got, counter.Requests())
	}
	want := map[string]int{"POST configmaps": 1, "PATCH configmaps": 1, "DELETE configmaps": 1}
	if got := counter.WritesBy(); !maps.Equal(got, want) {
		t.Errorf("WritesBy() = %v, want %v", got, want)
	}
	var gets int
	for _, r := range counter.Requests() {
		if r.Method == "GET" && r.Resource == "configmaps" {
			gets++
			if r.Namespace != "default" || r.Name != "counted" || r.StatusCode != 200 {
				t.Errorf("GET recorded as %+v", r)
			}
		}
	}
	if gets != 1 {
		t.Errorf("recorded %d GETs of the ConfigMap, want 1", gets)
	}

	counter.Reset()
	if n := counter.Writes(); n != 0 || len(counter.Requests()) != 0 {
		t.Errorf("after Reset: %d writes, %d requests", n, len(counter.Requests()))
	}

	// The original config is left alone.
	if env.Config.WrapTransport != nil {
		t.Error("CountingConfig changed the config it was given")
	}
}

func TestCountingConfigSubresourceAndFailures(t *testing.T) {
	ctx := t.Context()
	cfg, counter := CountingConfig(env.Config)
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "counted"},
		Spec:       v1alpha1.ProxySpec{Provider: "local"},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	p.Status.Phase = v1alpha1.PhasePending
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A refused write is still a round trip and is counted.
	dup := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "counted"},
		Spec:       v1alpha1.ProxySpec{Provider: "local"},
	}
	if err := c.Create(ctx, dup); err == nil {
		t.Fatal("creating a duplicate succeeded")
	}

	want := map[string]int{"POST proxies": 2, "PUT proxies/status": 1}
	if got := counter.WritesBy(); !maps.Equal(got, want) {
		t.Errorf("WritesBy() = %v, want %v", got, want)
	}
	reqs := counter.Requests()
	last := reqs[len(reqs)-1]
	if last.StatusCode != 409 || last.Group != v1alpha1.GroupVersion.Group {
		t.Errorf("duplicate create recorded as %+v, want a 409 in our group", last)
	}
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		method, path string
		want         Request
		key          string
	}{
		{"POST", "/api/v1/namespaces/default/configmaps",
			Request{Version: "v1", Namespace: "default", Resource: "configmaps"}, "POST configmaps"},
		{"PATCH", "/apis/egress.proxy-operator.dev/v1alpha1/namespaces/ns/proxies/p/status",
			Request{Group: "egress.proxy-operator.dev", Version: "v1alpha1", Namespace: "ns", Resource: "proxies", Name: "p", Subresource: "status"}, "PATCH proxies/status"},
		{"PUT", "/apis/egress.proxy-operator.dev/v1alpha1/providerhealths/gcp/status",
			Request{Group: "egress.proxy-operator.dev", Version: "v1alpha1", Resource: "providerhealths", Name: "gcp", Subresource: "status"}, "PUT providerhealths/status"},
		{"POST", "/apis/events.k8s.io/v1/namespaces/default/events",
			Request{Group: "events.k8s.io", Version: "v1", Namespace: "default", Resource: "events"}, "POST events"},
		{"GET", "/api/v1/namespaces",
			Request{Version: "v1", Resource: "namespaces"}, "GET namespaces"},
		{"GET", "/api/v1/namespaces/kube-system",
			Request{Version: "v1", Resource: "namespaces", Name: "kube-system"}, "GET namespaces"},
		{"PUT", "/api/v1/namespaces/gone/finalize",
			Request{Version: "v1", Resource: "namespaces", Name: "gone", Subresource: "finalize"}, "PUT namespaces/finalize"},
		{"GET", "/api/v1/namespaces/default/pods/p/log",
			Request{Version: "v1", Namespace: "default", Resource: "pods", Name: "p", Subresource: "log"}, "GET pods/log"},
		{"GET", "/apis/egress.proxy-operator.dev/v1alpha1/proxies",
			Request{Group: "egress.proxy-operator.dev", Version: "v1alpha1", Resource: "proxies"}, "GET proxies"},
		{"GET", "/version", Request{}, "GET /version"},
		{"GET", "/apis/egress.proxy-operator.dev/v1alpha1", Request{}, "GET /apis/egress.proxy-operator.dev/v1alpha1"},
		{"GET", "/api/v1", Request{}, "GET /api/v1"},
	}
	for _, tt := range tests {
		got := parseRequest(tt.method, tt.path)
		tt.want.Method, tt.want.Path = tt.method, tt.path
		if got != tt.want {
			t.Errorf("parseRequest(%s %s) = %+v, want %+v", tt.method, tt.path, got, tt.want)
		}
		if got.Key() != tt.key {
			t.Errorf("Key() of %s %s = %q, want %q", tt.method, tt.path, got.Key(), tt.key)
		}
	}
}

// TestCounterConcurrent is for `go test -race`: recording and reading from
// many goroutines at once.
func TestCounterConcurrent(t *testing.T) {
	c := &RequestCounter{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				c.record(parseRequest("PATCH", fmt.Sprintf("/api/v1/namespaces/n/configmaps/c%d-%d", i, j)))
				_ = c.Writes()
				_ = c.WritesBy()
			}
		})
	}
	wg.Wait()
	if got := c.WritesBy()["PATCH configmaps"]; got != 800 {
		t.Fatalf("PATCH configmaps = %d, want 800", got)
	}
}

func TestNewWithoutAssets(t *testing.T) {
	t.Setenv(AssetsEnv, "")
	_, err := New()
	if err == nil || err.Error() != errNoAssets {
		t.Fatalf("New() without %s: err = %v, want %q", AssetsEnv, err, errNoAssets)
	}

	empty := t.TempDir()
	_, err = New(WithAssetsDir(empty))
	if err == nil || !strings.Contains(err.Error(), "no executable kube-apiserver") || !strings.Contains(err.Error(), "make test") {
		t.Fatalf("New() with an empty assets dir: err = %v", err)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "config", "crd", "bases")); err != nil {
		t.Fatalf("RepoRoot() = %s without config/crd/bases: %v", root, err)
	}
	// From a nested tools module the walk must skip its go.mod.
	t.Chdir(filepath.Join(root, "hack", "tools", "etcd"))
	again, err := RepoRoot()
	if err != nil || again != root {
		t.Fatalf("RepoRoot() from hack/tools/etcd = %q, %v; want %q", again, err, root)
	}
}

// TestStartStop starts a second control plane through Start and stops it
// early: Stop must be idempotent since Start's cleanup calls it again.
func TestStartStop(t *testing.T) {
	e := Start(t)
	if err := e.Client.List(t.Context(), &corev1.NamespaceList{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := e.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestWithDataDir: etcd's data and the kube-apiserver's certificates go
// under the given directory, both processes name it on their command lines
// while they run (cmd/demo finds its control plane that way), and none
// does after Stop.
func TestWithDataDir(t *testing.T) {
	dir := t.TempDir()
	e, err := New(WithDataDir(dir), WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() }) // a second Stop does nothing
	if err := e.Client.List(t.Context(), &corev1.NamespaceList{}); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"etcd/member", "kube-apiserver/apiserver.crt"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err != nil {
			t.Errorf("nothing at %s under the data directory: %v", sub, err)
		}
	}
	running, err := commandsNaming(dir)
	if err != nil {
		t.Skipf("cannot list processes: %v", err)
	}
	if len(running) != 2 || !strings.Contains(strings.Join(running, "\n"), "etcd") || !strings.Contains(strings.Join(running, "\n"), "kube-apiserver") {
		t.Errorf("processes naming %s: %q, want etcd and kube-apiserver", dir, running)
	}
	if err := e.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if left, err := commandsNaming(dir); err != nil || len(left) != 0 {
		t.Errorf("after Stop, processes naming %s: %q, %v", dir, left, err)
	}

	if _, err := New(WithDataDir(filepath.Join(dir, "missing"))); err == nil || !strings.Contains(err.Error(), "data directory") {
		t.Errorf("New with a data directory that does not exist: %v, want an error about it", err)
	}
}

// commandsNaming lists the command lines in /proc that contain s, zombies
// left out (they run nothing).
func commandsNaming(s string) ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range entries {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), s) {
			out = append(out, strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out, nil
}
