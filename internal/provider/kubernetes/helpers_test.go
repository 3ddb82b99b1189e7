package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// testProviderName differs from the type on purpose: errors and logs must
// carry the configured name (a known gap of the earlier kubernetes provider).
const testProviderName = "pods-test"

// The control plane is shared by the package's tests and started on first
// use, so the pure tests run without KUBEBUILDER_ASSETS.
var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// apiEnv returns the shared control plane, failing t when it cannot start.
func apiEnv(t *testing.T) *testenv.Env {
	t.Helper()
	envOnce.Do(func() {
		env, envErr = testenv.New(testenv.WithLogf(func(f string, a ...any) { fmt.Printf(f+"\n", a...) }))
	})
	if envErr != nil {
		t.Fatalf("control plane: %v", envErr)
	}
	return env
}

func adminClient(t *testing.T) clientset.Interface {
	t.Helper()
	cs, err := clientset.NewForConfig(apiEnv(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func randHex(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// ensureNamespace creates ns (with labels) unless it exists.
func ensureNamespace(t *testing.T, ns string, labels map[string]string) {
	t.Helper()
	_, err := adminClient(t).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
}

// newNamespace makes a fresh namespace for one test.
func newNamespace(t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	ns := prefix + "-" + randHex(t)
	ensureNamespace(t, ns, labels)
	return ns
}

// newAPIProvider builds a provider on the test control plane with the
// admin config (or rc when given).
func newAPIProvider(t *testing.T, installation string, cfg Config, rc *rest.Config) *Provider {
	t.Helper()
	if rc == nil {
		rc = apiEnv(t).Config
	}
	p, err := newWithConfig(testProviderName, cfg, provider.Options{InstallationID: installation}, rc)
	if err != nil {
		t.Fatal(err)
	}
	// Its watch, if started, holds a request open that the API server
	// would wait for when it stops.
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// boundary is p behind the method boundary the registry puts every
// provider behind, which names errors and writes the outcome lines;
// bounded is its lifecycle part.
func boundary(p *Provider) provider.Bounded { return provider.WithBoundary(testProviderName, Type, p) }

func bounded(p *Provider) provider.Provider { return boundary(p).Provider }

// playKubelet does what the kubelet would for a Pod whose Squid accepts
// connections: phase Running, a Pod IP, and the Ready condition, written
// through the status subresource.
func playKubelet(ctx context.Context, t *testing.T, cs clientset.Interface, ns, name string) error {
	t.Helper()
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "10.244.0.7"
	pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// waitRunning plays the kubelet for id's Pod and polls Get until Running,
// bounded by ctx (a liveness limit, not a speed assertion).
func waitRunning(ctx context.Context, t *testing.T, cs clientset.Interface, p provider.Provider, id string) provider.Instance {
	t.Helper()
	ns, name, err := parseID(id)
	if err != nil {
		t.Fatalf("Create returned malformed ID %q", id)
	}
	for {
		if err := playKubelet(ctx, t, cs, ns, name); err != nil && !apierrors.IsConflict(err) {
			t.Errorf("writing the status of pod %s: %v", id, err)
			return provider.Instance{}
		}
		inst, err := p.Get(ctx, id)
		if err == nil && inst.State == provider.StateRunning {
			return inst
		}
		select {
		case <-ctx.Done():
			t.Errorf("Get(%q) never reached Running: last %+v, %v", id, inst, err)
			return inst
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// statusResponse is an API server answer carrying a Status, as client-go
// decodes it.
func statusResponse(req *http.Request, code int, reason metav1.StatusReason, msg string) *http.Response {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg,
		Details: &metav1.StatusDetails{Kind: "pods"},
	}
	body, _ := json.Marshal(st)
	return &http.Response{
		StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)),
		Header: http.Header{"Content-Type": []string{"application/json"}},
		Body:   io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
		Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
}

// Status answers of each class, shaped like the API server's own: the
// quota and RBAC refusals are both 403 Forbidden and differ only in what
// the status says.
const (
	rbacMessage  = `pods "x" is forbidden: User "system:serviceaccount:ops:operator" cannot create resource "pods" in API group "" in the namespace "ns"`
	quotaRefusal = `pods "x" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1`
)

func classResponse(req *http.Request, class error) *http.Response {
	switch class {
	case provider.ErrNotFound:
		return statusResponse(req, http.StatusNotFound, metav1.StatusReasonNotFound, `pods "x" not found`)
	case provider.ErrPermanent:
		return statusResponse(req, http.StatusForbidden, metav1.StatusReasonForbidden, rbacMessage)
	case provider.ErrQuotaExceeded:
		return statusResponse(req, http.StatusForbidden, metav1.StatusReasonForbidden, quotaRefusal)
	default:
		return statusResponse(req, http.StatusInternalServerError, metav1.StatusReasonInternalError, "injected internal error")
	}
}

// opOfRequest names the provider operation an API request belongs to, as
// the backend double sees it: Create writes, Get reads one Pod, Delete
// deletes, ListByTag lists Pods, Check reads /version and reviews access.
func opOfRequest(req *http.Request) string {
	path := req.URL.Path
	switch {
	case path == "/version" || strings.Contains(path, "selfsubjectaccessreviews"):
		return provider.OpCheck
	case req.Method == http.MethodPost:
		return provider.OpCreate
	case req.Method == http.MethodDelete:
		return provider.OpDelete
	case req.Method != http.MethodGet, req.URL.Query().Get("watch") == "true":
		return "" // the cache's watches are no call of an operation
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	// api/v1/pods, api/v1/namespaces/{ns}/pods[/{name}]
	if len(segs) >= 3 && segs[len(segs)-1] == "pods" {
		return provider.OpList
	}
	if len(segs) == 6 && segs[4] == "pods" {
		return provider.OpGet
	}
	return ""
}
