package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// clientAuthSpec is a Proxy spec with this spec.clientAuth.
func clientAuthSpec(clientAuth any) map[string]any {
	return map[string]any{"provider": "local", "clientAuth": clientAuth}
}

// secretRef is a clientAuth whose secretRef holds these fields.
func secretRef(fields map[string]any) map[string]any {
	return map[string]any{"secretRef": fields}
}

func TestClientAuthValidation(t *testing.T) {
	ns := newNamespace(t)
	const (
		ref  = "spec.clientAuth.secretRef"
		name = ref + ".name"
		key  = ref + ".key"
	)
	tests := []struct {
		name string
		spec map[string]any
		want invalid
	}{
		{"clientAuth without secretRef", clientAuthSpec(map[string]any{}), invalid{ref, "Required value"}},
		{"clientAuth not an object", clientAuthSpec("partner-users"), invalid{"spec.clientAuth", "must be of type object"}},
		{"name missing", clientAuthSpec(secretRef(map[string]any{"key": "htpasswd"})), invalid{name, "Required value"}},
		{"name empty", clientAuthSpec(secretRef(map[string]any{"name": ""})), invalid{name, "at least 1 chars long"}},
		{"name upper case", clientAuthSpec(secretRef(map[string]any{"name": "Partner-Users"})), invalid{name, "should match"}},
		{"name underscore", clientAuthSpec(secretRef(map[string]any{"name": "partner_users"})), invalid{name, "should match"}},
		{"name 254", clientAuthSpec(secretRef(map[string]any{"name": strings.Repeat("s", 254)})), invalid{name, "Too long"}},
		{"key with a slash", clientAuthSpec(secretRef(map[string]any{"name": "partner-users", "key": "users/htpasswd"})), invalid{key, "should match"}},
		{"key empty", clientAuthSpec(secretRef(map[string]any{"name": "partner-users", "key": ""})), invalid{key, "at least 1 chars long"}},
		{"key 254", clientAuthSpec(secretRef(map[string]any{"name": "partner-users", "key": strings.Repeat("k", 254)})), invalid{key, "Too long"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := env.Client.Create(t.Context(), proxyObject(ns, fmt.Sprintf("bad-%02d", i), tt.spec))
			checkInvalid(t, err, tt.want)
		})
	}
}

// TestClientAuthAccepted reads each Proxy back: the key's default is
// applied by the API server, so the operator always finds one stored.
func TestClientAuthAccepted(t *testing.T) {
	ns := newNamespace(t)
	tests := []struct {
		name     string
		spec     map[string]any
		wantName string
		wantKey  string
	}{
		{"without key", clientAuthSpec(secretRef(map[string]any{"name": "partner-users"})), "partner-users", "htpasswd"},
		{"with key", clientAuthSpec(secretRef(map[string]any{"name": "partner-users", "key": "users.htpasswd"})), "partner-users", "users.htpasswd"},
		{"dotted name, 253 chars", clientAuthSpec(secretRef(map[string]any{"name": longName(253, 'p'), "key": strings.Repeat("k", 253)})), longName(253, 'p'), strings.Repeat("k", 253)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := proxyObject(ns, fmt.Sprintf("good-%02d", i), tt.spec)
			if err := env.Client.Create(t.Context(), obj); err != nil {
				t.Fatalf("refused: %s", shorten(err.Error()))
			}
			got := &v1alpha1.Proxy{}
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.ClientAuth == nil {
				t.Fatal("spec.clientAuth not stored")
			}
			if ref := got.Spec.ClientAuth.SecretRef; ref.Name != tt.wantName || ref.Key != tt.wantKey {
				t.Errorf("spec.clientAuth.secretRef = {name %q, key %q}, want {name %q, key %q}", ref.Name, ref.Key, tt.wantName, tt.wantKey)
			}
		})
	}
}

// TestClientAuthDefaultsApart: the two Secret references default their
// keys differently, so each names the key its Secret is created with.
func TestClientAuthDefaultsApart(t *testing.T) {
	ns := newNamespace(t)
	p := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "both-refs"},
		Spec: v1alpha1.ProxySpec{
			Provider:           "gcp",
			CloudInitSecretRef: &v1alpha1.SecretKeySelector{Name: "proxy-user-data"},
			ClientAuth:         &v1alpha1.ClientAuth{SecretRef: v1alpha1.HtpasswdSecretRef{Name: "partner-users"}},
		},
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.Proxy{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	if k := got.Spec.CloudInitSecretRef.Key; k != "user-data" {
		t.Errorf("spec.cloudInitSecretRef.key = %q, want user-data", k)
	}
	if k := got.Spec.ClientAuth.SecretRef.Key; k != "htpasswd" {
		t.Errorf("spec.clientAuth.secretRef.key = %q, want htpasswd", k)
	}
}
