// Package pool runs Proxies with addresses from an entry's addressPool on
// the libvirt test host (hack/libvirt), with the operator in-process on a
// real kube-apiserver and etcd, the real provider and real Debian guests.
// A package of its own so `go test` runs it beside test/libvirt/e2e once
// the conformance suite is done, not beside both (guests under emulation
// on two cores). Without a host it skips (internal/testenv/libvirthost).
package pool

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	libvirtrpc "github.com/digitalocean/go-libvirt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
	"github.com/egress-proxies-operator/egress-proxies-operator/test/libvirt/internal/lvtest"
)

func TestMain(m *testing.M) { lvtest.Main(m) }

const (
	squidPort  = 3128
	originBody = "hello through the pool's guest\n"
)

// TestPoolAddressEndToEnd: a kvm entry whose guests sit on the host's
// bridge with addresses from the entry's addressPool (issue 23, part 3).
// The bridge is the namespace's own, with no uplink; the namespace gives it
// the first address of a documentation range (libvirthost.BridgeNet), where
// the echo and the origin listen, and the guests get the next ones, set by
// cloud-init from the seed's network-config. The test is the pool's
// clients: it reaches each guest's Squid on its pool address directly.
//
// It shows: each Proxy Ready on its own pool address, which the echo saw as
// the address the guest egresses with; a spec change replacing the
// instance on the same address, never two instances on it, with the gap
// a client sees measured; the exhausted pool's QuotaExceeded; and the
// deletions releasing the addresses (the IPAddress objects gone) and
// leaving nothing on the host.
func TestPoolAddressEndToEnd(t *testing.T) {
	b := lvtest.StartOnTheBridge(t)
	h, guest, l, pool, gateway := b.Host, b.Guest, b.L, b.Pool, b.Gateway
	first, second := lvtest.Nth(libvirthost.BridgeNet, 10), lvtest.Nth(libvirthost.BridgeNet, 11) // the pool: two addresses

	env := lvtest.StartControlPlane(t)
	ctx := context.Background()
	imageURL, _ := libvirthost.ImageServer(t, guest)
	echo := lvtest.StartEcho(t, gateway.String())
	origin, hits := testenv.CountingOrigin(t, gateway.String(), originBody, false)
	target := "http://" + origin.Listener.Addr().String() + "/"

	block := lvtest.OnBridge(t, h.ProviderConfig(h.Socket, imageURL, guest), h.Bridge, gateway)
	block = lvtest.WithEgressIPEcho(t, block, fmt.Sprintf("http://%s/ip?format=text", net.JoinHostPort(gateway.String(), fmt.Sprint(echo.Port))))
	poolLine := fmt.Sprintf("addressPool: {addresses: [%s-%s], prefix: %d, gateway: %s}", first, second, libvirthost.BridgeNet.Bits(), gateway)
	configPath := t.TempDir() + "/providers.yaml"
	lvtest.WriteFileAtomically(t, configPath, fmt.Sprintf("providers:\n- name: pool\n  type: kvm\n  kvm: %s\n  %s\n", block, poolLine))
	ns := env.Namespace(t, "pool")
	prefix := provider.InstanceNamePrefix + ns + "-"
	t.Cleanup(func() { lvtest.RemoveLeftovers(t, l, pool, prefix) })

	lvtest.StartOperator(t, env, configPath, ns, "e2e-pool-", lvtest.NewCalls())
	lvtest.WaitHealthy(t, env, "pool")

	// Two Proxies at once: each gets an address of its own. Only one
	// boots to the end (guests under emulation are slow; the allocation
	// and the instance's address are what two shows), and a third finds
	// the pool exhausted.
	newPoolProxy := func(name string) *egressv1.Proxy {
		return &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: egressv1.ProxySpec{
			Provider: "pool", Port: squidPort, AllowedSourceRanges: []string{gateway.String() + "/32"}}}
	}
	applied := time.Now()
	for _, name := range []string{"one", "two"} {
		if err := env.Client.Create(ctx, newPoolProxy(name)); err != nil {
			t.Fatal(err)
		}
	}
	keyOne, keyTwo, keyThree := client.ObjectKey{Namespace: ns, Name: "one"}, client.ObjectKey{Namespace: ns, Name: "two"}, client.ObjectKey{Namespace: ns, Name: "three"}
	two := waitPoolAddress(t, env, keyTwo)
	if err := env.Client.Create(ctx, newPoolProxy("three")); err != nil {
		t.Fatal(err)
	}
	_, c := lvtest.WaitCondition(t, env, keyThree, time.Now(), "QuotaExceeded", func(c *metav1.Condition) bool {
		return c.Reason == egressv1.ReasonQuotaExceeded
	})
	if !strings.Contains(c.Message, "has no free address") || !strings.Contains(c.Message, "providers config entry pool") {
		t.Fatalf("Proxy three: %s %q", c.Reason, c.Message)
	}
	t.Logf("Proxy three: Ready=%s %s: %s", c.Status, c.Reason, c.Message)
	for _, k := range []client.ObjectKey{keyThree, keyTwo} {
		deleteProxy(t, env, k)
	}

	one := lvtest.WaitReady(t, env, keyOne, applied)
	t.Logf("TIMING apply->Ready %.0fs", time.Since(applied).Seconds())
	addrOne, addrTwo := poolAddressOf(t, one), poolAddressOf(t, two)
	if addrOne == addrTwo || !inRange(addrOne, first, second) || !inRange(addrTwo, first, second) {
		t.Fatalf("pool addresses %s and %s, want the two different addresses of %s-%s", addrOne, addrTwo, first, second)
	}
	if one.Status.IP != addrOne.String() || one.Status.Endpoint != net.JoinHostPort(one.Status.IP, fmt.Sprint(squidPort)) {
		t.Fatalf("Proxy one: status.ip %s, endpoint %s, pool address %s", one.Status.IP, one.Status.Endpoint, addrOne)
	}
	t.Logf("Proxy one Ready on its pool address %s (IPAddress %s/%s, pool %s, instance %s); Proxy two had %s (instance %s, deleted before its boot ended)",
		one.Status.IP, ns, one.Status.EgressAddress.Name, one.Status.EgressAddress.Pool, one.Status.ProviderID, addrTwo, two.Status.ProviderID)

	// What the destinations see: the echo on the namespace's side of the
	// bridge saw the guest's reporter come from its pool address.
	one = waitPoolEgress(t, env, keyOne, one.Status.ProviderID, addrOne, echo, applied)
	t.Logf("TIMING apply->status.egressIP %.0fs: Proxy one egresses as %s (source %s); the echo saw %v",
		time.Since(applied).Seconds(), one.Status.EgressIP, one.Status.Egress.Source, echo.FromAddresses())
	cl := proxyClientTo(addrOne)
	testenv.EventuallyNilWithin(t, lvtest.ReadyBound, "a 200 through "+addrOne.String(), func() error { return libvirthost.GetBody(cl, target, originBody) })
	t.Logf("GET %s through %s:%d: 200 (the origin counted %d)", target, addrOne, squidPort, hits.Load())

	// A spec change replaces one's instance on the same address: the old
	// instance goes first. A client asks through the address all along;
	// the domains are counted all along.
	watch := startReplacementWatch(t, l, prefix+"one-", addrOne, target)
	oldID, oldName := one.Status.ProviderID, one.Status.InstanceName
	one.Spec.AllowedSourceRanges = append(one.Spec.AllowedSourceRanges, gateway.Next().String()+"/32")
	changed := time.Now()
	if err := env.Client.Update(ctx, one); err != nil {
		t.Fatal(err)
	}
	// Nothing serves while the old instance goes and the new one boots.
	_, gapCond := lvtest.WaitCondition(t, env, keyOne, changed, "not Ready while replaced", func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse
	})
	one = lvtest.WaitReady(t, env, keyOne, changed)
	readyAgain := time.Since(changed)
	t.Logf("while replaced: Ready=%s %s: %s (instance %s before)", gapCond.Status, gapCond.Reason, gapCond.Message, oldName)
	one = waitPoolEgress(t, env, keyOne, one.Status.ProviderID, addrOne, echo, changed)
	w := watch.stop()
	if one.Status.ProviderID == oldID || poolAddressOf(t, one) != addrOne {
		t.Fatalf("after the change: instance %s (was %s), pool address %s (was %s)", one.Status.ProviderID, oldID, poolAddressOf(t, one), addrOne)
	}
	if w.maxDomains > 1 {
		t.Fatalf("%d domains of Proxy one ran at once during its replacement: the pool address was on two instances", w.maxDomains)
	}
	if w.gap <= 0 {
		t.Fatalf("the client saw no gap (%v): the replacement did not go through the address", w.gap)
	}
	t.Logf("TIMING spec change->Ready on the new instance %.0fs; the client through %s: last answer %.1fs after the change, first again %.1fs after it: a gap of %.1fs (%d asks failed); at most %d domain of Proxy one at a time",
		readyAgain.Seconds(), addrOne, w.lastBefore.Sub(changed).Seconds(), w.firstAfter.Sub(changed).Seconds(), w.gap.Seconds(), w.failed, w.maxDomains)
	t.Logf("the echo saw %s from the new instance %s (egressIP %s, confirmed %s)", addrOne, one.Status.ProviderID, one.Status.EgressIP, one.Status.Egress.LastConfirmed)

	// Deleting the Proxies releases their addresses: the claims and the
	// IPAddress objects go, and with them the domains and their volumes.
	deleteProxy(t, env, keyOne)
	deleted := time.Now()
	testenv.EventuallyNilWithin(t, 5*time.Minute, "the Proxies, their claims and addresses gone", func() error {
		for _, list := range []client.ObjectList{&egressv1.ProxyList{}, &ipamv1.IPAddressClaimList{}, &ipamv1.IPAddressList{}} {
			if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				return err
			}
			if n := meta.LenList(list); n > 0 {
				return fmt.Errorf("%d %T left", n, list)
			}
		}
		return nil
	})
	t.Logf("Proxies, IPAddressClaims and IPAddresses of namespace %s gone %.1fs after the deletes", ns, time.Since(deleted).Seconds())
	doms, _, err := l.ConnectListAllDomains(1, libvirtrpc.ConnectListDomainsActive|libvirtrpc.ConnectListDomainsInactive)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doms {
		if strings.HasPrefix(d.Name, prefix) {
			t.Fatalf("domain %s left on the host", d.Name)
		}
	}
	var left []string
	for _, v := range libvirthost.VolumeNames(t, l, pool) {
		if strings.HasPrefix(v, prefix) {
			left = append(left, v)
		}
	}
	if len(left) > 0 {
		t.Fatalf("volumes left in pool %s: %v", h.Pool, left)
	}
	t.Logf("no domain and no volume of namespace %s left on the host", ns)
	if err := env.Client.Get(ctx, keyOne, &egressv1.Proxy{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Proxy one: %v", err)
	}
}

// waitPoolAddress waits until the Proxy's claim is bound and its instance
// is being made on the address.
func waitPoolAddress(t *testing.T, env *testenv.Env, key client.ObjectKey) *egressv1.Proxy {
	t.Helper()
	px := &egressv1.Proxy{}
	testenv.EventuallyNilWithin(t, 2*time.Minute, "Proxy "+key.Name+"'s pool address and instance", func() error {
		if err := env.Client.Get(context.Background(), key, px); err != nil {
			return err
		}
		if st := px.Status.EgressAddress; st == nil || st.Address == "" || px.Status.ProviderID == "" {
			return fmt.Errorf("status.egressAddress %+v, providerID %q", st, px.Status.ProviderID)
		}
		return nil
	})
	return px
}

func deleteProxy(t *testing.T, env *testenv.Env, key client.ObjectKey) {
	t.Helper()
	px := &egressv1.Proxy{}
	if err := env.Client.Get(context.Background(), key, px); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), px); err != nil {
		t.Fatal(err)
	}
}

func poolAddressOf(t *testing.T, px *egressv1.Proxy) netip.Addr {
	t.Helper()
	if px.Status.EgressAddress == nil {
		t.Fatalf("Proxy %s has no status.egressAddress", px.Name)
	}
	a, err := netip.ParseAddr(px.Status.EgressAddress.Address)
	if err != nil {
		t.Fatalf("Proxy %s: status.egressAddress %+v", px.Name, px.Status.EgressAddress)
	}
	return a
}

func inRange(a, lo, hi netip.Addr) bool { return a.Compare(lo) >= 0 && a.Compare(hi) <= 0 }

// proxyClientTo sends through the Squid at addr, never reusing a
// connection (each ask tells whether the address answers now).
func proxyClientTo(addr netip.Addr) *http.Client {
	u := &url.URL{Scheme: "http", Host: net.JoinHostPort(addr.String(), fmt.Sprint(squidPort))}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}}
}

// waitPoolEgress waits until the Proxy's egress address is confirmed on
// instance id and is its pool address, and checks the echo saw the
// reporter come from that address since since.
func waitPoolEgress(t *testing.T, env *testenv.Env, key client.ObjectKey, id string, want netip.Addr, echo *lvtest.EchoServer, since time.Time) *egressv1.Proxy {
	t.Helper()
	px := &egressv1.Proxy{}
	testenv.EventuallyNilWithin(t, 3*time.Minute, "status.egressIP "+want.String()+" confirmed on "+id, func() error {
		if err := env.Client.Get(context.Background(), key, px); err != nil {
			return err
		}
		c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionEgressIPObserved)
		if px.Status.Egress == nil || px.Status.Egress.ProviderID != id || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("egressIP %q, egress %+v, condition %+v", px.Status.EgressIP, px.Status.Egress, c)
		}
		return nil
	})
	if px.Status.EgressIP != want.String() || px.Status.Egress.Source != string(provider.EgressFromEcho) {
		t.Fatalf("Proxy %s: status.egressIP %s (source %s), want its pool address %s seen by the echo", key.Name, px.Status.EgressIP, px.Status.Egress.Source, want)
	}
	if !echo.SawFrom(want.String(), since) {
		t.Fatalf("status.egressIP %s, but the echo saw no request from it since %s: %v", want, since.Format(time.RFC3339), echo.FromAddresses())
	}
	return px
}

// replacementWatch asks through a pool address and counts a Proxy's
// running domains, every half second, while its instance is replaced.
type replacementWatch struct {
	stopCh chan struct{}
	done   chan replacementSeen
}

type replacementSeen struct {
	maxDomains             int
	lastBefore, firstAfter time.Time // the client's last answer before the gap, its first after
	gap                    time.Duration
	failed                 int
}

func startReplacementWatch(t *testing.T, l *libvirtrpc.Libvirt, domainPrefix string, addr netip.Addr, target string) *replacementWatch {
	t.Helper()
	w := &replacementWatch{stopCh: make(chan struct{}), done: make(chan replacementSeen, 1)}
	c := proxyClientTo(addr)
	// The watch starts from an answer, so the gap has a start.
	var s replacementSeen
	testenv.EventuallyNilWithin(t, time.Minute, "an answer through "+addr.String()+" before the change", func() error {
		err := libvirthost.GetBody(c, target, originBody)
		s.lastBefore = time.Now()
		return err
	})
	go func() {
		inGap := false
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			doms, _, err := l.ConnectListAllDomains(1, libvirtrpc.ConnectListDomainsActive)
			if err == nil {
				n := 0
				for _, d := range doms {
					if strings.HasPrefix(d.Name, domainPrefix) {
						n++
					}
				}
				s.maxDomains = max(s.maxDomains, n)
			}
			now := time.Now()
			if libvirthost.GetBody(c, target, originBody) == nil {
				if inGap && s.firstAfter.IsZero() {
					s.firstAfter = now
					s.gap = s.firstAfter.Sub(s.lastBefore)
				}
				if !inGap {
					s.lastBefore = now
				}
			} else {
				s.failed++
				inGap = true
			}
			select {
			case <-w.stopCh:
				w.done <- s
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *replacementWatch) stop() replacementSeen {
	close(w.stopCh)
	return <-w.done
}
