// Package lvtest holds what the suites on the libvirt test host share
// (test/libvirt/e2e, test/libvirt/pool): a control plane, the operator
// in-process with its libvirt providers observed, waits on a Proxy's
// conditions, the entry's egress-IP echo, and the removal of what a failed
// run left on the shared host.
package lvtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	libvirtrpc "github.com/digitalocean/go-libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/operator"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

const (
	// ReadyBound only stops a hung test: the guest boots under emulation
	// in about a minute on an idle machine, several on a busy one.
	ReadyBound = 12 * time.Minute
	// RunningResync is the operator's --running-resync in these tests: how
	// often a running Proxy's instance is read again.
	RunningResync = 15 * time.Second
)

// NewCalls is an empty record of the providers' answers.
func NewCalls() *Calls {
	return &Calls{creates: map[string][]string{}, gets: map[string][]provider.Instance{}}
}

// OperatorLog keeps the operator's log Lines (controller-runtime's global
// logger, set once per process); a failed test prints its tail.
var OperatorLog = &Lines{}

// Main is a suite's TestMain: the operator's log goes to OperatorLog.
func Main(m *testing.M) {
	ctrl.SetLogger(funcr.New(OperatorLog.add, funcr.Options{Verbosity: 1}))
	os.Exit(m.Run())
}

type Lines struct {
	mu sync.Mutex
	l  []string
}

func (l *Lines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, prefix+" "+args)
}

func (l *Lines) Tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.l[max(0, len(l.l)-n):], "\n")
}

// Calls records what the providers built under each type name answered,
// so the test can tell which type served the Proxy.
type Calls struct {
	mu      sync.Mutex
	creates map[string][]string            // type -> instance names
	gets    map[string][]provider.Instance // type -> successful Get answers
}

// types is the registry's own constructor map (both type names must be
// registered there) with the kvm and kvm2 providers observed.
func (c *Calls) Types(t *testing.T, base map[string]registry.Type) map[string]registry.Type {
	t.Helper()
	for _, typ := range libvirt.TypeNames {
		orig, ok := base[typ]
		if !ok {
			t.Fatalf("registry.DefaultTypes() has no type %s", typ)
		}
		wrapped := orig
		wrapped.New = func(name string, settings any, opts provider.Options) (provider.Provider, error) {
			p, err := orig.New(name, settings, opts)
			if err != nil {
				return nil, err
			}
			full, ok := p.(libvirthost.FullProvider)
			if !ok {
				return nil, fmt.Errorf("type %s built a %T, which is not a libvirthost.FullProvider (Checker, SecondaryLister, GroupPeersUpdater, io.Closer)", typ, p)
			}
			return libvirthost.Observe(full, libvirthost.Hooks{
				Create: func(req provider.CreateRequest, _ provider.Instance, err error) {
					c.mu.Lock()
					defer c.mu.Unlock()
					c.creates[typ] = append(c.creates[typ], req.Name)
				},
				Get: func(_ string, inst provider.Instance, err error) {
					if err != nil {
						return
					}
					c.mu.Lock()
					defer c.mu.Unlock()
					c.gets[typ] = append(c.gets[typ], inst)
				},
			}), nil
		}
		base[typ] = wrapped
	}
	return base
}

func (c *Calls) Snapshot(typ string) (creates []string, gets []provider.Instance) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.creates[typ]), slices.Clone(c.gets[typ])
}

func WriteFileAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".providers.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func StartControlPlane(t *testing.T) *testenv.Env {
	t.Helper()
	env, err := testenv.New(testenv.WithLogf(t.Logf), testenv.WithAdvertiseAddress("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	return env
}

func WaitHealthy(t *testing.T, env *testenv.Env, name string) *egressv1.ProviderHealth {
	t.Helper()
	ph := &egressv1.ProviderHealth{}
	testenv.EventuallyNilWithin(t, 2*time.Minute, "ProviderHealth "+name+" Healthy", func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ph); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(ph.Status.Conditions, egressv1.ConditionHealthy); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("ProviderHealth %s: %+v", name, c)
		}
		return nil
	})
	return ph
}

// WaitReady waits for the Proxy's Ready condition, logging each new
// message on the way (the provider's progress).
func WaitReady(t *testing.T, env *testenv.Env, key client.ObjectKey, since time.Time) *egressv1.Proxy {
	t.Helper()
	px, _ := WaitCondition(t, env, key, since, "Ready", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	return px
}

// WaitCondition waits until the Proxy's Ready condition satisfies ok,
// logging each change of its reason or message since since.
func WaitCondition(t *testing.T, env *testenv.Env, key client.ObjectKey, since time.Time, what string, ok func(*metav1.Condition) bool) (*egressv1.Proxy, metav1.Condition) {
	t.Helper()
	px := &egressv1.Proxy{}
	var got metav1.Condition
	last := ""
	testenv.EventuallyNilWithin(t, ReadyBound, "Proxy "+key.String()+" "+what, func() error {
		if err := env.Client.Get(context.Background(), key, px); err != nil {
			return err
		}
		c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady)
		if c == nil {
			return fmt.Errorf("no Ready condition yet")
		}
		if line := c.Reason + ": " + c.Message; line != last {
			t.Logf("%5.1fs %s Ready=%s %s", time.Since(since).Seconds(), key.Name, c.Status, line)
			last = line
		}
		if !ok(c) {
			return fmt.Errorf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
		}
		got = *c
		return nil
	})
	return px, got
}

func RandHex(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// EchoServer is the entry's egress-IP echo: it answers each GET with the
// caller's address as text, and keeps what it saw.
type EchoServer struct {
	Port int
	mu   sync.Mutex
	reqs []EchoRequest
}

type EchoRequest struct {
	At                    time.Time
	From, Path, UserAgent string
	// forwarded holds the headers that would tell the echo about the
	// proxy's clients; the proxies remove them.
	Forwarded []string
}

func StartEcho(t *testing.T, host string) *EchoServer {
	t.Helper()
	e := &EchoServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		req := EchoRequest{At: time.Now(), From: host, Path: r.URL.RequestURI(), UserAgent: r.UserAgent()}
		for _, h := range egress.HiddenRequestHeaders {
			if v := r.Header.Get(h); v != "" {
				req.Forwarded = append(req.Forwarded, h+": "+v)
			}
		}
		e.mu.Lock()
		e.reqs = append(e.reqs, req)
		e.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, host)
	}))
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	e.Port = ln.Addr().(*net.TCPAddr).Port
	return e
}

func (e *EchoServer) Seen() []EchoRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.reqs)
}

// WithEgressIPEcho is the provider block with egressIPEcho set.
func WithEgressIPEcho(t *testing.T, block []byte, url string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(block, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["egressIPEcho"] = url
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// StartOperator runs the operator in-process on env for namespace ns, its
// libvirt providers observed by rec, until the test ends. Register what
// must run after it stopped before calling it.
func StartOperator(t *testing.T, env *testenv.Env, configPath, ns, installation string, rec *Calls) *operator.Operator {
	t.Helper()
	op, err := operator.New(context.Background(), env.Config, operator.Options{
		ProvidersConfig: configPath, MetricsAddr: "0", ProbeAddr: "0",
		InstallationID: installation + RandHex(t), Namespaces: []string{ns}, SkipControllerNameValidation: true,
		RunningResync: RunningResync,
		Types:         rec.Types(t, registry.DefaultTypes()),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the operator ended with %v", err)
		}
	})
	return op
}

// RemoveLeftovers removes what a failed run left of the test's instances.
func RemoveLeftovers(t *testing.T, l *libvirtrpc.Libvirt, pool libvirtrpc.StoragePool, prefix string) {
	doms, _, err := l.ConnectListAllDomains(1, libvirtrpc.ConnectListDomainsActive|libvirtrpc.ConnectListDomainsInactive)
	if err != nil {
		t.Errorf("listing the domains: %v", err)
	}
	for _, d := range doms {
		if strings.HasPrefix(d.Name, prefix) && libvirthost.RemoveDomain(t, l, d.Name) {
			t.Logf("removed domain %s the test left", d.Name)
		}
	}
	if vols := libvirthost.RemoveVolumes(t, l, pool, func(v string) bool { return strings.HasPrefix(v, prefix) }); len(vols) > 0 {
		t.Logf("removed volumes the test left: %v", vols)
	}
}

// sawFrom says whether the echo saw a request from addr since since.
func (e *EchoServer) SawFrom(addr string, since time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.reqs {
		if r.From == addr && !r.At.Before(since) {
			return true
		}
	}
	return false
}

// fromAddresses counts the echo's requests by the address they came from.
func (e *EchoServer) FromAddresses() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{}
	for _, r := range e.reqs {
		out[r.From]++
	}
	return out
}
