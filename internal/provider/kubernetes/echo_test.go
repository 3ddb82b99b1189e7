package kubernetes

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// echoProvider is pureProvider with an echo and the operator's namespace.
func echoProvider(t *testing.T, echo, operatorNS string) *Provider {
	t.Helper()
	cfg := Config{}
	cfg.EgressIPEcho = echo
	p, err := newWithConfig("pods-eu", cfg, provider.Options{InstallationID: "inst-1", OperatorNamespace: operatorNS}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEchoBuild: with an echo, the instance's Secret holds the token file
// (and no users' file without users), the Pod mounts it, squid.conf names
// the file and never the token, and the NetworkPolicy admits the
// operator's Pods from its namespace to the proxy port; without the
// operator's namespace no such rule; without an echo none of it.
func TestEchoBuild(t *testing.T) {
	token, err := squid.NewEchoProberToken()
	if err != nil {
		t.Fatal(err)
	}
	p := echoProvider(t, "http://echo.example:8080/ip", "ops")
	s, err := p.resolve(baseRequest())
	if err != nil {
		t.Fatal(err)
	}
	s.echoToken = token

	sec := p.buildSecret(s)
	if got, ok := squid.EchoProberTokenOf(sec.Data[echoTokenKey]); !ok || got != token {
		t.Errorf("secret %s: the token file reads back as %q, %v", echoTokenKey, got, ok)
	}
	if _, ok := sec.Data[usersKey]; ok {
		t.Errorf("a Proxy without users has a %s key", usersKey)
	}
	pod := p.buildPod(s)
	mounted := false
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == usersVolume && m.MountPath == usersDir && m.ReadOnly)
	}
	if !mounted {
		t.Errorf("the Secret is not mounted read-only at %s: %+v", usersDir, pod.Spec.Containers[0].VolumeMounts)
	}
	conf := p.buildConfigMap(s).Data[confFile]
	if want := `acl egress_prober req_header ` + squid.EchoProberHeader + ` "` + usersDir + "/" + echoTokenKey + `"`; !strings.Contains(conf, want+"\n") {
		t.Errorf("squid.conf lacks %s:\n%s", want, conf)
	}
	if strings.Contains(conf, token) {
		t.Error("squid.conf (a ConfigMap) holds the token")
	}

	np := p.buildNetworkPolicy(s)
	var operatorRule *struct{ ns, labels string }
	for _, r := range np.Spec.Ingress {
		for _, f := range r.From {
			if f.PodSelector != nil {
				if len(r.Ports) != 1 || r.Ports[0].Port.IntVal != s.req.Port {
					t.Errorf("the operator's rule opens %+v, want the proxy port %d only", r.Ports, s.req.Port)
				}
				operatorRule = &struct{ ns, labels string }{f.NamespaceSelector.MatchLabels[corev1.LabelMetadataName], labelsString(f.PodSelector.MatchLabels)}
			}
		}
	}
	if operatorRule == nil || operatorRule.ns != "ops" || operatorRule.labels != labelsString(operatorPodLabels) {
		t.Errorf("NetworkPolicy ingress %+v: want the operator's Pods in ops admitted", np.Spec.Ingress)
	}

	outside := echoProvider(t, "http://echo.example:8080/ip", "")
	if np := outside.buildNetworkPolicy(s); len(np.Spec.Ingress) != 1 {
		t.Errorf("an operator outside the cluster: %d ingress rules, want the clients' only", len(np.Spec.Ingress))
	}

	plain := pureProvider(t, Config{})
	ps, err := plain.resolve(baseRequest())
	if err != nil {
		t.Fatal(err)
	}
	if ps.hasSecret() || strings.Contains(plain.buildConfigMap(ps).Data[confFile], "egress_prober") || len(plain.buildNetworkPolicy(ps).Spec.Ingress) != 1 {
		t.Error("an entry without an echo has a Secret, a prober ACL or an operator rule")
	}
}

func labelsString(m map[string]string) string {
	b, _ := yaml.Marshal(m)
	return string(b)
}

// TestOperatorPodLabelsMatchTheDeployment: the NetworkPolicy selects the
// operator's Pods by the labels config/manager gives them.
func TestOperatorPodLabelsMatchTheDeployment(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var d struct {
			Kind string
			Spec struct {
				Template struct {
					Metadata struct{ Labels map[string]string }
				}
			}
		}
		if err := yaml.Unmarshal(doc, &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for k, v := range operatorPodLabels {
			if d.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("the Deployment's Pods have %s=%q, the NetworkPolicy selects %q", k, d.Spec.Template.Metadata.Labels[k], v)
			}
		}
		return
	}
	t.Fatal("no Deployment in config/manager/manager.yaml")
}

// probeProxy is a forward proxy on 127.0.0.1 standing in for the Pod's
// Squid: it admits a request carrying the token of the instance's Secret,
// as the rendered squid.conf does (the real Squid is the e2e test's), and
// forwards it without the token.
type probeProxy struct {
	srv   *httptest.Server
	mu    sync.Mutex
	token string // what it admits; set once the Secret exists
	asked int
	bad   []string
}

func newProbeProxy(t *testing.T, port int) *probeProxy {
	t.Helper()
	pp := &probeProxy{}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	pp.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pp.mu.Lock()
		pp.asked++
		want := pp.token
		pp.mu.Unlock()
		if !r.URL.IsAbs() || want == "" || r.Header.Get(squid.EchoProberHeader) != want {
			pp.mu.Lock()
			pp.bad = append(pp.bad, r.URL.String())
			pp.mu.Unlock()
			w.Header().Set("X-Squid-Error", "ERR_ACCESS_DENIED 0")
			http.Error(w, "denied", http.StatusForbidden)
			return
		}
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, r.URL.String(), nil)
		out.Header.Set("User-Agent", r.Header.Get("User-Agent"))
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	pp.srv.Listener.Close()
	pp.srv.Listener = l
	pp.srv.Start()
	t.Cleanup(pp.srv.Close)
	return pp
}

// TestEchoThroughThePod: against a real API server, a running Pod's Get
// reports what the echo answered through the Pod's proxy (here on
// 127.0.0.1, the Pod's IP as the test's kubelet writes it), asked with the
// token from the instance's Secret and never without it; Delete ends the
// observation. The token reaches no log line and no error.
func TestEchoThroughThePod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var logs bytes.Buffer
	var logMu sync.Mutex
	ctx = logr.NewContext(ctx, funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 2}))

	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(squid.EchoProberHeader) != "" {
			http.Error(w, "the token reached the echo", http.StatusTeapot)
			return
		}
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host+"\n")
	}))
	defer echo.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pp := newProbeProxy(t, port)

	cs := adminClient(t)
	ns := newNamespace(t, "echo", nil)
	cfg := Config{}
	cfg.EgressIPEcho = echo.URL + "/ip"
	p := newAPIProvider(t, "inst-echo", cfg, nil)
	defer p.Close()
	b := bounded(p)
	req := provider.CreateRequest{Name: "proxy-echo-" + randHex(t), Namespace: ns, ProxyName: "echo", UID: "uid-echo",
		Port: int32(port), AllowedSourceRanges: []string{"10.1.0.0/16"}}
	inst, err := b.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the instance's Secret: %v", err)
	}
	token, ok := squid.EchoProberTokenOf(sec.Data[echoTokenKey])
	if !ok {
		t.Fatalf("the Secret holds no token file under %s", echoTokenKey)
	}
	pp.mu.Lock()
	pp.token = token
	pp.mu.Unlock()

	// The test's kubelet: Running on 127.0.0.1, where the stand-in listens.
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "127.0.0.1"
	pod.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got provider.Instance
	for got.Egress.IP == "" {
		if got, err = b.Get(ctx, inst.ID); err != nil {
			t.Fatalf("Get: %v", err)
		}
		if got.Egress.Error != "" {
			t.Fatalf("the echo's ask failed: %s", got.Egress.Error)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no egress address observed; last %+v", got.Egress)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if got.Egress.IP != "127.0.0.1" || got.Egress.Source != provider.EgressFromEcho || got.Egress.Confirmed.IsZero() {
		t.Errorf("Egress %+v: want 127.0.0.1 from the echo, confirmed", got.Egress)
	}
	pp.mu.Lock()
	asked, bad := pp.asked, pp.bad
	pp.mu.Unlock()
	if asked == 0 || len(bad) > 0 {
		t.Errorf("the Pod's proxy was asked %d times, %d without the token: %v", asked, len(bad), bad)
	}

	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	p.echoes.mu.Lock()
	left := len(p.echoes.byID)
	p.echoes.mu.Unlock()
	if left != 0 {
		t.Errorf("%d observations left after Delete", left)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), token) {
		t.Error("a log line holds the echo's token")
	}
	if logs.Len() == 0 {
		t.Error("no log line was captured: the sentinel checked nothing")
	}
}
