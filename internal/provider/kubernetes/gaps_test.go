package kubernetes

// One test per known gap of the earlier kubernetes provider, named
// after it, plus the ResourceQuota test against the real API server.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

func apiRequest(ns, proxy string) provider.CreateRequest {
	uid := "uid-" + proxy
	return provider.CreateRequest{
		Name: provider.InstanceName(ns, proxy, uid, ""), Namespace: ns, ProxyName: proxy, UID: uid,
		Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8"},
	}
}

// Gap: Error.Provider was hardcoded "kubernetes". Through the method
// boundary errors name the configured provider, whatever the provider
// itself set.
func TestGap_ErrorProviderIsConfiguredName(t *testing.T) {
	p := bounded(newAPIProvider(t, "inst", Config{}, nil))
	_, err := p.Get(context.Background(), "nowhere/proxy-gone")
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Provider != testProviderName || !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Get of a missing Pod: %#v, want a NotFound *provider.Error naming %q", err, testProviderName)
	}
	_, err = p.Create(context.Background(), provider.CreateRequest{Name: "Bad"})
	if !errors.As(err, &pe) || pe.Provider != testProviderName || pe.Op != provider.OpCreate {
		t.Fatalf("Create refused: %#v, want provider %q op create", err, testProviderName)
	}
}

// Gap: CloudInit and all of Placement were ignored. Placement is used (zone
// and region become node affinity, machineType the resources); CloudInit is
// deliberately not delivered, and never reaches an object or a log line.
func TestGap_CloudInitAndPlacementUsed(t *testing.T) {
	ns := newNamespace(t, "placement", nil)
	p := newAPIProvider(t, "inst", Config{MachineTypes: map[string]MachineType{"small": {CPU: "50m", Memory: "64Mi"}}}, nil)
	// LogLines, not a bare strings.Builder: a Create logs from several
	// goroutines (its three objects are made at once).
	var logs testenv.LogLines
	ctx := logs.Context(10)
	req := apiRequest(ns, "placed")
	req.Placement = provider.Placement{Zone: "eu-1a", MachineType: "small"}
	const sentinel = "CLOUD-INIT-SENTINEL-9f3a"
	req.CloudInit = provider.Sensitive("#cloud-config\n" + sentinel)
	if _, err := bounded(p).Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	pod, svc, cm := instanceObjects(t, ns, req.Name)
	aff := pod.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("no required node affinity: %+v", aff)
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 || len(terms[0].MatchExpressions) == 0 || len(terms[0].MatchExpressions[0].Values) == 0 ||
		terms[0].MatchExpressions[0].Key != corev1.LabelTopologyZone || terms[0].MatchExpressions[0].Values[0] != "eu-1a" {
		t.Errorf("node affinity %+v, want zone eu-1a", terms)
	}
	if got := pod.Spec.Containers[0].Resources.Limits.Memory(); got.Cmp(resource.MustParse("64Mi")) != 0 {
		t.Errorf("memory limit %v, want the machine type's 64Mi", got)
	}
	for _, obj := range []any{pod, cm, svc} {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), sentinel) {
			t.Errorf("cloud-init reached an object: %s", b)
		}
	}
	if strings.Contains(logs.String(), sentinel) {
		t.Errorf("cloud-init reached a log line:\n%s", logs.String())
	}
}

// instanceObjects reads the Pod, Service and ConfigMap of the instance
// named name, failing the test unless all three exist: a check of an
// object that was never read proves nothing.
func instanceObjects(t *testing.T, ns, name string) (*corev1.Pod, *corev1.Service, *corev1.ConfigMap) {
	t.Helper()
	ctx := context.Background()
	cs := adminClient(t)
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the Pod: %v", err)
	}
	if len(pod.Spec.Containers) == 0 {
		t.Fatalf("Pod %s/%s has no container", ns, name)
	}
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the Service: %v", err)
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the ConfigMap: %v", err)
	}
	return pod, svc, cm
}

// Gap: no quota class. A quota refusal and an RBAC refusal are both 403
// Forbidden; the status message tells them apart.
func TestGap_QuotaClass(t *testing.T) {
	for _, class := range []error{provider.ErrQuotaExceeded, provider.ErrPermanent, provider.ErrNotFound, provider.ErrTransient} {
		p := newAPIProvider(t, "inst", Config{}, &rest.Config{Host: "http://127.0.0.1:1"})
		p.wireSeam = func(http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) { return classResponse(r, class), nil })
		}
		_, err := p.Get(context.Background(), "ns/proxy-a")
		if !errors.Is(err, class) {
			t.Errorf("%v answer: %v, want class %v", class, err, class)
		}
	}
	for code, want := range map[int]error{429: provider.ErrTransient, 500: provider.ErrTransient, 504: provider.ErrTransient, 422: provider.ErrPermanent} {
		p := newAPIProvider(t, "inst", Config{}, &rest.Config{Host: "http://127.0.0.1:1"})
		p.wireSeam = func(http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				reason := map[int]metav1.StatusReason{429: metav1.StatusReasonTooManyRequests, 500: metav1.StatusReasonInternalError,
					504: metav1.StatusReasonTimeout, 422: metav1.StatusReasonInvalid}[code]
				return statusResponse(r, code, reason, "answer"), nil
			})
		}
		if _, err := p.Get(context.Background(), "ns/proxy-a"); !errors.Is(err, want) {
			t.Errorf("%d answer: %v, want %v", code, err, want)
		}
	}
}

// The quota class against the real API server: a ResourceQuota of one Pod,
// used up, refuses the second Create with ErrQuotaExceeded; a user without
// RBAC rights is refused with ErrPermanent.
func TestResourceQuotaIsQuotaExceeded(t *testing.T) {
	e := apiEnv(t)
	ns := newNamespace(t, "quota", nil)
	cs := adminClient(t)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "one-pod", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}},
	}
	if _, err := cs.CoreV1().ResourceQuotas(ns).Create(context.Background(), quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := newAPIProvider(t, "inst", Config{}, nil)
	// The quota controller is not running in envtest; the admission plugin
	// still counts, once the quota's status says what is used.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}
	if _, err := cs.CoreV1().ResourceQuotas(ns).UpdateStatus(context.Background(), quota, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Create(context.Background(), apiRequest(ns, "second"))
	if !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Fatalf("Create over a used-up ResourceQuota: %v, want ErrQuotaExceeded", err)
	}

	u, err := e.Environment.AddUser(envtest.User{Name: "nobody-" + randHex(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	np := newAPIProvider(t, "inst", Config{}, u.Config())
	_, err = np.Create(context.Background(), apiRequest(ns, "forbidden"))
	if !errors.Is(err, provider.ErrPermanent) || errors.Is(err, provider.ErrQuotaExceeded) {
		t.Fatalf("Create without RBAC rights: %v, want ErrPermanent", err)
	}
	res := np.Check(context.Background())
	if res.Healthy || res.Reason != provider.ReasonForbidden || !strings.Contains(res.Details["missing"], "create pods") {
		t.Errorf("Check without RBAC rights: %+v, want Forbidden naming create pods", res)
	}
}

// Gap: a Pod being deleted still reported its phase, so it could read
// Running. A Ready Pod being deleted is Terminated, without an IP.
func TestGap_DeletingPodNeverRunning(t *testing.T) {
	p, cs, ns, inst, name := runningInstance(t, "deleting")
	ctx := context.Background()
	// A finalizer keeps the Pod readable with its deletion timestamp.
	setPodFinalizers(t, ns, name, "test.example/hold")
	t.Cleanup(func() { setPodFinalizers(t, ns, name) })
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the held Pod is not readable after Delete: %v", err)
	}
	if pod.DeletionTimestamp == nil || !podReady(pod) || pod.Status.PodIP == "" {
		t.Fatalf("the Pod is not a Ready Pod being deleted (deletionTimestamp %v, ready %v, IP %q): the case is not exercised",
			pod.DeletionTimestamp, podReady(pod), pod.Status.PodIP)
	}
	got, err := p.Get(ctx, inst.ID)
	if err != nil {
		t.Fatalf("Get of a Ready Pod being deleted: %v", err)
	}
	if got.State != provider.StateTerminated || got.IP != "" || got.Host != "" {
		t.Errorf("Get of a Ready Pod being deleted: %+v; want Terminated without IP or host", got)
	}
}

// runningInstance makes the instance of a Proxy named proxy in a new
// namespace of that prefix on the test API server, through a provider of
// its own, and plays its kubelet until Get reads it Running; it returns
// the Pod's name too.
func runningInstance(t *testing.T, proxy string) (*Provider, clientset.Interface, string, provider.Instance, string) {
	t.Helper()
	ns := newNamespace(t, proxy, nil)
	cs := adminClient(t)
	p := newAPIProvider(t, "inst", Config{}, nil)
	ctx := context.Background()
	inst, err := p.Create(ctx, apiRequest(ns, proxy))
	if err != nil {
		t.Fatal(err)
	}
	if got := waitRunning(ctx, t, cs, p, inst.ID); got.State != provider.StateRunning {
		t.Fatalf("never Running: %+v", got)
	}
	_, name, err := parseID(inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	return p, cs, ns, inst, name
}

// setPodFinalizers replaces the Pod's finalizers, retrying on conflicts
// with the test's own status writes.
func setPodFinalizers(t *testing.T, ns, name string, finalizers ...string) {
	t.Helper()
	pods := adminClient(t).CoreV1().Pods(ns)
	testenv.EventuallyNil(t, "finalizers of pod "+name+" set to "+strings.Join(finalizers, ","), func() error {
		pod, err := pods.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Finalizers = finalizers
		_, err = pods.Update(context.Background(), pod, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("updating the finalizers of pod %s: %v", name, err)
		}
		return err
	})
}

// Gap: no securityContext, no resources, and "http_access allow all". The
// namespace enforces Pod Security "restricted", so the API server itself
// judges the Pod.
func TestGap_SecurityContextAndNoAllowAll(t *testing.T) {
	ns := newNamespace(t, "restricted", map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
	})
	p := newAPIProvider(t, "inst", Config{}, nil)
	req := apiRequest(ns, "restricted")
	if _, err := p.Create(context.Background(), req); err != nil {
		t.Fatalf("Create in a restricted namespace: %v", err)
	}
	cs := adminClient(t)
	pod, _, cm := instanceObjects(t, ns, req.Name)
	c := pod.Spec.Containers[0]
	if c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("no resources: %+v", c.Resources)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v", sc)
	}
	if conf := cm.Data[confFile]; strings.Contains(conf+"\n", "http_access allow all\n") || !strings.HasSuffix(strings.TrimSpace(httpAccess(conf)), "http_access deny all decided_destinations") {
		t.Errorf("squid.conf is not deny-by-default:\n%s", conf)
	}
	// The check can fail: a privileged Pod is refused in this namespace.
	bad := p.buildPod(spec{name: "bad", namespace: ns, req: req, size: p.cfg.Resources})
	bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptrBool(true)
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), bad, metav1.CreateOptions{}); err == nil {
		t.Error("the namespace accepted a Pod allowing privilege escalation; the restricted check proves nothing")
	}
}

func ptrBool(b bool) *bool { return &b }

func httpAccess(conf string) string {
	var rules []string
	for _, l := range strings.Split(conf, "\n") {
		if strings.HasPrefix(l, "http_access ") {
			rules = append(rules, l)
		}
	}
	return strings.Join(rules, "\n")
}

// Gap: no logging in the package and no Checker details.
func TestGap_LoggingAndCheckerDetails(t *testing.T) {
	e := apiEnv(t)
	ns := newNamespace(t, "logging", nil)
	p := newAPIProvider(t, "inst", Config{Namespace: ns}, nil)
	var logs testenv.LogLines
	ctx := logs.Context(1)
	bp := boundary(p)
	if _, err := bp.Provider.Create(ctx, apiRequest("elsewhere", "logged")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"create done"`, `"outcome"="created"`, `"kubernetes api call"`, `"provider"="` + testProviderName + `"`, `"status"=201`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("V(1) log lacks %s:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), `"instance spec"`) {
		t.Errorf("V(2) detail logged at V(1):\n%s", logs.String())
	}
	res := bp.Checker.Check(ctx)
	if !res.Healthy || res.Details["serverVersion"] != e.ServerVersion || res.Details["namespace"] != ns || res.Details["missing"] != "none" {
		t.Errorf("Check: %+v, want Healthy with serverVersion %s, namespace %s, missing none", res, e.ServerVersion, ns)
	}
}

// Gap: no OwnerReference, so a bypassed finalizer leaked the Pod.
func TestGap_OwnerReference(t *testing.T) {
	ns := newNamespace(t, "owner", nil)
	p := newAPIProvider(t, "inst", Config{}, nil)
	req := apiRequest(ns, "owned")
	if _, err := p.Create(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	pod, svc, cm := instanceObjects(t, ns, req.Name)
	for _, m := range []metav1.ObjectMeta{pod.ObjectMeta, svc.ObjectMeta, cm.ObjectMeta} {
		if len(m.OwnerReferences) != 1 {
			t.Fatalf("%s owner references %+v, want one", m.Name, m.OwnerReferences)
		}
		r := m.OwnerReferences[0]
		if r.APIVersion != "egress.proxy-operator.dev/v1alpha1" || r.Kind != "Proxy" || r.Name != "owned" ||
			string(r.UID) != req.UID || r.Controller == nil || !*r.Controller || r.BlockOwnerDeletion == nil || *r.BlockOwnerDeletion {
			t.Errorf("owner reference %+v, want Proxy owned %s, controller, not blocking", r, req.UID)
		}
	}
	// In another namespace than the Proxy's there is none: Kubernetes has no
	// cross-namespace owners.
	other := newNamespace(t, "owner-other", nil)
	op := newAPIProvider(t, "inst", Config{Namespace: other}, nil)
	if _, err := op.Create(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	pod, svc, cm = instanceObjects(t, other, req.Name)
	for _, m := range []metav1.ObjectMeta{pod.ObjectMeta, svc.ObjectMeta, cm.ObjectMeta} {
		if len(m.OwnerReferences) != 0 {
			t.Errorf("%s in another namespace than its Proxy has owner references %+v", m.Name, m.OwnerReferences)
		}
	}
}

// Gap: the Pod RBAC was always installed. It is an optional component that
// config/default does not include unless the switch is turned.
func TestGap_RBACOptional(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	comp := filepath.Join(root, "config", "components", "kubernetes-provider")
	var k struct {
		Kind      string   `json:"kind"`
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(comp, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil || k.Kind != "Component" {
		t.Fatalf("component kustomization: kind %q, %v; want Component", k.Kind, err)
	}
	role, err := os.ReadFile(filepath.Join(comp, "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pods", "services", "configmaps", "secrets", "selfsubjectaccessreviews"} {
		if !strings.Contains(string(role), want) {
			t.Errorf("component role lacks %s", want)
		}
	}
	def, err := os.ReadFile(filepath.Join(root, "config", "default", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := yaml.Unmarshal(def, &d); err != nil {
		t.Fatal(err)
	}
	if c, ok := d["components"]; ok {
		list, err := yamlStrings(c)
		if err != nil {
			t.Fatalf("config/default components: %v", err)
		}
		for _, comp := range list {
			if strings.Contains(comp, "kubernetes-provider") {
				t.Errorf("config/default includes the kubernetes-provider component by default: %v", list)
			}
		}
	}
	mgrRole, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(mgrRole, &cr); err != nil || cr.Kind != "ClusterRole" || len(cr.Rules) == 0 {
		t.Fatalf("config/rbac/role.yaml: kind %q, %d rules, %v; want a ClusterRole with rules", cr.Kind, len(cr.Rules), err)
	}
	for _, r := range cr.Rules {
		for _, res := range r.Resources {
			if res == "pods" || res == "services" || res == "configmaps" {
				t.Errorf("config/rbac/role.yaml grants %s %v to every installation", res, r.Verbs)
			}
		}
	}
}

// yamlStrings is a YAML list of strings, or an error naming what it is not.
func yamlStrings(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%T is not a list", v)
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("item %v (%T) is not a string", x, x)
		}
		out = append(out, s)
	}
	return out, nil
}
