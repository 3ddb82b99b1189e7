// Package e2e runs a Proxy end to end on the libvirt test host
// (hack/libvirt): the operator in-process on a real kube-apiserver and
// etcd, its providers config naming the host under both type names (kvm
// and kvm2), the real provider over SSH to the real libvirtd, the real
// Debian guest booted from the provider's seed with the generated Squid
// cloud-config.
//
// It runs only inside the host's namespace: `make test-libvirt` (or
// `go test -exec hack/libvirt/run.sh ./test/libvirt/e2e` with
// KUBEBUILDER_ASSETS set); without a host it skips
// (internal/testenv/libvirthost).
//
// Network: everything this test reaches is on the namespace's loopback
// (the control plane, sshd, the image server, the origin, the port forward
// into the guest); the guest reaches the origin through QEMU's user-mode
// network (10.0.2.2 is the namespace's loopback) and nothing else (the
// namespace has no route out).
package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	libvirtrpc "github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/operator"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
	"github.com/egress-proxies-operator/egress-proxies-operator/test/libvirt/internal/lvtest"
)

func TestMain(m *testing.M) { lvtest.Main(m) }

const (
	squidPort  = 3128
	originBody = "hello through the operator's guest\n"
	// imageCachePrefix starts the image cache's volumes, which stay in the
	// pool by design (one download per host).
	imageCachePrefix = "egress-proxy-image_"
)

// providersYAML is the providers config: entry lv of type typ, and entry
// lv2 of type kvm2, both on the test host.
func providersYAML(typ string, block []byte) string { return providersYAMLWith(typ, block, "") }

// providersYAMLWith adds an entry-level line (e.g. an autoheal block) to
// entry lv.
func providersYAMLWith(typ string, block []byte, lvLine string) string {
	extra := ""
	if lvLine != "" {
		extra = "  " + lvLine + "\n"
	}
	return fmt.Sprintf("providers:\n- name: lv\n  type: %s\n  %s: %s\n%s- name: lv2\n  type: kvm2\n  kvm2: %s\n", typ, typ, block, extra, block)
}

func TestProxyEndToEnd(t *testing.T) {
	h := libvirthost.Require(t)
	guest := h.RequireGuest(t)
	l := h.Connect(t)
	pool, err := l.StoragePoolLookupByName(h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	dumped := false
	dumpLog := func() {
		if !dumped {
			dumped = true
			t.Logf("the operator's last log lines:\n%s", lvtest.OperatorLog.Tail(150))
		}
	}
	testenv.BeforeTimeout(t, dumpLog)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLog()
		}
	})
	volsBefore := libvirthost.VolumeNames(t, l, pool)
	env := lvtest.StartControlPlane(t)
	ctx := context.Background()
	imageURL, downloads := libvirthost.ImageServer(t, guest)
	// The entry's egress-IP echo, on the namespace's loopback: the guest
	// asks it through its Squid at the slirp host's address.
	echo := lvtest.StartEcho(t, "127.0.0.1")
	block := lvtest.WithEgressIPEcho(t, h.ProviderConfig(h.Socket, imageURL, guest),
		fmt.Sprintf("http://%s/ip?format=text", net.JoinHostPort(libvirthost.SlirpHost, fmt.Sprint(echo.Port))))

	dir := t.TempDir()
	configPath := filepath.Join(dir, "providers.yaml")
	lvtest.WriteFileAtomically(t, configPath, providersYAML(libvirt.TypeKVM, block))
	rec := lvtest.NewCalls()
	ns := env.Namespace(t, "e2e")
	// Registered before the operator starts, so it runs once the operator
	// stopped: a failed run leaves no guest on the shared host. A passing
	// one has removed everything itself (checked below).
	t.Cleanup(func() { lvtest.RemoveLeftovers(t, l, pool, provider.InstanceNamePrefix+ns+"-") })
	// The operator exports its traces to a real collector in the host's
	// namespace; they are read back once the operator stopped (which
	// flushes them): this cleanup runs after the operator's.
	collector := otelcol.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.Endpoint())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms
	var tracedUID string
	var userSecrets []string // the cloud-init's: the users' hashes
	t.Cleanup(func() {
		if !t.Failed() {
			checkTraces(t, collector, tracedUID, append(libvirtSentinels(t, h), userSecrets...))
		}
	})
	op := lvtest.StartOperator(t, env, configPath, ns, "e2e-", rec)

	// Both type names are accepted for the host, and check it.
	for _, name := range []string{"lv", "lv2"} {
		ph := lvtest.WaitHealthy(t, env, name)
		t.Logf("ProviderHealth %s: type %s, Healthy, target %s at %s, details %v", name, ph.Status.Type, ph.Status.Target, ph.Status.Address, ph.Status.Details)
	}

	// The Proxy asks its clients for a user and password from a Secret:
	// the guest's Squid checks them with Debian's basic_ncsa_auth against
	// the file the generated cloud-config wrote.
	const user, password = "alice", "correct horse in the guest"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	userSecrets = append(userSecrets, string(hash))
	users := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "users"},
		Data: map[string][]byte{"htpasswd": []byte(user + ":" + string(hash) + "\n")}}
	if err := env.Client.Create(ctx, users); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: "e2e"}
	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Spec: egressv1.ProxySpec{
		Provider: "lv", Port: squidPort, AllowedSourceRanges: []string{libvirthost.SlirpHost + "/32"},
		ClientAuth: &egressv1.ClientAuth{SecretRef: egressv1.HtpasswdSecretRef{Name: users.Name}},
	}}
	applied := time.Now()
	if err := env.Client.Create(ctx, px); err != nil {
		t.Fatal(err)
	}
	tracedUID = string(px.UID)
	px = lvtest.WaitReady(t, env, key, applied)
	toReady := time.Since(applied)
	t.Logf("TIMING apply->Ready %.0fs", toReady.Seconds())
	t.Logf("Proxy %s Ready: providerID %s, instance %s, status.ip %s, endpoint %s (image downloads: %d)",
		key, px.Status.ProviderID, px.Status.InstanceName, px.Status.IP, px.Status.Endpoint, downloads.Load())

	// status.ip is what the guest agent reports, read here on our own
	// connection; under user-mode networking it is the guest's own
	// address, which is reached only through the loopback forward.
	dom, err := l.DomainLookupByName(px.Status.InstanceName)
	if err != nil {
		t.Fatalf("the Proxy's domain %s: %v", px.Status.InstanceName, err)
	}
	mac, err := libvirthost.DomainMAC(l, dom)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := libvirthost.AgentAddress(l, dom, mac)
	if err != nil {
		t.Fatalf("the guest agent of %s: %v", dom.Name, err)
	}
	if px.Status.IP != agent.String() {
		t.Fatalf("status.ip %s, the guest agent reports %s on %s", px.Status.IP, agent, mac)
	}
	t.Logf("the guest agent reports %s on %s: status.ip matches (connected to only through the loopback forward)", agent, mac)

	fwd := libvirthost.AddForward(t, l, dom, squidPort)
	origin, hits := testenv.CountingOrigin(t, "127.0.0.1", originBody, false)
	originPort := origin.Listener.Addr().(*net.TCPAddr).Port
	target := fmt.Sprintf("http://%s/", net.JoinHostPort(libvirthost.SlirpHost, fmt.Sprint(originPort)))
	proxyClient := libvirthost.ProxyClientAs(fwd, user, password)
	testenv.EventuallyNilWithin(t, lvtest.ReadyBound, "a 200 from the origin through the guest's Squid", func() error {
		return libvirthost.GetBody(proxyClient, target, originBody)
	})
	t.Logf("GET %s through the guest's Squid (127.0.0.1:%d forwards to the guest's :%d) as %s: 200 %q", target, fwd, squidPort, user, originBody)

	// status.egressIP is what the echo saw, asked by the guest's reporter
	// through its own Squid.
	px = waitEgressIP(t, env, key, px.Status.ProviderID, echo)
	t.Logf("TIMING apply->status.egressIP %.0fs: %s (source %s, confirmed %s, on %s); the echo saw %v",
		time.Since(applied).Seconds(), px.Status.EgressIP, px.Status.Egress.Source, px.Status.Egress.LastConfirmed, px.Status.Egress.ProviderID, echo.Seen())
	hitsBefore := hits.Load()
	for what, c := range map[string]*http.Client{
		"no credentials":     libvirthost.ProxyClient(fwd),
		"a wrong password":   libvirthost.ProxyClientAs(fwd, user, password+"x"),
		"an unknown user":    libvirthost.ProxyClientAs(fwd, "mallory", password),
		"the user uppercase": libvirthost.ProxyClientAs(fwd, "Alice", password),
	} {
		resp, err := c.Get(target)
		if err != nil {
			t.Fatalf("GET %s with %s: %v", target, what, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") != clientauth.Challenge {
			t.Fatalf("GET %s with %s: %d %q, want 407 with %q", target, what, resp.StatusCode, resp.Header.Get("Proxy-Authenticate"), clientauth.Challenge)
		}
	}
	if n := hits.Load(); n != hitsBefore {
		t.Fatalf("a request without valid credentials reached the origin")
	}
	t.Logf("GET %s with no credentials, a wrong password, an unknown user, the user in another case: 407 %s, the origin not reached", target, clientauth.Challenge)

	// A client outside allowedSourceRanges: the guest itself, from its own
	// address. Squid answers 403 without fetching: the origin's count
	// stays where it was.
	hitsBefore = hits.Load()
	refused := fmt.Sprintf("http://%s/refused", net.JoinHostPort(libvirthost.SlirpHost, fmt.Sprint(originPort)))
	out := libvirthost.RequestFromGuest(t, l, dom, agent, squidPort, refused)
	status, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(status, " 403 ") || !strings.Contains(out, "ERR_ACCESS_DENIED") {
		t.Fatalf("GET %s from %s (outside allowedSourceRanges %s/32): want Squid's 403 ERR_ACCESS_DENIED, got:\n%s",
			refused, agent, libvirthost.SlirpHost, out)
	}
	if n := hits.Load(); n != hitsBefore {
		t.Fatalf("the refused request reached the origin: %d requests, %d before it", n, hitsBefore)
	}
	t.Logf("GET %s from %s (outside allowedSourceRanges): %s, ERR_ACCESS_DENIED, the origin not reached", refused, agent, strings.TrimSpace(status))

	px, dom = servingSignal(t, env, op, rec, l, configPath, block, key, px, dom, echo)

	switchType(t, env, op, rec, l, configPath, block, key, px, dom)

	// Delete: the Proxy goes, and with it the domain and every volume of
	// the instance; the image cache stays.
	if err := env.Client.Delete(ctx, px); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	testenv.EventuallyNilWithin(t, 5*time.Minute, "the Proxy gone", func() error {
		err := env.Client.Get(ctx, key, &egressv1.Proxy{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("Proxy %s still there", key)
	})
	t.Logf("Proxy %s gone %.1fs after its delete", key, time.Since(deleted).Seconds())
	if _, err := l.DomainLookupByName(px.Status.InstanceName); !libvirthost.IsError(err, libvirtrpc.ErrNoDomain) {
		t.Fatalf("domain %s after the Proxy is gone: lookup gives %v, want no domain", px.Status.InstanceName, err)
	}
	// The instance's volumes are named after it (<instance>_...); the
	// other libvirt tests may be filling the same pool meanwhile.
	after := libvirthost.VolumeNames(t, l, pool)
	var left, cache []string
	for _, v := range after {
		switch {
		case strings.HasPrefix(v, px.Status.InstanceName):
			left = append(left, v)
		case strings.HasPrefix(v, imageCachePrefix) && !slices.Contains(volsBefore, v):
			cache = append(cache, v)
		}
	}
	if len(left) > 0 {
		t.Fatalf("pool %s after the Proxy is gone holds volumes of the test: %v", h.Pool, left)
	}
	t.Logf("domain %s gone; pool %s holds no volume of the test (%d volumes in all; the image cache stays: new in this test %v)",
		px.Status.InstanceName, h.Pool, len(after), cache)
}

// switchType rewrites entry lv from type kvm to kvm2 (same name, same
// block): the registry rebuilds it, the kvm2 provider reads the same
// instance Running (both names write and read the same marks), and the
// Proxy stays Ready on the same providerID, with no new domain.
func switchType(t *testing.T, env *testenv.Env, op *operator.Operator, rec *lvtest.Calls, l *libvirtrpc.Libvirt,
	configPath string, block []byte, key client.ObjectKey, px *egressv1.Proxy, dom libvirtrpc.Domain) {
	t.Helper()
	ctx := context.Background()
	creates, _ := rec.Snapshot(libvirt.TypeKVM2)
	lvtest.WriteFileAtomically(t, configPath, providersYAML(libvirt.TypeKVM2, block))
	testenv.EventuallyNil(t, "entry lv rebuilt as type kvm2", func() error {
		for _, e := range op.Registry.Entries() {
			if e.Name == "lv" && e.Type == libvirt.TypeKVM2 {
				return nil
			}
		}
		return fmt.Errorf("entry lv is not kvm2 yet")
	})
	testenv.EventuallyNilWithin(t, 3*time.Minute, "the kvm2 provider of lv reading the instance Running", func() error {
		_, gets := rec.Snapshot(libvirt.TypeKVM2)
		for _, g := range gets {
			if g.ID == px.Status.ProviderID && g.State == provider.StateRunning && g.IP == px.Status.IP {
				return nil
			}
		}
		return fmt.Errorf("no Get of %s by a kvm2 provider answered Running with %s yet (%d answers)", px.Status.ProviderID, px.Status.IP, len(gets))
	})
	got := &egressv1.Proxy{}
	if err := env.Client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, egressv1.ConditionReady) ||
		got.Status.ProviderID != px.Status.ProviderID || got.Status.InstanceName != px.Status.InstanceName {
		t.Fatalf("after the switch to kvm2: Ready %v, providerID %s, instance %s; want Ready on %s, %s",
			meta.FindStatusCondition(got.Status.Conditions, egressv1.ConditionReady), got.Status.ProviderID, got.Status.InstanceName,
			px.Status.ProviderID, px.Status.InstanceName)
	}
	if now, _ := rec.Snapshot(libvirt.TypeKVM2); len(now) != len(creates) {
		// A Create that adopts is harmless, but none is due: Get said Running.
		t.Logf("kvm2 providers were asked to create %v after the switch", now[len(creates):])
	}
	again, err := l.DomainLookupByName(px.Status.InstanceName)
	if err != nil {
		t.Fatalf("domain %s after the switch: %v", px.Status.InstanceName, err)
	}
	if again.UUID != dom.UUID {
		t.Fatalf("domain %s after the switch has UUID %x, before %x: a new domain", again.Name, again.UUID, dom.UUID)
	}
	doms, _, err := l.ConnectListAllDomains(1, libvirtrpc.ConnectListDomainsActive|libvirtrpc.ConnectListDomainsInactive)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doms {
		if d.Name != again.Name && strings.HasPrefix(d.Name, "proxy-"+key.Namespace) {
			t.Fatalf("after the switch the host has another domain of the Proxy's namespace: %s", d.Name)
		}
	}
	t.Logf("entry lv switched from kvm to kvm2: Proxy still Ready on %s, the kvm2 provider reads it Running at %s, same domain %s (UUID %x)",
		got.Status.ProviderID, got.Status.IP, again.Name, again.UUID)
}

// startControlPlane is testenv.Start for the host's namespace: its only
// addresses are loopback ones and it has no default route, from which
// kube-apiserver would derive its advertise address.
// waitEgressIP waits until the Proxy shows an egress address confirmed on
// instance id, and checks it is the address the echo saw, asked for the
// entry's path by the reporter, with nothing about the clients.
func waitEgressIP(t *testing.T, env *testenv.Env, key client.ObjectKey, id string, echo *lvtest.EchoServer) *egressv1.Proxy {
	t.Helper()
	px := &egressv1.Proxy{}
	testenv.EventuallyNilWithin(t, 3*time.Minute, "status.egressIP confirmed on "+id, func() error {
		if err := env.Client.Get(context.Background(), key, px); err != nil {
			return err
		}
		c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionEgressIPObserved)
		if px.Status.Egress == nil || px.Status.Egress.ProviderID != id || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("egressIP %q, egress %+v, condition %+v", px.Status.EgressIP, px.Status.Egress, c)
		}
		return nil
	})
	reqs := echo.Seen()
	if len(reqs) == 0 {
		t.Fatalf("status.egressIP %s, but the echo was never asked", px.Status.EgressIP)
	}
	for _, r := range reqs {
		if r.From != px.Status.EgressIP || r.Path != "/ip?format=text" || r.UserAgent != "egress-proxies-operator" || len(r.Forwarded) > 0 {
			t.Fatalf("status.egressIP %s (source %s), the echo saw %+v", px.Status.EgressIP, px.Status.Egress.Source, r)
		}
	}
	if px.Status.Egress.Source != string(provider.EgressFromEcho) {
		t.Fatalf("status.egress.source %s, want %s", px.Status.Egress.Source, provider.EgressFromEcho)
	}
	return px
}
