package operator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// markSafe is what every backend's marks accept: a Kubernetes label value
// and a GCE label value (lowercase letters, digits, '-', '_', at most 63).
func markSafe(t *testing.T, id string) {
	t.Helper()
	if msgs := validation.IsValidLabelValue(id); len(msgs) > 0 {
		t.Errorf("%q is no Kubernetes label value: %v", id, msgs)
	}
	if len(id) > 63 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		t.Errorf("%q is no GCE label value", id)
	}
}

const clusterUID = "0b6f3c2e-8d4a-4f1e-9c7b-2a5d6e8f9a01"

// TestTwoInstallationsDeriveDistinctIDs: the default installation ID is
// the kube-system UID plus a hash of the operator's namespace and class, a
// stored format (instances carry it) pinned here by golden values; it is
// distinct per namespace and class, and valid on every backend.
func TestTwoInstallationsDeriveDistinctIDs(t *testing.T) {
	golden := []struct{ namespace, class, want string }{
		{"egress-proxies-operator-system", "", clusterUID + "-b4683df395e0"},
		{"egress-proxies-operator-system", "gpu", clusterUID + "-154af0e44bb2"},
		{"", "", clusterUID + "-8a5edab28263"}, // outside the cluster
	}
	for _, g := range golden {
		got, err := deriveInstallationID(clusterUID, g.namespace, g.class)
		if err != nil || got != g.want {
			t.Errorf("deriveInstallationID(%q, %q) = %q, %v; want %q: a changed derivation makes every existing instance another installation's", g.namespace, g.class, got, err, g.want)
		}
		markSafe(t, got)
	}

	seen := map[string]string{}
	for _, in := range [][2]string{
		{"egress-system", ""}, {"team-a", ""}, {"team-b", ""}, {"egress-system", "gpu"}, {"team-a", "gpu"},
		{"", ""}, {"", "gpu"},
		// the separator keeps namespace and class apart
		{"a", "b"}, {"ab", ""},
		{strings.Repeat("n", 63), strings.Repeat("c", 63)},
	} {
		id, err := deriveInstallationID(clusterUID, in[0], in[1])
		if err != nil {
			t.Fatalf("%v: %v", in, err)
		}
		markSafe(t, id)
		if !strings.HasPrefix(id, clusterUID+"-") {
			t.Errorf("%v: %q does not start with the cluster's UID", in, id)
		}
		if prev, ok := seen[id]; ok {
			t.Errorf("%v and %s share the installation ID %q", in, prev, id)
		}
		seen[id] = strings.Join(in[:], "/")
	}

	// An API server's UID is lowercase already; one that is not is
	// lowercased, and one no mark can hold is refused with the way out.
	if id, err := deriveInstallationID(strings.ToUpper(clusterUID), "ns", ""); err != nil || !strings.HasPrefix(id, clusterUID) {
		t.Errorf("uppercase UID: %q, %v", id, err)
	}
	if _, err := deriveInstallationID("uid.with.dots", "ns", ""); err == nil || !strings.Contains(err.Error(), "--installation-id") {
		t.Errorf("unusable UID: err = %v; want a refusal naming --installation-id", err)
	}
}

// TestTwoInstallationsGetDistinctDefaultIDs: on the real API server, two
// operators in different namespaces of one cluster, or of different
// classes in one namespace, derive different default installation IDs; one
// installation derives the same ID at every start.
func TestTwoInstallationsGetDistinctDefaultIDs(t *testing.T) {
	ctx := context.Background()
	ks := &corev1.Namespace{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks); err != nil {
		t.Fatal(err)
	}
	id := func(namespace, class string) string {
		t.Helper()
		got, err := defaultInstallationID(ctx, env.Config, namespace, class)
		if err != nil {
			t.Fatal(err)
		}
		markSafe(t, got)
		if !strings.HasPrefix(got, string(ks.UID)+"-") {
			t.Errorf("%q does not start with the kube-system UID %s", got, ks.UID)
		}
		return got
	}
	a, b, aGPU := id("egress-a", ""), id("egress-b", ""), id("egress-a", "gpu")
	if a == b || a == aGPU || b == aGPU {
		t.Errorf("installation IDs egress-a %q, egress-b %q, egress-a/gpu %q; want all distinct", a, b, aGPU)
	}
	if again := id("egress-a", ""); again != a {
		t.Errorf("egress-a derived %q, then %q; want the same at every start", a, again)
	}
}

func TestOperatorNamespace(t *testing.T) {
	dir := t.TempDir()
	sa := filepath.Join(dir, "namespace")
	if err := os.WriteFile(sa, []byte("from-sa\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, pod, file, want string
	}{
		{"POD_NAMESPACE wins", "from-env", sa, "from-env"},
		{"the service account's namespace in a Pod without POD_NAMESPACE", "", sa, "from-sa"},
		{"outside the cluster", "", filepath.Join(dir, "absent"), ""},
	}
	for _, tt := range tests {
		if got := operatorNamespace(tt.pod, tt.file); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestCheckScope(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want string // "" accepted, else a fragment of the error
	}{
		{"defaults", Options{}, ""},
		{"a class and namespaces", Options{ProxyClass: "gpu", Namespaces: []string{"team-a", "team-b"}}, ""},
		{"explicit ID with underscore", Options{InstallationID: "prod_eu-1"}, ""},
		{"explicit ID of 63", Options{InstallationID: strings.Repeat("i", 63)}, ""},
		{"class uppercase", Options{ProxyClass: "GPU"}, "--proxy-class"},
		{"class dotted", Options{ProxyClass: "gpu.large"}, "--proxy-class"},
		{"namespace invalid", Options{Namespaces: []string{"team-a", "Team_B"}}, `--watch-namespaces: "Team_B"`},
		{"explicit ID uppercase", Options{InstallationID: "Prod"}, "--installation-id"},
		{"explicit ID dotted", Options{InstallationID: "prod.eu"}, "--installation-id"},
		{"explicit ID of 64", Options{InstallationID: strings.Repeat("i", 64)}, "--installation-id"},
		{"explicit ID ending in a dash", Options{InstallationID: "prod-"}, "--installation-id"},
	}
	for _, tt := range tests {
		err := checkScope(tt.o)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: err = %v; want one naming %s", tt.name, err, tt.want)
		}
	}
}

func TestScopeFlags(t *testing.T) {
	for in, want := range map[string]string{"": "", "team-a": "team-a", " team-a, ,team-b ,": "team-a|team-b"} {
		if got := strings.Join(splitList(in), "|"); got != want {
			t.Errorf("splitList(%q) = %q, want %q", in, got, want)
		}
	}
	if leaderElectionID("") != "egress-proxies-operator.proxy-operator.dev" || leaderElectionID("gpu") != "gpu.egress-proxies-operator.proxy-operator.dev" {
		t.Errorf("leader-election IDs %q, %q", leaderElectionID(""), leaderElectionID("gpu"))
	}
}
