// Package e2e runs the operator as users deploy it, on the one-node e2e
// cluster (hack/cluster: a real kubelet, containerd, scheduler and
// controller-manager): `make test-e2e` brings the cluster up, builds and
// imports both images, applies test/e2e/config and runs this package with
// E2E_KUBECONFIG set. Without it every test skips, so `make test` skips it.
//
// The cluster runs no kube-proxy and no DNS: Pods are addressed by Pod IP
// (the Proxy's status.ip), never by Service name. The Pods' resolv.conf
// names the node's bridge address, where a test that needs names serves
// its own (PartnerAPISample); otherwise nothing answers there.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
)

// What test/e2e/config deploys and hack/cluster/lib.sh names.
const (
	operatorNamespace = "egress-proxies-operator-system"
	operatorLabel     = "control-plane=controller-manager"
	deploymentName    = "egress-proxies-operator-controller-manager"
	metricsService    = "egress-proxies-operator-controller-manager-metrics-service"
	leaseName         = "egress-proxies-operator.proxy-operator.dev"
	podsProvider      = "pods" // the kubernetes entry
	podRange          = "10.244.77.0/24"
	proxyPort         = 3128
	originPort        = 8080
	// The collector test/e2e/otelcol deploys, and the service.name the
	// operator's spans carry (internal/operator.Name).
	collectorNamespace = "otel-e2e"
	collectorLabel     = "app.kubernetes.io/name=otelcol"
	operatorService    = "egress-proxies-operator"
)

// slow bounds what waits on the kubelet, an image start or the kubelet's
// ConfigMap sync (up to its one-minute sync period); like every bound here
// it only stops a hung test.
const slow = 4 * time.Minute

type cluster struct {
	c          client.Client
	kubeconfig string
	kubectl    string
	busybox    string
	ns         string // the test's namespace, enforcing Pod Security "restricted"
}

func TestE2E(t *testing.T) {
	kubeconfig := os.Getenv("E2E_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("E2E_KUBECONFIG is not set: make test-e2e runs this against the e2e cluster")
	}
	cl := connect(t, kubeconfig)
	cl.waitLeader(t, "")

	t.Run("ProxyReady", cl.testProxyReady)
	t.Run("Tracing", cl.testTracing)
	t.Run("FetchThroughSquid", cl.testFetchThroughSquid)
	t.Run("PartnerAPISample", cl.testPartnerAPISample)
	t.Run("EgressIPThroughTheEcho", cl.testEgressIPEcho)
	t.Run("ProxyGroupFailover", cl.testProxyGroup)
	t.Run("SquidPodRestricted", cl.testSquidPodRestricted)
	t.Run("DeleteRemovesObjects", cl.testDeleteRemovesObjects)
	t.Run("GoMemoryLimitFromTheContainer", cl.testGoMemoryLimit)
	t.Run("FinalizerBypassGarbageCollected", cl.testFinalizerBypass)
	t.Run("LeaderKilled", cl.testLeaderKilled)
	t.Run("LeaderSIGKILLed", cl.testLeaderSIGKILLed)
	t.Run("ConfigMapChangeReloaded", cl.testConfigMapChange)
	t.Run("MetricsScrapedWithToken", cl.testMetricsScrape)
	// Last: it loses a node (only on the two-node cluster).
	t.Run("ProxyGroupNodeLost", cl.testProxyGroupNodeLost)
}

func connect(t *testing.T, kubeconfig string) *cluster {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, egressv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{
		c:          c,
		kubeconfig: kubeconfig,
		kubectl:    envOr("E2E_KUBECTL", "kubectl"),
		busybox:    envOr("E2E_BUSYBOX_IMAGE", "docker.io/local/busybox:e2e"),
		ns:         "e2e-" + randomHex(t, 4),
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cl.ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace %s: %v", cl.ns, err)
	}
	t.Cleanup(func() {
		// The groups and Proxies go first (their finalizers need the
		// operator; a group left would make its members again), then the
		// namespace with the test's Pods.
		_ = c.DeleteAllOf(ctx, &egressv1.ProxyGroup{}, client.InNamespace(cl.ns))
		_ = c.DeleteAllOf(ctx, &egressv1.Proxy{}, client.InNamespace(cl.ns))
		testenv.EventuallyNilWithin(t, slow, "the test's Proxies are gone", func() error {
			var l egressv1.ProxyList
			if err := c.List(ctx, &l, client.InNamespace(cl.ns)); err != nil {
				return err
			}
			if len(l.Items) > 0 {
				return fmt.Errorf("%d left", len(l.Items))
			}
			return nil
		})
		if err := c.Delete(ctx, ns); err != nil {
			t.Errorf("deleting namespace %s: %v", cl.ns, err)
		}
	})
	return cl
}

// --- (a) ---------------------------------------------------------------

func (cl *cluster) testProxyReady(t *testing.T) {
	start := time.Now()
	p := cl.createProxy(t, "ready", podsProvider, []string{podRange})
	p = cl.waitReady(t, p)
	t.Logf("apply -> Ready on the kubelet: %s (Pod IP %s, endpoint %s)", time.Since(start).Round(time.Millisecond), p.Status.IP, p.Status.Endpoint)
	if p.Status.IP == "" || !strings.HasPrefix(p.Status.IP, "10.244.77.") {
		t.Errorf("status.ip = %q, want a Pod IP in %s", p.Status.IP, podRange)
	}
}

// --- tracing -----------------------------------------------------------

// testTracing runs one Proxy's whole lifecycle on the kubernetes provider
// (create to Ready, delete to gone) and reads what the OpenTelemetry
// Collector (test/e2e/otelcol: the otlp receiver, the file exporter on
// stdout) received from the operator over OTLP/HTTP: each reconcile is one
// trace rooted at "reconcile Proxy", provider.create has the provider's
// "HTTP POST" spans for the Pod, Service, ConfigMap and NetworkPolicy as
// children, provider.delete its "HTTP DELETE" ones, and no reconcile's
// spans are split over traces or share one (lifecycle.check).
func (cl *cluster) testTracing(t *testing.T) {
	p := cl.waitReady(t, cl.createProxy(t, "traced", podsProvider, []string{podRange}))
	if err := cl.c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	cl.waitGone(t, p)

	var l *lifecycle
	// The spans arrive in batches (the operator's batch span processor,
	// OTEL_BSP_SCHEDULE_DELAY in test/e2e/config), a trace's root after
	// its children: wait until the delete's reconcile is in.
	testenv.EventuallyNilWithin(t, slow, "the collector received Proxy "+p.Name+"'s create and delete", func() error {
		spans, err := cl.collectorSpans(t)
		if err != nil {
			return err
		}
		l = newLifecycle(spans, p.Namespace, p.Name)
		return l.complete()
	})
	for _, line := range l.summary() {
		t.Log(line)
	}
	if err := l.check(operatorService); err != nil {
		t.Fatal(err)
	}
	creates, deletes := l.calls(spanProviderCreate, spanHTTPPost), l.calls(spanProviderDelete, spanHTTPDelete)
	t.Logf("Proxy %s: %d reconciles, each one trace; %q > %q > %q %v; %q > %q > %q %v",
		p.Name, len(l.roots), spanReconcileProxy, spanProviderCreate, spanHTTPPost, creates,
		spanReconcileProxy, spanProviderDelete, spanHTTPDelete, deletes)
}

// collectorSpans reads every span the collector has written so far (its
// log: kubectl logs, as a person would).
func (cl *cluster) collectorSpans(t *testing.T) ([]otelcol.Span, error) {
	t.Helper()
	out, err := cl.kubectlOut(t, "-n", collectorNamespace, "logs", "-l", collectorLabel, "--tail=-1", "--max-log-requests=1")
	if err != nil {
		return nil, err
	}
	return otelcol.Parse(out)
}

// --- (b) ---------------------------------------------------------------

func (cl *cluster) testFetchThroughSquid(t *testing.T) {
	token := "e2e-" + randomHex(t, 16)
	origin := cl.runPod(t, "origin", fmt.Sprintf(
		"echo %s > /srv/index.html && exec busybox httpd -f -p %d -h /srv", token, originPort), true)
	allowed := cl.runPod(t, "client-allowed", "exec busybox sleep 3600", false)
	refused := cl.runPod(t, "client-refused", "exec busybox sleep 3600", false)
	t.Logf("origin %s, allowed client %s, refused client %s", origin.Status.PodIP, allowed.Status.PodIP, refused.Status.PodIP)

	// Only the allowed client's own address is admitted, so the refused
	// one, on the same bridge, is outside allowedSourceRanges.
	// Waited for as docs/operations.md tells users to: kubectl wait. Ready
	// means the proxy answers, so the one fetch below, right after it
	// returns and never retried, must succeed (issue 22).
	p := cl.createProxy(t, "fetch", podsProvider, []string{allowed.Status.PodIP + "/32"})
	applied := time.Now()
	if out, err := cl.kubectlWithin(t, slow+time.Minute, "-n", cl.ns, "wait", "--for=condition=Ready", "proxy/"+p.Name,
		fmt.Sprintf("--timeout=%ds", int(slow/time.Second))); err != nil {
		t.Fatalf("kubectl wait --for=condition=Ready proxy/%s: %v: %s", p.Name, err, out)
	}
	t.Logf("TIMING apply->kubectl wait --for=condition=Ready returned %.1fs", time.Since(applied).Seconds())
	if err := cl.c.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	squid := p.Status.IP
	url := fmt.Sprintf("http://%s:%d/index.html", origin.Status.PodIP, originPort)

	// busybox wget through the proxy (http_proxy), by the Squid Pod's IP.
	out, err := cl.exec(t, allowed.Name, "env", "http_proxy=http://"+squid+":"+fmt.Sprint(proxyPort), "busybox", "wget", "-q", "-O", "-", url)
	if err != nil {
		t.Fatalf("allowed client's fetch through %s: %v: %s", squid, err, out)
	}
	if strings.TrimSpace(out) != token {
		t.Fatalf("allowed client fetched %q through Squid, want the origin's token %q", out, token)
	}
	t.Logf("allowed client fetched the origin's token through Squid at %s:%d", squid, proxyPort)

	// The refused client makes the same request: wget -S prints the status
	// line (busybox's wget stops at an error status, so Squid's
	// X-Squid-Error header is not shown; Squid's access log below says
	// TCP_DENIED for this client). Without a CNI that enforces
	// NetworkPolicy (the e2e cluster's bridge does not), the instance's
	// NetworkPolicy is inert and Squid's ACL is what refuses.
	out, err = cl.exec(t, refused.Name, "sh", "-c", fmt.Sprintf(
		`http_proxy=http://%s:%d busybox wget -S -O - %s 2>&1; echo "wget exit $?"`, squid, proxyPort, url))
	if err != nil {
		t.Fatalf("refused client's request: %v: %s", err, out)
	}
	if !strings.Contains(out, "HTTP/1.1 403 Forbidden") ||
		strings.Contains(out, token) || strings.Contains(out, "wget exit 0") {
		t.Fatalf("refused client (%s, outside %s/32) got:\n%s\nwant Squid's 403 Forbidden and no token", refused.Status.PodIP, allowed.Status.PodIP, out)
	}
	t.Logf("refused client got 403 Forbidden from Squid at %s (Squid's ACL: no NetworkPolicy enforcement on this CNI)", squid)

	// Squid's access log (stdout, through kubectl logs, one JSON line per
	// request) names both: the 403 is Squid's own refusal of the client,
	// not the origin's.
	pod := cl.instanceObjects(t, p).pods[0]
	var squidLog string
	testenv.EventuallyNil(t, "Squid's access log has both requests", func() error {
		logs, lines, err := cl.accessLines(t, pod)
		if err != nil {
			return err
		}
		for _, want := range []map[string]string{
			{"client": allowed.Status.PodIP, "status": "200", "decision": "allowed", "rule": "entry"},
			{"client": refused.Status.PodIP, "status": "403", "decision": "refused", "rule": "client-ranges"},
		} {
			if _, ok := squidtest.FindAccess(lines, want); !ok {
				return fmt.Errorf("no access line with %v in:\n%s", want, logs)
			}
		}
		squidLog = logs
		return nil
	})
	// Its cache log (stderr) too: the generated squid.conf, with the
	// entry's clusterCIDRs inside a denied range, makes Squid warn of
	// nothing.
	for line := range strings.SplitSeq(squidLog, "\n") {
		if strings.Contains(line, "WARNING") {
			t.Errorf("Squid Pod %s warns: %s", pod.Name, line)
		}
	}
}

// --- (c) ---------------------------------------------------------------

func (cl *cluster) testSquidPodRestricted(t *testing.T) {
	ctx := context.Background()
	// The namespace enforces "restricted": a Pod that runs as root is refused.
	rootPod := cl.podSpec("root", "exec busybox sleep 1", false)
	rootPod.Spec.SecurityContext.RunAsNonRoot = nil
	rootPod.Spec.SecurityContext.RunAsUser = ptr.To[int64](0)
	err := cl.c.Create(ctx, rootPod)
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Fatalf("a root Pod in %s: got %v, want Pod Security admission's Forbidden", cl.ns, err)
	}

	p := cl.waitReady(t, cl.createProxy(t, "restricted", podsProvider, []string{podRange}))
	pod := cl.instanceObjects(t, p).pods[0]
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("Squid Pod %s has %d container statuses", pod.Name, len(pod.Status.ContainerStatuses))
	}
	// The container's process as the node sees it: the test runs on the node.
	id := pod.Status.ContainerStatuses[0].ContainerID
	_, id, _ = strings.Cut(id, "://")
	pid, err := processOfContainer(id)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	uid := fieldOf(string(status), "Uid:")
	if uid != "65532\t65532\t65532\t65532" {
		t.Errorf("Squid (pid %d) runs with Uid %q, want 65532 throughout", pid, uid)
	}
	if capEff := fieldOf(string(status), "CapEff:"); capEff != "0000000000000000" {
		t.Errorf("Squid (pid %d) has effective capabilities %s, want none", pid, capEff)
	}
	root, err := rootMountOptions(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(root, "ro,") && root != "ro" {
		t.Errorf("Squid's / is mounted %q, want read-only", root)
	}
	t.Logf("Squid Pod %s: pid %d on the node, Uid %s, CapEff 0, / mounted %s, admitted under Pod Security restricted", pod.Name, pid, strings.Fields(uid)[0], root)
}

// processOfContainer finds the PID on this node of a container's first
// process: the one whose cgroup path ends in the container ID.
func processOfContainer(id string) (int, error) {
	if id == "" {
		return 0, fmt.Errorf("no container ID")
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	best := 0
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !bytes.Contains(b, []byte(id)) {
			continue
		}
		if best == 0 || pid < best {
			best = pid
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("no process in a cgroup of container %s", id)
	}
	return best, nil
}

func fieldOf(status, key string) string {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// rootMountOptions is the mount options of / in pid's mount namespace.
func rootMountOptions(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return "", err
	}
	opts := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			opts = f[5] // the last mount on / wins
		}
	}
	if opts == "" {
		return "", fmt.Errorf("no / in /proc/%d/mountinfo", pid)
	}
	return opts, nil
}

// --- (d) ---------------------------------------------------------------

func (cl *cluster) testDeleteRemovesObjects(t *testing.T) {
	p := cl.waitReady(t, cl.createProxy(t, "delete", podsProvider, []string{podRange}))
	objs := cl.instanceObjects(t, p)
	objs.requireAll(t)
	if err := cl.c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	cl.waitGone(t, p)
	t.Logf("deleted Proxy %s: its Pod, Service, ConfigMap, NetworkPolicy and Secret are gone", p.Name)
}

// --- (e) ---------------------------------------------------------------

// testFinalizerBypass removes the finalizer by force, as users do, with
// the operator scaled to zero so that only the garbage collector can
// remove the objects, through their OwnerReferences to the Proxy.
func (cl *cluster) testFinalizerBypass(t *testing.T) {
	ctx := context.Background()
	p := cl.waitReady(t, cl.createProxy(t, "bypass", podsProvider, []string{podRange}))
	objs := cl.instanceObjects(t, p)
	objs.requireAll(t)
	for _, o := range objs.all() {
		if !ownedBy(o, p.UID) {
			t.Fatalf("%T %s has no controller OwnerReference to Proxy %s (%s): %v", o, o.GetName(), p.Name, p.UID, o.GetOwnerReferences())
		}
	}

	cl.scaleOperator(t, 0)
	t.Cleanup(func() { cl.scaleOperator(t, 2); cl.waitLeader(t, "") })
	testenv.EventuallyNilWithin(t, slow, "no operator Pod runs", func() error {
		if pods := cl.operatorPods(t); len(pods) > 0 {
			return fmt.Errorf("%d left", len(pods))
		}
		return nil
	})

	if err := cl.c.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatalf("removing the finalizer: %v", err)
	}
	if err := cl.c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	cl.waitGone(t, p)
	t.Logf("with no operator running, the garbage collector removed the bypassed Proxy's Pod, Service, ConfigMap, NetworkPolicy and Secret")
}

func ownedBy(o client.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == uid && r.Kind == "Proxy" && ptr.Deref(r.Controller, false) {
			return true
		}
	}
	return false
}

// --- (f) ---------------------------------------------------------------

func (cl *cluster) testLeaderKilled(t *testing.T) {
	ctx := context.Background()
	leader, holder, lease := cl.waitLeader(t, "")
	killed := time.Now()
	err := cl.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: leader}},
		client.GracePeriodSeconds(0))
	if err != nil {
		t.Fatalf("force-deleting the leader %s: %v", leader, err)
	}
	p := cl.createProxy(t, "after-delete", podsProvider, []string{podRange})
	next, _, _ := cl.waitLeader(t, holder)
	t.Logf("leader %s force-deleted (--grace-period=0 --force); %s took the Lease after %s (leaseDurationSeconds %d)",
		leader, next, time.Since(killed).Round(time.Millisecond), ptr.Deref(lease.Spec.LeaseDurationSeconds, 0))
	p = cl.waitReady(t, p)
	t.Logf("Proxy %s, created right after the kill, Ready %s after it", p.Name, time.Since(killed).Round(time.Millisecond))
}

// testLeaderSIGKILLed kills the leader's process on the node with SIGKILL,
// so that, unlike a Pod deletion (where the kubelet still sends SIGTERM
// and the leader releases its Lease), nothing is released: the standby
// takes over once the Lease expires.
func (cl *cluster) testLeaderSIGKILLed(t *testing.T) {
	leader, holder, lease := cl.waitLeader(t, "")
	var pod corev1.Pod
	if err := cl.c.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: leader}, &pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("operator Pod %s has %d container statuses", leader, len(pod.Status.ContainerStatuses))
	}
	_, id, _ := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
	pid, err := processOfContainer(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL of the leader's process %d: %v", pid, err)
	}
	killed := time.Now()
	p := cl.createProxy(t, "after-sigkill", podsProvider, []string{podRange})
	next, _, _ := cl.waitLeader(t, holder)
	t.Logf("leader %s SIGKILLed (pid %d on the node); %s took the Lease after %s (leaseDurationSeconds %d)",
		leader, pid, next, time.Since(killed).Round(time.Millisecond), ptr.Deref(lease.Spec.LeaseDurationSeconds, 0))
	p = cl.waitReady(t, p)
	t.Logf("Proxy %s, created right after the kill, Ready %s after it", p.Name, time.Since(killed).Round(time.Millisecond))
}

// waitLeader waits for the Lease to be held by a running operator Pod,
// under another identity than not (controller-runtime's is
// <Pod name>_<uuid>, new at each start), and returns that Pod's name, the
// identity and the Lease.
func (cl *cluster) waitLeader(t *testing.T, not string) (string, string, *coordinationv1.Lease) {
	t.Helper()
	var name, holder string
	var lease coordinationv1.Lease
	testenv.EventuallyNilWithin(t, slow, "an operator Pod holds the leader Lease", func() error {
		if err := cl.c.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: leaseName}, &lease); err != nil {
			return err
		}
		holder = ptr.Deref(lease.Spec.HolderIdentity, "")
		name, _, _ = strings.Cut(holder, "_")
		if name == "" || holder == not {
			return fmt.Errorf("held by %q", holder)
		}
		for _, p := range cl.operatorPods(t) {
			if p.Name == name && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				return nil
			}
		}
		return fmt.Errorf("held by %q, which is no running operator Pod", holder)
	})
	return name, holder, &lease
}

// --- (g) ---------------------------------------------------------------

// testConfigMapChange adds an entry to the providers ConfigMap the
// Deployment mounts: a Proxy waiting on the missing entry becomes Ready and
// the entry's ProviderHealth appears, with the operator's Pods the same
// ones, none restarted.
func (cl *cluster) testConfigMapChange(t *testing.T) {
	ctx := context.Background()
	const entry = "local-e2e"
	before := podRestarts(cl.operatorPods(t))

	p := cl.createProxy(t, "late-entry", entry, []string{"127.0.0.0/8"})
	testenv.EventuallyNilWithin(t, slow, "the Proxy on the missing entry says ProviderNotFound", func() error {
		if err := cl.c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, egressv1.ConditionReady)
		if c == nil || c.Reason != "ProviderNotFound" {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})

	cm := cl.providersConfigMap(t)
	original := cm.Data["providers.yaml"]
	var cfg struct {
		Providers []map[string]any `json:"providers"`
	}
	if err := yaml.Unmarshal([]byte(original), &cfg); err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.Name, err)
	}
	cfg.Providers = append(cfg.Providers, map[string]any{
		"name": entry, "type": "local", "local": map[string]any{"bindCIDR": "127.0.101.0/24"},
	})
	changed, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["providers.yaml"] = string(changed)
	if err := cl.c.Update(ctx, cm); err != nil {
		t.Fatalf("updating ConfigMap %s: %v", cm.Name, err)
	}
	changedAt := time.Now()
	t.Cleanup(func() {
		// The Proxy goes first: its finalizer needs the entry.
		if err := cl.c.Delete(ctx, p); err == nil {
			cl.waitGone(t, p)
		}
		cm := cl.providersConfigMap(t)
		cm.Data["providers.yaml"] = original
		if err := cl.c.Update(ctx, cm); err != nil {
			t.Errorf("restoring ConfigMap %s: %v", cm.Name, err)
		}
	})

	p = cl.waitReady(t, p)
	t.Logf("Proxy %s on the added entry Ready %s after the ConfigMap update (the kubelet's sync brings the file)", p.Name, time.Since(changedAt).Round(time.Millisecond))
	var health egressv1.ProviderHealth
	testenv.EventuallyNilWithin(t, slow, "ProviderHealth "+entry+" is Healthy", func() error {
		if err := cl.c.Get(ctx, client.ObjectKey{Name: entry}, &health); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(health.Status.Conditions, egressv1.ConditionHealthy) {
			return fmt.Errorf("conditions %+v", health.Status.Conditions)
		}
		return nil
	})
	after := podRestarts(cl.operatorPods(t))
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("operator Pods and restarts changed with the ConfigMap: before %v, after %v", before, after)
	}
}

func (cl *cluster) providersConfigMap(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	ctx := context.Background()
	var d appsv1.Deployment
	if err := cl.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: deploymentName}, &d); err != nil {
		t.Fatal(err)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "providers" && v.ConfigMap != nil {
			var cm corev1.ConfigMap
			if err := cl.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: v.ConfigMap.Name}, &cm); err != nil {
				t.Fatal(err)
			}
			return &cm
		}
	}
	t.Fatalf("Deployment %s mounts no providers ConfigMap", d.Name)
	return nil
}

// podRestarts maps each operator Pod (by UID) to its restart count.
func podRestarts(pods []corev1.Pod) map[types.UID]int32 {
	m := map[types.UID]int32{}
	for _, p := range pods {
		for _, s := range p.Status.ContainerStatuses {
			m[p.UID] += s.RestartCount
		}
	}
	return m
}

// --- metrics -----------------------------------------------------------

// testMetricsScrape scrapes the operator as Prometheus's kubernetes service
// discovery does: the metrics Service's EndpointSlices from the API server,
// then each endpoint over HTTPS with a ServiceAccount's bearer token, which
// the operator checks with TokenReview and SubjectAccessReview. A token
// without the metrics-reader binding gets 403, no token 401. The test runs
// on the node, so it reaches the Pod IPs over the bridge.
func (cl *cluster) testMetricsScrape(t *testing.T) {
	ctx := context.Background()
	reader := cl.serviceAccountToken(t, "metrics-scraper")
	other := cl.serviceAccountToken(t, "no-metrics")
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: cl.ns + "-metrics-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "egress-proxies-operator-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: cl.ns, Name: "metrics-scraper"}},
	}
	if err := cl.c.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.c.Delete(ctx, crb) })

	var endpoints []string
	testenv.EventuallyNilWithin(t, slow, "the metrics Service has ready endpoints", func() error {
		var l discoveryv1.EndpointSliceList
		if err := cl.c.List(ctx, &l, client.InNamespace(operatorNamespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: metricsService}); err != nil {
			return err
		}
		endpoints = nil
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) && len(e.Addresses) > 0 {
					endpoints = append(endpoints, e.Addresses[0])
				}
			}
		}
		if len(endpoints) < 2 {
			return fmt.Errorf("ready endpoints %v, want both replicas", endpoints)
		}
		return nil
	})

	httpc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		// The operator serves metrics with controller-runtime's
		// self-signed certificate, as Prometheus's insecure_skip_verify
		// scrape config for it assumes.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed, see above
	}}
	scrape := func(ip, token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(ip, "8443")+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	reconciles := 0 // endpoints exporting the reconciler's metrics: the leader's
	for _, ip := range endpoints {
		testenv.EventuallyNil(t, "scrape of "+ip+" with the metrics-reader token", func() error {
			code, body, err := scrape(ip, reader)
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("status %d", code) // the RBAC binding may not be seen yet
			}
			if !strings.Contains(body, "egress_proxy_config_last_reload_successful 1") {
				return fmt.Errorf("no egress_proxy_config_last_reload_successful 1 in the scrape")
			}
			if strings.Contains(body, "controller_runtime_reconcile_total{") {
				reconciles++
			}
			return nil
		})
		if code, _, err := scrape(ip, other); err != nil || code != http.StatusForbidden {
			t.Errorf("scrape of %s with a token lacking metrics-reader: status %d, err %v; want 403", ip, code, err)
		}
		if code, _, err := scrape(ip, ""); err != nil || code != http.StatusUnauthorized {
			t.Errorf("scrape of %s without a token: status %d, err %v; want 401", ip, code, err)
		}
	}
	if reconciles == 0 {
		t.Errorf("no endpoint of %v exports controller_runtime_reconcile_total: the leader should", endpoints)
	}
	t.Logf("scraped %v:8443/metrics with a metrics-reader token (403 without the binding, 401 without a token)", endpoints)
}

// serviceAccountToken creates a ServiceAccount in the test's namespace and
// returns a short-lived token for it (TokenRequest). Never logged.
func (cl *cluster) serviceAccountToken(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: cl.ns, Name: name}}
	if err := cl.c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := cl.c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("TokenRequest for %s: %v", name, err)
	}
	if tr.Status.Token == "" {
		t.Fatalf("TokenRequest for %s returned no token", name)
	}
	return tr.Status.Token
}

// --- helpers -----------------------------------------------------------

func (cl *cluster) createProxy(t *testing.T, name, providerName string, sources []string) *egressv1.Proxy {
	t.Helper()
	p := &egressv1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: cl.ns, Name: name},
		Spec: egressv1.ProxySpec{
			Provider:            providerName,
			Port:                proxyPort,
			AllowedSourceRanges: sources,
		},
	}
	if err := cl.c.Create(context.Background(), p); err != nil {
		t.Fatalf("creating Proxy %s: %v", name, err)
	}
	return p
}

func (cl *cluster) waitReady(t *testing.T, p *egressv1.Proxy) *egressv1.Proxy {
	t.Helper()
	testenv.EventuallyNilWithin(t, slow, "Proxy "+p.Name+" Ready", func() error {
		if err := cl.c.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(p.Status.Conditions, egressv1.ConditionReady) || p.Status.IP == "" {
			return fmt.Errorf("phase %s, conditions %+v", p.Status.Phase, p.Status.Conditions)
		}
		return nil
	})
	return p
}

// instance is what the kubernetes provider made for one Proxy, found by
// its UID mark.
type instance struct {
	pods     []corev1.Pod
	services []corev1.Service
	cms      []corev1.ConfigMap
	netpols  []networkingv1.NetworkPolicy
	// secrets: the echo's token (the pods entry names an egressIPEcho)
	// and, with clientAuth, the users.
	secrets []corev1.Secret
}

func (cl *cluster) instanceObjects(t *testing.T, p *egressv1.Proxy) instance {
	t.Helper()
	ctx := context.Background()
	sel := client.MatchingLabels{provider.MarkUID: string(p.UID)}
	var pods corev1.PodList
	var svcs corev1.ServiceList
	var cms corev1.ConfigMapList
	var nps networkingv1.NetworkPolicyList
	var secs corev1.SecretList
	for _, l := range []client.ObjectList{&pods, &svcs, &cms, &nps, &secs} {
		if err := cl.c.List(ctx, l, client.InNamespace(p.Namespace), sel); err != nil {
			t.Fatal(err)
		}
	}
	return instance{pods.Items, svcs.Items, cms.Items, nps.Items, secs.Items}
}

func (in instance) all() []client.Object {
	var out []client.Object
	for i := range in.pods {
		out = append(out, &in.pods[i])
	}
	for i := range in.services {
		out = append(out, &in.services[i])
	}
	for i := range in.cms {
		out = append(out, &in.cms[i])
	}
	for i := range in.netpols {
		out = append(out, &in.netpols[i])
	}
	for i := range in.secrets {
		out = append(out, &in.secrets[i])
	}
	return out
}

func (in instance) count() string {
	return fmt.Sprintf("%d Pod, %d Service, %d ConfigMap, %d NetworkPolicy, %d Secret", len(in.pods), len(in.services), len(in.cms), len(in.netpols), len(in.secrets))
}

func (in instance) requireAll(t *testing.T) {
	t.Helper()
	if len(in.pods) != 1 || len(in.services) != 1 || len(in.cms) != 1 || len(in.netpols) != 1 || len(in.secrets) != 1 {
		t.Fatalf("instance objects: %s, want one of each", in.count())
	}
}

// waitGone waits for the Proxy and every object with its UID mark to be gone.
func (cl *cluster) waitGone(t *testing.T, p *egressv1.Proxy) {
	t.Helper()
	testenv.EventuallyNilWithin(t, slow, "Proxy "+p.Name+" and its objects gone", func() error {
		err := cl.c.Get(context.Background(), client.ObjectKeyFromObject(p), &egressv1.Proxy{})
		if err == nil {
			return fmt.Errorf("the Proxy is still there")
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		if left := cl.instanceObjects(t, p); len(left.all()) > 0 {
			return fmt.Errorf("left: %s", left.count())
		}
		return nil
	})
}

// testGoMemoryLimit: the manager read the container's memory limit from
// the downward API (MEMORY_LIMIT) and keeps Go 80Mi under it.
func (cl *cluster) testGoMemoryLimit(t *testing.T) {
	for _, pod := range cl.operatorPods(t) {
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		limit := pod.Spec.Containers[0].Resources.Limits.Memory().Value()
		want := fmt.Sprintf(`"bytes":%d,`, max(limit-80<<20, limit/2))
		logs, err := cl.kubectlOut(t, "-n", operatorNamespace, "logs", pod.Name, "-c", "manager")
		if err != nil {
			t.Fatal(err)
		}
		line := ""
		for l := range strings.SplitSeq(logs, "\n") {
			if strings.Contains(l, "Go memory limit set") {
				line = l
			}
		}
		if limit <= 0 || !strings.Contains(line, want) {
			t.Fatalf("pod %s (limit %d bytes): the manager logged %q, want %s", pod.Name, limit, line, want)
		}
		t.Logf("pod %s: %s", pod.Name, line)
	}
}

func (cl *cluster) operatorPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	sel, err := metav1.ParseToLabelSelector(operatorLabel)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.c.List(context.Background(), &l, client.InNamespace(operatorNamespace), client.MatchingLabels(sel.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func (cl *cluster) scaleOperator(t *testing.T, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: deploymentName}}
	if err := cl.c.Patch(context.Background(), d, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("scaling the operator to %d: %v", replicas, err)
	}
}

// podSpec is a busybox Pod that Pod Security "restricted" admits: non-root,
// read-only root, no capabilities, RuntimeDefault seccomp.
func (cl *cluster) podSpec(name, script string, serve bool) *corev1.Pod {
	c := corev1.Container{
		Name:            "main",
		Image:           cl.busybox,
		ImagePullPolicy: corev1.PullNever,
		Command:         []string{"/bin/busybox", "sh", "-c", script},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cl.ns, Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			ActiveDeadlineSeconds:         ptr.To[int64](1800),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				RunAsGroup:     ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
	if serve {
		c.VolumeMounts = []corev1.VolumeMount{{Name: "srv", MountPath: "/srv"}}
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(originPort)}},
			PeriodSeconds: 1,
		}
		pod.Spec.Volumes = []corev1.Volume{{Name: "srv", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	pod.Spec.Containers = []corev1.Container{c}
	return pod
}

// runPod creates a busybox Pod and waits until it is Ready with an IP.
func (cl *cluster) runPod(t *testing.T, name, script string, serve bool) *corev1.Pod {
	t.Helper()
	pod := cl.podSpec(name, script, serve)
	if err := cl.c.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating Pod %s: %v", name, err)
	}
	testenv.EventuallyNilWithin(t, slow, "Pod "+name+" Ready", func() error {
		if err := cl.c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && pod.Status.PodIP != "" {
				return nil
			}
		}
		return fmt.Errorf("phase %s, conditions %+v", pod.Status.Phase, pod.Status.Conditions)
	})
	return pod
}

// exec runs a command in the test namespace's Pod through kubectl exec
// (the kubelet's streaming), bounded so that a hung request fails.
func (cl *cluster) exec(t *testing.T, pod string, argv ...string) (string, error) {
	t.Helper()
	return cl.kubectlOut(t, append([]string{"-n", cl.ns, "exec", pod, "--", "/bin/busybox"}, argv...)...)
}

// accessLines are the access log lines of a Squid Pod (its output through
// kubectl logs, JSON lines among the cache log's), with the whole output.
func (cl *cluster) accessLines(t *testing.T, pod corev1.Pod) (string, []map[string]string, error) {
	t.Helper()
	logs, err := cl.kubectlOut(t, "-n", pod.Namespace, "logs", pod.Name)
	if err != nil {
		return "", nil, err
	}
	lines, err := squidtest.AccessLines(logs)
	return logs, lines, err
}

func (cl *cluster) kubectlOut(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return cl.kubectlWithin(t, time.Minute, args...)
}

// kubectlWithin runs kubectl, killed after bound.
func (cl *cluster) kubectlWithin(t *testing.T, bound time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, cl.kubectl, append([]string{"--kubeconfig", cl.kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
