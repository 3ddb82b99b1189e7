package e2e

// The serving signal on a real guest (issue 22): the guest's reporter,
// installed by the provider's vendor-data, publishes whether Squid
// answers; the provider reads it through the QEMU guest agent. These steps
// share TestProxyEndToEnd's guest, and boot two more: the autoheal's
// replacement and, beside it, a guest whose user-data fails.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	libvirtrpc "github.com/digitalocean/go-libvirt"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/operator"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
	"github.com/egress-proxies-operator/egress-proxies-operator/test/libvirt/internal/lvtest"
)

// autohealAfter is entry lv's autoheal.replaceUnhealthyAfter here.
const autohealAfter = 20 * time.Second

// failingUserData stops the image's Squid and fails, as a broken
// user-data would: cloud-init ends in error, nothing answers.
const failingUserData = `#cloud-config
runcmd:
  - [systemctl, stop, squid]
  - [sh, -c, "echo 'egress-e2e: this user-data fails on purpose' >&2; exit 3"]
`

// servingSignal stops and starts the guest's Squid and watches Ready
// follow; then, with a short replaceUnhealthyAfter, stops it again and
// watches the Proxy autohealed onto a new domain, while a second Proxy
// whose user-data fails shows cloud-init's error line. It returns the
// Proxy and its domain after the autoheal.
func servingSignal(t *testing.T, env *testenv.Env, op *operator.Operator, rec *lvtest.Calls, l *libvirtrpc.Libvirt, configPath string, block []byte,
	key client.ObjectKey, px *egressv1.Proxy, dom libvirtrpc.Domain, echo *lvtest.EchoServer) (*egressv1.Proxy, libvirtrpc.Domain) {
	t.Helper()
	ctx := context.Background()

	// What libvirt answers for a guest file that is not there, which the
	// provider reads as "not reported yet" (its fake answers the same).
	_, err := l.QEMUDomainAgentCommand(dom, `{"execute":"guest-file-open","arguments":{"path":"/run/egress-proxy/none","mode":"r"}}`, 5, 0)
	if err == nil || !strings.Contains(err.Error(), "No such file or directory") {
		t.Fatalf("guest-file-open of a missing file: %v, want libvirt's 'No such file or directory'", err)
	}
	t.Logf("libvirt on a missing guest file: %v", err)
	report := libvirthost.GuestExec(t, l, dom, "/bin/cat", servingreport.ReportPath)
	t.Logf("the guest's report:\n%s", report)
	if r, err := servingreport.Parse(report); err != nil || !r.Serving {
		t.Fatalf("the guest's report %q: %+v, %v", report, r, err)
	}

	// Squid stopped inside the Ready guest: not Ready, then Ready again.
	getsBefore := len(gets(rec))
	stopped := time.Now()
	libvirthost.GuestExec(t, l, dom, "/bin/systemctl", "stop", "squid")
	waitReason(t, env, key, stopped, egressv1.ReasonProxyNotAnswering)
	t.Logf("TIMING squid stopped->Ready=False ProxyNotAnswering %.1fs (%d Gets of the Proxy's instance meanwhile; reporter every %s, running resync %s)",
		time.Since(stopped).Seconds(), len(gets(rec))-getsBefore, servingreport.Interval, lvtest.RunningResync)
	started := time.Now()
	libvirthost.GuestExec(t, l, dom, "/bin/systemctl", "start", "squid")
	waitReason(t, env, key, started, egressv1.ReasonRunning)
	t.Logf("TIMING squid started->Ready=True %.1fs", time.Since(started).Seconds())

	// Autoheal: a short replaceUnhealthyAfter, Squid stopped again.
	lvtest.WriteFileAtomically(t, configPath, providersYAMLWith(libvirt.TypeKVM, block,
		fmt.Sprintf("autoheal: {replaceUnhealthyAfter: %s, maxConcurrent: 1}", autohealAfter)))
	testenv.EventuallyNil(t, "entry lv's autoheal applied", func() error {
		for _, e := range op.Registry.Entries() {
			if e.Name == "lv" && e.Autoheal().After() == autohealAfter {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})

	// Beside it, a Proxy whose user-data fails (its own guest).
	broken := failingProxy(t, env, key.Namespace)

	stopped = time.Now()
	libvirthost.GuestExec(t, l, dom, "/bin/systemctl", "stop", "squid")
	waitReason(t, env, key, stopped, egressv1.ReasonProxyNotAnswering)
	t.Logf("TIMING squid stopped again->Ready=False %.1fs", time.Since(stopped).Seconds())
	healed := waitNewInstance(t, env, key, px.Status.InstanceName)
	t.Logf("TIMING squid stopped->autohealed (status.autoheals %d, new instance %s) %.1fs",
		healed.Status.Autoheals, healed.Status.InstanceName, time.Since(stopped).Seconds())
	healed = lvtest.WaitReady(t, env, key, stopped)
	t.Logf("TIMING squid stopped->Ready=True on the new domain %s %.1fs", healed.Status.InstanceName, time.Since(stopped).Seconds())
	if healed.Status.Autoheals != 1 || healed.Status.InstanceName == px.Status.InstanceName {
		t.Fatalf("after the autoheal: autoheals %d, instance %s (was %s)", healed.Status.Autoheals, healed.Status.InstanceName, px.Status.InstanceName)
	}
	if !hasEvent(t, env, key, controller.ReasonAutohealing) {
		t.Errorf("no %s event for %s", controller.ReasonAutohealing, key)
	}
	// The new instance's own egress address, as its echo saw it; the old
	// instance's is not carried over.
	healed = waitEgressIP(t, env, key, healed.Status.ProviderID, echo)
	t.Logf("TIMING squid stopped->status.egressIP on the new instance %.1fs: %s", time.Since(stopped).Seconds(), healed.Status.EgressIP)
	newDom, err := l.DomainLookupByName(healed.Status.InstanceName)
	if err != nil {
		t.Fatalf("the new domain: %v", err)
	}
	testenv.EventuallyNil(t, "the unhealthy domain deleted", func() error {
		if _, err := l.DomainLookupByName(px.Status.InstanceName); err == nil {
			return fmt.Errorf("domain %s still there", px.Status.InstanceName)
		}
		return nil
	})

	// The failing guest: CloudInitFailed with cloud-init's error line.
	c := waitReason(t, env, client.ObjectKeyFromObject(broken), broken.CreationTimestamp.Time, egressv1.ReasonCloudInitFailed)
	t.Logf("TIMING apply->CloudInitFailed %.1fs: %s", time.Since(broken.CreationTimestamp.Time).Seconds(), c.Message)
	if !strings.Contains(c.Message, "scripts") {
		t.Errorf("the condition does not carry cloud-init's error line: %s", c.Message)
	}
	if err := env.Client.Delete(ctx, broken); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNilWithin(t, lvtest.ReadyBound, "Proxy broken deleted with its domain", func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(broken), &egressv1.Proxy{})
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		if err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	return healed, newDom
}

// failingProxy applies a Proxy on lv whose user-data fails.
func failingProxy(t *testing.T, env *testenv.Env, ns string) *egressv1.Proxy {
	t.Helper()
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "failing-user-data"},
		Data: map[string][]byte{"user-data": []byte(failingUserData)}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}, Spec: egressv1.ProxySpec{
		Provider: "lv", Port: squidPort, AllowedSourceRanges: []string{libvirthost.SlirpHost + "/32"},
		CloudInitSecretRef: &egressv1.SecretKeySelector{Name: sec.Name, Key: "user-data"},
	}}
	if err := env.Client.Create(ctx, px); err != nil {
		t.Fatal(err)
	}
	return px
}

// gets are the successful Gets of both types so far.
func gets(rec *lvtest.Calls) []string {
	var ids []string
	for _, typ := range libvirt.TypeNames {
		_, g := rec.Snapshot(typ)
		for _, i := range g {
			ids = append(ids, i.ID)
		}
	}
	return ids
}

// waitReason waits until the Proxy's Ready reason is reason.
func waitReason(t *testing.T, env *testenv.Env, key client.ObjectKey, since time.Time, reason string) metav1.Condition {
	t.Helper()
	_, c := lvtest.WaitCondition(t, env, key, since, reason, func(c *metav1.Condition) bool { return c.Reason == reason })
	return c
}

// waitNewInstance waits until the Proxy records an instance other than old.
func waitNewInstance(t *testing.T, env *testenv.Env, key client.ObjectKey, old string) *egressv1.Proxy {
	t.Helper()
	px := &egressv1.Proxy{}
	testenv.EventuallyNilWithin(t, lvtest.ReadyBound, "Proxy "+key.String()+" on a new instance", func() error {
		if err := env.Client.Get(context.Background(), key, px); err != nil {
			return err
		}
		if px.Status.InstanceName == old {
			return fmt.Errorf("still instance %s", old)
		}
		return nil
	})
	return px
}

// hasEvent says whether an event with reason was recorded for the Proxy.
func hasEvent(t *testing.T, env *testenv.Env, key client.ObjectKey, reason string) bool {
	t.Helper()
	var evs eventsv1.EventList
	if err := env.Client.List(context.Background(), &evs, client.InNamespace(key.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Regarding.Name == key.Name && e.Reason == reason {
			return true
		}
	}
	return false
}
