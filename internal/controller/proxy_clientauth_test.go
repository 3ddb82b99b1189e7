package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
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
