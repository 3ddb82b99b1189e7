package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

func TestProvisioningThenRunning(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	fp.SetProvisioningGets(2)
	d.create(newProxy("web", "pool"))

	d.reconcile("web")
	px := d.get("web")
	if px.Status.ProviderID == "" || px.Status.Phase != egressv1.PhaseProvisioning || readyReason(px) != "False/Provisioning" {
		t.Fatalf("after first reconcile: %+v", px.Status)
	}
	if px.Status.ObservedGeneration != px.Generation {
		t.Errorf("observedGeneration %d, generation %d", px.Status.ObservedGeneration, px.Generation)
	}
	px = d.reconcileUntil("web", 5, "Ready", hasReason("True/Running"))
	if px.Status.Phase != egressv1.PhaseRunning || px.Status.Endpoint != px.Status.IP+":3128" {
		t.Errorf("status = %+v", px.Status)
	}
	if n := fp.Calls(provider.OpCreate); n != 1 {
		t.Errorf("Create called %d times, want 1", n)
	}
	// Created, provisioning, running: the status says all of it, so no
	// event is written (proxy_events.go).
	if evs := d.events(); len(evs) != 0 {
		t.Errorf("the normal life of a Proxy emitted %q; want no event", evs)
	}
	// A further reconcile of a running Proxy writes nothing and emits nothing.
	rv := d.get("web").ResourceVersion
	d.reconcile("web")
	if got := d.get("web").ResourceVersion; got != rv {
		t.Errorf("idle reconcile wrote the Proxy (resourceVersion %s -> %s)", rv, got)
	}
	if evs := d.events(); len(evs) != 0 {
		t.Errorf("idle reconcile emitted %q", evs)
	}
}

func TestLostInstanceIsRecreated(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))

	fp.Remove(px.Status.InstanceName)
	px = d.reconcileUntil("web", 3, "Ready again", func(p *egressv1.Proxy) bool {
		return readyReason(p) == "True/Running" && fp.Calls(provider.OpCreate) == 2
	})
	if !containsAny(d.events(), egressv1.ReasonInstanceLost) {
		t.Error("no InstanceLost event")
	}
	if _, ok := fp.Backend().Lookup(px.Status.InstanceName); !ok {
		t.Error("instance not recreated on the backend")
	}
}

func TestStoppedInstanceIsStartedAgain(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))

	fp.SetState(px.Status.InstanceName, provider.StateStopped)
	d.events()
	d.reconcile("web")
	// The fake starts it within the Create: Ready again in the same pass,
	// with the stop reported as a Warning event.
	if got := readyReason(d.get("web")); got != "True/Running" {
		t.Fatalf("after stop: Ready %s", got)
	}
	if evs := d.events(); !containsAny(evs, "Warning "+egressv1.ReasonInstanceStopped) {
		t.Errorf("no InstanceStopped warning: %q", evs)
	}
	// A provider whose start takes polls shows InstanceStopped meanwhile.
	fp.SetProvisioningGets(2)
	fp.SetState(px.Status.InstanceName, provider.StateStopped)
	d.reconcile("web")
	if got := readyReason(d.get("web")); got != "False/InstanceStopped" {
		t.Fatalf("after a stop with a slow start: Ready %s", got)
	}
	d.reconcileUntil("web", 4, "Ready again", hasReason("True/Running"))
	if rec, _ := fp.Backend().Lookup(px.Status.InstanceName); rec.State != provider.StateRunning {
		t.Errorf("backend state %s", rec.State)
	}
	// Started in place: no second instance.
	if n := len(fp.Backend().Records()); n != 1 {
		t.Errorf("%d instances on the backend, want 1", n)
	}
}

func TestTerminatedInstanceIsDeletedAndCreatedAnew(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))

	fp.SetState(px.Status.InstanceName, provider.StateTerminated)
	d.reconcile("web")
	if got := readyReason(d.get("web")); got != "False/InstanceStopped" {
		t.Fatalf("after terminate: Ready %s", got)
	}
	if fp.Calls(provider.OpDelete) != 1 {
		t.Fatalf("Delete calls = %d", fp.Calls(provider.OpDelete))
	}
	d.reconcileUntil("web", 4, "Ready again", hasReason("True/Running"))
	if fp.Calls(provider.OpCreate) != 2 {
		t.Errorf("Create calls = %d, want 2", fp.Calls(provider.OpCreate))
	}
}

func TestErrorClasses(t *testing.T) {
	cases := []struct {
		name      string
		class     error
		reason    string
		phase     egressv1.ProxyPhase
		requeue   bool
		retriesOK bool // the next reconcile retries and succeeds
	}{
		{"transient backs off and retries", provider.ErrTransient, "False/BackendError", egressv1.PhaseProvisioning, true, true},
		{"quota backs off longer", provider.ErrQuotaExceeded, "False/QuotaExceeded", egressv1.PhaseProvisioning, true, true},
		{"permanent latches", provider.ErrPermanent, "False/PermanentFailure", egressv1.PhaseFailed, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			entry, fp := fakeEntry("pool")
			d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
			d.create(newProxy("web", "pool"))
			fp.FailNext(provider.OpCreate, provider.Errorf(tc.class, "backend says no"))
			res := d.reconcile("web")
			px := d.get("web")
			if got := readyReason(px); got != tc.reason {
				t.Fatalf("Ready = %s, want %s", got, tc.reason)
			}
			if px.Status.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", px.Status.Phase, tc.phase)
			}
			if (res.RequeueAfter > 0) != tc.requeue {
				t.Errorf("RequeueAfter = %v, want requeue=%v", res.RequeueAfter, tc.requeue)
			}
			if !strings.Contains(conditionMessage(px), `provider "pool": create: backend says no`) {
				t.Errorf("message = %q", conditionMessage(px))
			}
			d.reconcile("web")
			if tc.retriesOK {
				if got := readyReason(d.get("web")); got != "True/Running" {
					t.Errorf("after retry Ready = %s", got)
				}
				return
			}
			if n := fp.Calls(provider.OpCreate); n != 1 {
				t.Errorf("latched Proxy called Create %d times", n)
			}
			// A spec change releases the latch.
			px = d.get("web")
			px.Spec.Port = 8080
			if err := env.Client.Update(context.Background(), px); err != nil {
				t.Fatal(err)
			}
			d.reconcile("web")
			if got := readyReason(d.get("web")); got != "True/Running" {
				t.Errorf("after spec change Ready = %s", got)
			}
		})
	}
}

func TestQuotaBacksOffLongerThanTransient(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("a", "pool"))
	d.create(newProxy("b", "pool"))
	fp.FailNext(provider.OpCreate, provider.Errorf(provider.ErrTransient, "hiccup"))
	transient := d.reconcile("a").RequeueAfter
	fp.FailNext(provider.OpCreate, provider.Errorf(provider.ErrQuotaExceeded, "no room"))
	quota := d.reconcile("b").RequeueAfter
	if transient <= 0 || quota <= transient {
		t.Errorf("transient backoff %v, quota backoff %v: quota must be longer", transient, quota)
	}
}

func TestAdoptsAfterLostStatusWrite(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	px := d.create(newProxy("web", "pool"))
	// A previous operator process created the instance and crashed before
	// it wrote status: the instance exists under the derived name.
	if _, err := fp.Create(context.Background(), createRequest(px, "", "", inPlace{}, "")); err != nil {
		t.Fatal(err)
	}
	d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	if n := len(fp.Backend().Records()); n != 1 {
		t.Errorf("%d instances on the backend, want 1 (adopted, not duplicated)", n)
	}
}

func TestUnknownProvider(t *testing.T) {
	providers := &staticProviders{}
	d := newDirect(t, providers)
	d.create(newProxy("web", "later"))
	res := d.reconcile("web")
	px := d.get("web")
	if got := readyReason(px); got != "False/ProviderNotFound" || px.Status.Phase != egressv1.PhasePending {
		t.Fatalf("Ready = %s, phase %s", got, px.Status.Phase)
	}
	if res.RequeueAfter != 0 {
		t.Errorf("requeued after %v; it should wait for the config to change", res.RequeueAfter)
	}
	if !strings.Contains(conditionMessage(px), `spec.provider "later"`) {
		t.Errorf("message = %q", conditionMessage(px))
	}
	entry, _ := fakeEntry("later")
	providers.set(entry)
	d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
}

func TestSpecChangeReplacesMakeBeforeBreak(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	old := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))

	fp.SetProvisioningGets(2)
	old.Spec.Port = 8080
	if err := env.Client.Update(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	d.reconcile("web")
	px := d.get("web")
	if px.Status.RetiringProviderID != old.Status.ProviderID || px.Status.ProviderID == old.Status.ProviderID {
		t.Fatalf("replacement not started: %+v", px.Status)
	}
	if got := readyReason(px); got != "True/Replacing" || px.Status.Endpoint != old.Status.Endpoint {
		t.Fatalf("while replacing: Ready %s, endpoint %s (old %s)", got, px.Status.Endpoint, old.Status.Endpoint)
	}
	if _, ok := fp.Backend().Lookup(old.Status.InstanceName); !ok {
		t.Fatal("old instance deleted before the new one runs")
	}
	px = d.reconcileUntil("web", 5, "replaced", func(p *egressv1.Proxy) bool {
		return readyReason(p) == "True/Running" && p.Status.RetiringProviderID == ""
	})
	if !strings.HasSuffix(px.Status.Endpoint, ":8080") {
		t.Errorf("endpoint = %s", px.Status.Endpoint)
	}
	if _, ok := fp.Backend().Lookup(old.Status.InstanceName); ok {
		t.Error("old instance still on the backend")
	}
}

func TestDeletionWaitsForNotFound(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))

	fp.SetDeleteReturnsEarly(2)
	if err := env.Client.Delete(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	d.reconcile("web")
	px = d.get("web")
	if px == nil || len(px.Finalizers) == 0 {
		t.Fatal("finalizer dropped while the instance still exists")
	}
	if px.Status.Phase != egressv1.PhaseDeleting {
		t.Errorf("phase = %s", px.Status.Phase)
	}
	for i := 0; i < 5 && d.get("web") != nil; i++ {
		d.reconcile("web")
	}
	if d.get("web") != nil {
		t.Fatal("Proxy not released after the instance went")
	}
	if n := len(fp.Backend().Records()); n != 0 {
		t.Errorf("%d instances left on the backend", n)
	}
}

func TestDeletionKeepsFinalizerOnError(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	if err := env.Client.Delete(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	fp.FailNext(provider.OpDelete, provider.Errorf(provider.ErrTransient, "backend down"))
	res := d.reconcile("web")
	if px = d.get("web"); px == nil || readyReason(px) != "False/BackendError" || res.RequeueAfter == 0 {
		t.Fatalf("after a failed delete: %v %+v", res, px)
	}
	d.reconcile("web")
	if d.get("web") != nil {
		t.Error("Proxy not released once the delete went through")
	}
}

func TestCloudInitFromSecret(t *testing.T) {
	const sentinel = "SENTINEL-secret-cloudinit-41d9"
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	px := newProxy("web", "pool")
	px.Spec.CloudInitSecretRef = &egressv1.SecretKeySelector{Name: "ud"}
	d.create(px)

	d.reconcile("web")
	px = d.get("web")
	if got := readyReason(px); got != "False/CloudInitSecretNotFound" {
		t.Fatalf("Ready = %s", got)
	}
	if !strings.Contains(conditionMessage(px), `spec.cloudInitSecretRef: Secret "ud" not found`) {
		t.Errorf("message = %q", conditionMessage(px))
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "ud"},
		Data: map[string][]byte{"user-data": []byte(sentinel)}}
	if err := env.Client.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	px = d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	reqs := fp.CreateRequests()
	if len(reqs) != 1 || reqs[0].CloudInit.Reveal() != sentinel {
		t.Fatalf("cloud-init not delivered: %d requests", len(reqs))
	}
	for _, e := range d.events() {
		if strings.Contains(e, sentinel) {
			t.Errorf("event leaks the cloud-init: %q", e)
		}
	}
	raw, _ := json.Marshal(px.Status)
	if strings.Contains(string(raw), sentinel) {
		t.Error("status leaks the cloud-init")
	}

	// A changed Secret reshapes the instance.
	sec.Data["user-data"] = []byte(sentinel + "-v2")
	if err := env.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	d.reconcileUntil("web", 5, "replaced", func(p *egressv1.Proxy) bool {
		return p.Status.InstanceName != px.Status.InstanceName && readyReason(p) == "True/Running" && p.Status.RetiringProviderID == ""
	})
}

func TestMissingProxyIsNoError(t *testing.T) {
	d := newDirect(t, &staticProviders{})
	if _, err := d.r.Reconcile(context.Background(), reqFor(d.ns, "nope")); err != nil {
		t.Fatalf("Reconcile of a missing Proxy: %v", err)
	}
}

func TestCallsCarryTheProxysLoggerAndNoLeak(t *testing.T) {
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	px := newProxy("web", "pool")
	px.Spec.CloudInit = "SENTINEL-inline-7c1e"
	d.create(px)
	fp.FailNext(provider.OpCreate, provider.Errorf(provider.ErrPermanent, "refused"))
	d.reconcile("web")
	px = d.get("web")
	if strings.Contains(conditionMessage(px), "SENTINEL") {
		t.Errorf("condition leaks cloud-init: %q", conditionMessage(px))
	}
	for _, e := range d.events() {
		if strings.Contains(e, "SENTINEL") {
			t.Errorf("event leaks cloud-init: %q", e)
		}
	}
}

func conditionMessage(px *egressv1.Proxy) string {
	for _, c := range px.Status.Conditions {
		if c.Type == egressv1.ConditionReady {
			return c.Message
		}
	}
	return ""
}

func reqFor(ns, name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}
