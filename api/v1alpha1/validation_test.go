package v1alpha1_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// proxyObject is built untyped so a test can send what the Go types would
// hide: a zero port (omitempty), an empty string, a wrong JSON type, a
// missing spec.
func proxyObject(ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Proxy"))
	u.SetNamespace(ns)
	u.SetName(name)
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

// invalid is what a refusal must say: the field path the API server
// reports the error at, and a fragment of its message.
type invalid struct {
	field    string
	fragment string
}

// checkInvalid asserts err is the API server's 422 and that it names the
// field, both in a structured cause and in the message a user sees.
func checkInvalid(t *testing.T, err error, want invalid) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want refused at %s", want.field)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("err = %v; want Invalid (422)", err)
	}
	msg := err.Error()
	t.Logf("server: %s", shorten(msg))
	if !strings.Contains(msg, want.field+":") || !strings.Contains(msg, want.fragment) {
		t.Errorf("message does not name %q with %q:\n%s", want.field, want.fragment, shorten(msg))
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		t.Fatalf("no details in %v", err)
	}
	var fields []string
	for _, c := range status.Status().Details.Causes {
		fields = append(fields, c.Field)
		if c.Field == want.field {
			return
		}
	}
	t.Errorf("no cause at field %q; causes at %v", want.field, fields)
}

// shorten keeps logs readable when a message quotes a 256 KiB value.
func shorten(s string) string {
	if len(s) > 400 {
		return s[:400] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

func cidrs(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
	}
	return out
}

func TestProxyValidation(t *testing.T) {
	ns := newNamespace(t)
	ref := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		spec map[string]any // nil: no spec at all
		want *invalid       // nil: accepted
	}{
		{"minimal", map[string]any{"provider": "local"}, nil},
		{"no spec", nil, &invalid{"spec", "Required value"}},

		{"port 0", map[string]any{"provider": "local", "port": 0}, &invalid{"spec.port", "greater than or equal to 1"}},
		{"port 65536", map[string]any{"provider": "local", "port": 65536}, &invalid{"spec.port", "less than or equal to 65535"}},
		{"port as string", map[string]any{"provider": "local", "port": "3128"}, &invalid{"spec.port", "must be of type integer"}},
		{"port 1", map[string]any{"provider": "local", "port": 1}, nil},
		{"port 65535", map[string]any{"provider": "local", "port": 65535}, nil},

		{"provider missing", map[string]any{}, &invalid{"spec.provider", "Required value"}},
		{"provider empty", map[string]any{"provider": ""}, &invalid{"spec.provider", "at least 1 chars long"}},
		{"provider uppercase", map[string]any{"provider": "Local"}, &invalid{"spec.provider", "should match"}},
		{"provider underscore", map[string]any{"provider": "my_gcp"}, &invalid{"spec.provider", "should match"}},
		{"provider leading dash", map[string]any{"provider": "-gcp"}, &invalid{"spec.provider", "should match"}},
		{"provider 64 chars", map[string]any{"provider": strings.Repeat("a", 64)}, &invalid{"spec.provider", "Too long"}},
		{"provider 63 chars", map[string]any{"provider": strings.Repeat("a", 63)}, nil},

		{"className empty", map[string]any{"provider": "local", "className": ""}, &invalid{"spec.className", "at least 1 chars long"}},
		{"className uppercase", map[string]any{"provider": "local", "className": "Team-A"}, &invalid{"spec.className", "should match"}},
		{"className dotted", map[string]any{"provider": "local", "className": "team.a"}, &invalid{"spec.className", "should match"}},
		{"className 64 chars", map[string]any{"provider": "local", "className": strings.Repeat("c", 64)}, &invalid{"spec.className", "Too long"}},
		{"className 63 chars", map[string]any{"provider": "local", "className": strings.Repeat("c", 63)}, nil},
		{"className set", map[string]any{"provider": "local", "className": "team-a"}, nil},

		{"placement zone 254", map[string]any{"provider": "local", "placement": ref("zone", strings.Repeat("z", 254))}, &invalid{"spec.placement.zone", "Too long"}},
		{"placement region 254", map[string]any{"provider": "local", "placement": ref("region", strings.Repeat("r", 254))}, &invalid{"spec.placement.region", "Too long"}},
		{"placement machineType 254", map[string]any{"provider": "local", "placement": ref("machineType", strings.Repeat("m", 254))}, &invalid{"spec.placement.machineType", "Too long"}},
		{"placement image 2049", map[string]any{"provider": "local", "placement": ref("image", "https://"+strings.Repeat("i", 2041))}, &invalid{"spec.placement.image", "Too long"}},
		{"placement image 2048", map[string]any{"provider": "local", "placement": ref("image", "https://"+strings.Repeat("i", 2040))}, nil},
		{"placement all set", map[string]any{"provider": "gcp", "placement": ref("zone", "europe-west1-b", "region", "europe-west1", "machineType", "e2-micro", "image", "debian-12")}, nil},

		{"range without prefix", map[string]any{"provider": "local", "allowedSourceRanges": []any{"10.0.0.0"}}, &invalid{"spec.allowedSourceRanges[0]", "must be a CIDR"}},
		{"range not a CIDR", map[string]any{"provider": "local", "allowedSourceRanges": []any{"10.0.0.0/8", "not-a-cidr"}}, &invalid{"spec.allowedSourceRanges[1]", "must be a CIDR"}},
		{"range prefix 33", map[string]any{"provider": "local", "allowedSourceRanges": []any{"10.0.0.0/33"}}, &invalid{"spec.allowedSourceRanges[0]", "must be a CIDR"}},
		{"range IPv6 prefix 129", map[string]any{"provider": "local", "allowedSourceRanges": []any{"2001:db8::/129"}}, &invalid{"spec.allowedSourceRanges[0]", "must be a CIDR"}},
		{"range IPv4-mapped IPv6", map[string]any{"provider": "local", "allowedSourceRanges": []any{"::ffff:10.0.0.0/104"}}, &invalid{"spec.allowedSourceRanges[0]", "must be a CIDR"}},
		{"range 44 chars", map[string]any{"provider": "local", "allowedSourceRanges": []any{"2001:0db8:0000:0000:0000:0000:0000:0000/1280"}}, &invalid{"spec.allowedSourceRanges[0]", "Too long"}},
		{"range duplicate", map[string]any{"provider": "local", "allowedSourceRanges": []any{"10.0.0.0/8", "10.0.0.0/8"}}, &invalid{"spec.allowedSourceRanges[1]", "Duplicate value"}},
		{"65 ranges", map[string]any{"provider": "local", "allowedSourceRanges": cidrs(65)}, &invalid{"spec.allowedSourceRanges", "Too many"}},
		{"64 ranges", map[string]any{"provider": "local", "allowedSourceRanges": cidrs(64)}, nil},
		{"range IPv4 /0 is an open proxy", map[string]any{"provider": "local", "allowedSourceRanges": []any{"10.0.0.0/8", "0.0.0.0/0"}}, &invalid{"spec.allowedSourceRanges[1]", "open proxy"}},
		{"range IPv6 /0 is an open proxy", map[string]any{"provider": "local", "allowedSourceRanges": []any{"::/0"}}, &invalid{"spec.allowedSourceRanges[0]", "open proxy"}},
		{"range /1 is allowed", map[string]any{"provider": "local", "allowedSourceRanges": []any{"0.0.0.0/1"}}, nil},
		{"ranges IPv4 and IPv6", map[string]any{"provider": "local", "allowedSourceRanges": []any{"10.0.0.0/8", "192.168.1.7/32", "2001:db8::/32", "fd00::1/128"}}, nil},

		{"cloudInit and secret ref", map[string]any{"provider": "gcp", "cloudInit": "#cloud-config\n", "cloudInitSecretRef": ref("name", "user-data")}, &invalid{"spec", "mutually exclusive"}},
		{"cloudInit one byte over", map[string]any{"provider": "gcp", "cloudInit": strings.Repeat("x", v1alpha1.MaxCloudInitBytes+1)}, &invalid{"spec.cloudInit", "Too long"}},
		{"cloudInit at the limit", map[string]any{"provider": "gcp", "cloudInit": strings.Repeat("x", v1alpha1.MaxCloudInitBytes)}, nil},
		// maxLength counts characters; the limit is in bytes, as GCE counts.
		{"cloudInit multibyte over in bytes", map[string]any{"provider": "gcp", "cloudInit": strings.Repeat("é", v1alpha1.MaxCloudInitBytes/2+1)}, &invalid{"spec.cloudInit", "at most 262144 bytes"}},
		{"cloudInit multibyte at the limit", map[string]any{"provider": "gcp", "cloudInit": strings.Repeat("é", v1alpha1.MaxCloudInitBytes/2)}, nil},

		{"secret name invalid", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("name", "User_Data")}, &invalid{"spec.cloudInitSecretRef.name", "should match"}},
		{"secret name empty", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("name", "")}, &invalid{"spec.cloudInitSecretRef.name", "at least 1 chars long"}},
		{"secret name missing", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("key", "user-data")}, &invalid{"spec.cloudInitSecretRef.name", "Required value"}},
		{"secret name 254", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("name", strings.Repeat("s", 254))}, &invalid{"spec.cloudInitSecretRef.name", "Too long"}},
		{"secret name dotted", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("name", "proxy.user-data")}, nil},
		{"secret key invalid", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("name", "s", "key", "user/data")}, &invalid{"spec.cloudInitSecretRef.key", "should match"}},
		{"secret key empty", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("name", "s", "key", "")}, &invalid{"spec.cloudInitSecretRef.key", "at least 1 chars long"}},
		{"secret key 254", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("name", "s", "key", strings.Repeat("k", 254))}, &invalid{"spec.cloudInitSecretRef.key", "Too long"}},
		{"secret key with dots", map[string]any{"provider": "gcp", "cloudInitSecretRef": ref("name", "s", "key", "cloud-init.yaml")}, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := proxyObject(ns, fmt.Sprintf("case-%02d", i), tt.spec)
			err := env.Client.Create(t.Context(), obj)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %s", shorten(err.Error()))
				}
				return
			}
			checkInvalid(t, err, *tt.want)
			// user-data may hold secrets, and clients log refusals: the
			// message must not quote it back.
			if ci, _ := tt.spec["cloudInit"].(string); len(ci) > 64 && strings.Contains(err.Error(), ci[:64]) {
				t.Errorf("the refusal quotes spec.cloudInit back (%d bytes)", len(err.Error()))
			}
		})
	}
}

// TestProxyValidationOnUpdate: the rules guard updates too, not only
// creation; the reconciler relies on a stored Proxy being valid.
func TestProxyValidationOnUpdate(t *testing.T) {
	ns := newNamespace(t)
	p := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec:       v1alpha1.ProxySpec{Provider: "local", CloudInit: "#cloud-config\n"},
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	p.Spec.CloudInitSecretRef = &v1alpha1.SecretKeySelector{Name: "user-data"}
	checkInvalid(t, env.Client.Update(t.Context(), p), invalid{"spec", "mutually exclusive"})

	// The instance lives on its provider: moving it is a new Proxy.
	moved := p.DeepCopy()
	moved.Spec.CloudInitSecretRef = nil
	moved.Spec.Provider = "other"
	checkInvalid(t, env.Client.Update(t.Context(), moved), invalid{"spec.provider", "immutable"})

	// The instance belongs to the installation of the Proxy's class:
	// setting, changing or removing the class is a new Proxy.
	classed := moved.DeepCopy()
	classed.Spec.Provider = "local"
	classed.Spec.ClassName = "team-a"
	checkInvalid(t, env.Client.Update(t.Context(), classed), invalid{"spec.className", "spec.className is immutable"})
	c := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "classed"},
		Spec:       v1alpha1.ProxySpec{Provider: "local", ClassName: "team-a"},
	}
	if err := env.Client.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	for _, class := range []string{"team-b", ""} {
		changed := c.DeepCopy()
		changed.Spec.ClassName = class
		checkInvalid(t, env.Client.Update(t.Context(), changed), invalid{"spec.className", "spec.className is immutable"})
	}
	// A merge patch can remove the field outright.
	unset := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"className":null}}`))
	checkInvalid(t, env.Client.Patch(t.Context(), &v1alpha1.Proxy{ObjectMeta: c.ObjectMeta}, unset), invalid{"spec.className", "spec.className is immutable"})
	// An update that keeps the class passes the rule.
	kept := c.DeepCopy()
	kept.Spec.Port = 8080
	if err := env.Client.Update(t.Context(), kept); err != nil {
		t.Errorf("an update that keeps spec.className: %v", err)
	}

	// A merge patch can send the zero port the typed client would omit.
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"port":0}}`))
	checkInvalid(t, env.Client.Patch(t.Context(), &v1alpha1.Proxy{ObjectMeta: p.ObjectMeta}, patch), invalid{"spec.port", "greater than or equal to 1"})
}

func TestProxyDefaults(t *testing.T) {
	ns := newNamespace(t)
	p := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaults"},
		Spec: v1alpha1.ProxySpec{
			Provider:           "gcp",
			CloudInitSecretRef: &v1alpha1.SecretKeySelector{Name: "proxy-user-data"},
		},
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.Proxy{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Port != 3128 {
		t.Errorf("spec.port = %d, want the default 3128", got.Spec.Port)
	}
	if got.Spec.CloudInitSecretRef == nil || got.Spec.CloudInitSecretRef.Key != "user-data" {
		t.Errorf("spec.cloudInitSecretRef = %+v, want key defaulted to user-data", got.Spec.CloudInitSecretRef)
	}
	// Explicit values are kept.
	p2 := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "explicit"},
		Spec: v1alpha1.ProxySpec{
			Provider:           "gcp",
			Port:               8080,
			CloudInitSecretRef: &v1alpha1.SecretKeySelector{Name: "s", Key: "cloud-config"},
		},
	}
	if err := env.Client.Create(t.Context(), p2); err != nil {
		t.Fatal(err)
	}
	if p2.Spec.Port != 8080 || p2.Spec.CloudInitSecretRef.Key != "cloud-config" {
		t.Errorf("explicit values changed: port %d key %q", p2.Spec.Port, p2.Spec.CloudInitSecretRef.Key)
	}
}

func TestProxyStatusValidation(t *testing.T) {
	ns := newNamespace(t)
	p := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec:       v1alpha1.ProxySpec{Provider: "local"},
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		status string // a merge patch of status
		want   *invalid
	}{
		{"phase not in enum", `{"phase":"Exploded"}`, &invalid{"status.phase", "Unsupported value"}},
		{"condition without reason", `{"conditions":[{"type":"Ready","status":"False","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`, &invalid{"status.conditions[0].reason", "Required value"}},
		{"condition status not True/False/Unknown", `{"conditions":[{"type":"Ready","status":"Maybe","reason":"Provisioning","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`, &invalid{"status.conditions[0].status", "Unsupported value"}},
		{"every phase", `{"phase":"Deleting"}`, nil},
		{"ready condition", `{"phase":"Running","endpoint":"10.0.0.1:3128","conditions":[{"type":"Ready","status":"True","reason":"Running","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch := client.RawPatch("application/merge-patch+json", []byte(`{"status":`+tt.status+`}`))
			err := env.Client.Status().Patch(t.Context(), &v1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}, patch)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			checkInvalid(t, err, *tt.want)
		})
	}
}

// TestCanonicalSourceRanges: a range with host bits set (10.0.0.1/8) would
// be widened to 10.0.0.0/8 by every consumer, more access than a user who
// meant one host intended; it is refused with the canonical form named.
func TestCanonicalSourceRanges(t *testing.T) {
	ns := newNamespace(t)
	tests := []struct {
		name   string
		ranges []any
		want   *invalid
	}{
		{"IPv4 host bits set", []any{"10.0.0.0/16", "10.0.0.1/8"}, &invalid{"spec.allowedSourceRanges[1]", "10.0.0.0/8"}},
		{"IPv4 /24 host bits set", []any{"192.168.1.7/24"}, &invalid{"spec.allowedSourceRanges[0]", "192.168.1.0/24"}},
		{"IPv6 host bits set", []any{"2001:db8::1/32"}, &invalid{"spec.allowedSourceRanges[0]", "2001:db8::/32"}},
		{"IPv6 not lower case", []any{"2001:DB8::/32"}, &invalid{"spec.allowedSourceRanges[0]", "2001:db8::/32"}},
		{"IPv6 not compressed", []any{"2001:db8:0:0:0:0:0:0/32"}, &invalid{"spec.allowedSourceRanges[0]", "2001:db8::/32"}},
		{"canonical IPv4 and IPv6", []any{"10.0.0.0/8", "192.168.1.7/32", "2001:db8::/32", "fd00::1/128"}, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := proxyObject(ns, fmt.Sprintf("canon-%02d", i), map[string]any{"provider": "local", "allowedSourceRanges": tt.ranges})
			err := env.Client.Create(t.Context(), obj)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %s", shorten(err.Error()))
				}
				return
			}
			checkInvalid(t, err, *tt.want)
		})
	}
}

// TestCanonicalSourceRangesRatchet: a Proxy stored before the canonical rule
// existed (with 10.0.0.1/8) can still be updated while that field is left as
// it is (the operator adds and removes its finalizer), since the API server
// ratchets CRD validation; a new non-canonical range is refused.
func TestCanonicalSourceRangesRatchet(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	key := client.ObjectKey{Name: "proxies.egress.proxy-operator.dev"}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, key, crd); err != nil {
		t.Fatal(err)
	}
	// The CRD as it was before the rule: drop it from the items' rules.
	items := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["allowedSourceRanges"].Items.Schema
	var kept apiextensionsv1.ValidationRules
	for _, r := range items.XValidations {
		if !strings.Contains(r.Rule, "masked()") {
			kept = append(kept, r)
		}
	}
	if len(kept) == len(items.XValidations) {
		t.Fatal("the CRD has no canonical-form rule to drop")
	}
	// Background, not t.Context(): the cleanup that restores the rule runs
	// after the test's context is cancelled.
	setRules := func(rules apiextensionsv1.ValidationRules) {
		t.Helper()
		ctx := context.Background()
		testenv.EventuallyNil(t, "updating the Proxy CRD", func() error {
			cur := &apiextensionsv1.CustomResourceDefinition{}
			if err := env.Client.Get(ctx, key, cur); err != nil {
				return err
			}
			s := cur.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			ranges := s.Properties["allowedSourceRanges"]
			ranges.Items.Schema.XValidations = rules
			s.Properties["allowedSourceRanges"] = ranges
			cur.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = s
			return env.Client.Update(ctx, cur)
		})
	}
	wide := map[string]any{"provider": "local", "allowedSourceRanges": []any{"10.0.0.1/8"}}
	dryRun := func(name string) error {
		return env.Client.Create(ctx, proxyObject(ns, name, wide), client.DryRunAll)
	}
	original := items.XValidations
	setRules(kept)
	t.Cleanup(func() { setRules(original) })
	testenv.EventuallyNil(t, "the API server serving the CRD without the rule", func() error { return dryRun("probe-old") })
	stored := proxyObject(ns, "stored-before", wide)
	if err := env.Client.Create(ctx, stored); err != nil {
		t.Fatal(err)
	}
	setRules(original)
	testenv.Eventually(t, "the API server serving the CRD with the rule", func() bool { return dryRun("probe-new") != nil })

	// Unchanged field: accepted (a finalizer, a port change).
	stored.SetFinalizers([]string{"egress.proxy-operator.dev/test"})
	if err := env.Client.Update(ctx, stored); err != nil {
		t.Fatalf("updating the stored Proxy's finalizers: %s", shorten(err.Error()))
	}
	stored.Object["spec"].(map[string]any)["port"] = int64(3129)
	if err := env.Client.Update(ctx, stored); err != nil {
		t.Fatalf("updating the stored Proxy's port: %s", shorten(err.Error()))
	}
	// A changed field is validated whole: the new non-canonical range and
	// the stored one are refused.
	stored.Object["spec"].(map[string]any)["allowedSourceRanges"] = []any{"10.0.0.1/8", "192.168.1.7/24"}
	err := env.Client.Update(ctx, stored)
	checkInvalid(t, err, invalid{"spec.allowedSourceRanges[1]", "write 192.168.1.0/24"})
	checkInvalid(t, err, invalid{"spec.allowedSourceRanges[0]", "write 10.0.0.0/8"})
	// The finalizer goes, and the Proxy with it.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(stored), stored); err != nil {
		t.Fatal(err)
	}
	stored.SetFinalizers(nil)
	if err := env.Client.Update(ctx, stored); err != nil {
		t.Fatalf("removing the finalizer: %s", shorten(err.Error()))
	}
	if err := env.Client.Delete(ctx, stored); err != nil {
		t.Fatal(err)
	}
}
