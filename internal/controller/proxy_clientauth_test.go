package controller

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// clientAuth's Secret: missing is ClientAuthSecretNotFound and no instance
// is made (a proxy without its users would be open to every admitted
// address); a file that cannot be used is ClientAuthInvalid naming the
// Secret, the key and the line; a good one reaches the provider; a changed
// one replaces the instance. Neither the file nor a line of it reaches the
// status, the condition or an event.
func TestClientAuthFromSecret(t *testing.T) {
	const sentinel = "SENTINEL-clientauth-user"
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	entry, fp := fakeEntry("pool")
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	px := newProxy("web", "pool")
	px.Spec.ClientAuth = &egressv1.ClientAuth{SecretRef: egressv1.HtpasswdSecretRef{Name: "users"}}
	d.create(px)

	d.reconcile("web")
	if px = d.get("web"); readyReason(px) != "False/ClientAuthSecretNotFound" ||
		!strings.Contains(conditionMessage(px), `spec.clientAuth.secretRef: Secret "users" not found`) {
		t.Fatalf("Ready = %s %q", readyReason(px), conditionMessage(px))
	}
	if n := len(fp.CreateRequests()); n != 0 {
		t.Fatalf("%d creates without the users", n)
	}

	// Line 2 is not user:hash (it holds the sentinel); line 3 would be fine.
	bad := sentinel + ":" + string(hash) + "\n" + sentinel + "\n"
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "users"},
		Data: map[string][]byte{"htpasswd": []byte(bad)}}
	if err := env.Client.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	d.reconcile("web")
	px = d.get("web")
	if readyReason(px) != "False/ClientAuthInvalid" ||
		!strings.Contains(conditionMessage(px), `spec.clientAuth.secretRef: Secret "users" key "htpasswd": line 2:`) {
		t.Fatalf("Ready = %s %q", readyReason(px), conditionMessage(px))
	}
	checkNoLeak := func(px *egressv1.Proxy) {
		t.Helper()
		raw, _ := json.Marshal(px.Status)
		for _, needle := range []string{sentinel, string(hash)} {
			if strings.Contains(string(raw), needle) {
				t.Errorf("status holds %q: %s", needle, raw)
			}
			for _, e := range d.events() {
				if strings.Contains(e, needle) {
					t.Errorf("event holds %q: %s", needle, e)
				}
			}
		}
	}
	checkNoLeak(px)

	good := sentinel + ":" + string(hash) + "\n"
	sec.Data["htpasswd"] = []byte(good)
	if err := env.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	px = d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	reqs := fp.CreateRequests()
	if len(reqs) != 1 || reqs[0].ClientAuth.Reveal() != good {
		t.Fatalf("the users did not reach the provider: %d requests", len(reqs))
	}
	if strings.Contains(reqs[0].Name, sentinel) {
		t.Errorf("instance name %q holds the user", reqs[0].Name)
	}
	checkNoLeak(px)

	// A changed file replaces the instance, make before break.
	other, _ := bcrypt.GenerateFromPassword([]byte("pw2"), bcrypt.MinCost)
	sec.Data["htpasswd"] = []byte(good + "bob:" + string(other) + "\n")
	if err := env.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	d.reconcileUntil("web", 5, "replaced", func(p *egressv1.Proxy) bool {
		return p.Status.InstanceName != px.Status.InstanceName && readyReason(p) == "True/Running" && p.Status.RetiringProviderID == ""
	})
	checkNoLeak(d.get("web"))
}

// usersRecorder is a provider.UsersUpdater that keeps what it was given,
// failing once when told to.
type usersRecorder struct {
	mu       sync.Mutex
	calls    []string // instance ID, then the file, per call
	failNext error
}

func (u *usersRecorder) UpdateUsers(_ context.Context, id string, users provider.Sensitive) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.failNext; err != nil {
		u.failNext = nil
		return err
	}
	u.calls = append(u.calls, id, users.Reveal())
	return nil
}

func (u *usersRecorder) last() (id, users string, n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.calls) == 0 {
		return "", "", 0
	}
	return u.calls[len(u.calls)-2], u.calls[len(u.calls)-1], len(u.calls) / 2
}

// With a provider that rewrites users in place (provider.UsersUpdater), a
// rotated Secret keeps the instance: its name stays, the new file reaches
// the running instance through UpdateUsers, and a failed update says so in
// Ready; adding clientAuth to a Proxy without it still replaces the
// instance (its proxy must ask for users).
func TestClientAuthRotatedInPlace(t *testing.T) {
	entry, fp := fakeEntry("pods")
	users := &usersRecorder{}
	entry.Users = users
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pods": entry}})
	first := clientauthtest.File(t, "alice", "pw1")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "users"},
		Data: map[string][]byte{"htpasswd": []byte(first)}}
	if err := env.Client.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	px := newProxy("web", "pods")
	d.create(px)
	px = d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	plainName := px.Status.InstanceName

	px.Spec.ClientAuth = &egressv1.ClientAuth{SecretRef: egressv1.HtpasswdSecretRef{Name: "users"}}
	if err := env.Client.Update(context.Background(), px); err != nil {
		t.Fatal(err)
	}
	px = d.reconcileUntil("web", 6, "replaced by an instance with users", func(p *egressv1.Proxy) bool {
		return p.Status.InstanceName != plainName && readyReason(p) == "True/Running" && p.Status.RetiringProviderID == ""
	})
	withUsers := px.Status.InstanceName
	if id, got, _ := users.last(); id != px.Status.ProviderID || got != first {
		t.Fatalf("UpdateUsers got instance %q and %d bytes, want %q and the Secret's %d", id, len(got), px.Status.ProviderID, len(first))
	}

	second := clientauthtest.File(t, "alice", "pw2", "bob", "pw3")
	sec.Data["htpasswd"] = []byte(second)
	if err := env.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	creates := len(fp.CreateRequests())
	d.reconcile("web")
	px = d.get("web")
	if id, got, _ := users.last(); id != px.Status.ProviderID || got != second {
		t.Errorf("after the rotation UpdateUsers got instance %q and %d bytes, want the running instance and the new %d", id, len(got), len(second))
	}
	if px.Status.InstanceName != withUsers || len(fp.CreateRequests()) != creates || readyReason(px) != "True/Running" {
		t.Errorf("the rotation replaced or unsettled the instance: name %s (was %s), %d creates (was %d), Ready %s",
			px.Status.InstanceName, withUsers, len(fp.CreateRequests()), creates, readyReason(px))
	}

	// A transient failure keeps a serving Proxy Ready (as any backend
	// hiccup does) and the next pass tries again; a permanent one says so.
	_, _, calls := users.last()
	users.mu.Lock()
	users.failNext = provider.Errorf(provider.ErrTransient, "backend busy")
	users.mu.Unlock()
	d.reconcile("web")
	if px = d.get("web"); readyReason(px) != "True/Running" {
		t.Errorf("a transient update failure: Ready = %s %q, want it kept", readyReason(px), conditionMessage(px))
	}
	d.reconcile("web")
	if _, got, n := users.last(); n != calls+1 || got != second {
		t.Errorf("after the transient failure: %d calls (was %d), want the retry with the new file", n, calls)
	}
	users.mu.Lock()
	users.failNext = provider.Errorf(provider.ErrPermanent, "secret is not this installation's")
	users.mu.Unlock()
	d.reconcile("web")
	if px = d.get("web"); readyReason(px) != "False/PermanentFailure" || !strings.Contains(conditionMessage(px), "not this installation's") {
		t.Errorf("a permanent update failure: Ready = %s %q, want it said", readyReason(px), conditionMessage(px))
	}
	if px.Status.InstanceName != withUsers {
		t.Errorf("instance %s after the failures, want %s kept", px.Status.InstanceName, withUsers)
	}
}
