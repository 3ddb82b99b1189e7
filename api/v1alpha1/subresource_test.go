package v1alpha1_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestProxyStatusSubresource: the operator owns status and the user owns
// spec; each endpoint must ignore the other half, and only spec changes
// bump the generation that status.observedGeneration answers.
func TestProxyStatusSubresource(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	p := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec:       v1alpha1.ProxySpec{Provider: "local"},
		// Dropped on create: status can only be written through /status.
		Status: v1alpha1.ProxyStatus{Phase: v1alpha1.PhaseRunning},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != "" || p.Generation != 1 {
		t.Fatalf("after create: status.phase %q generation %d; want no status, generation 1", p.Status.Phase, p.Generation)
	}

	// Through /status: the status change lands, the spec change does not.
	p.Spec.Port = 9999
	p.Status = v1alpha1.ProxyStatus{Phase: v1alpha1.PhaseRunning, Endpoint: "10.0.0.1:3128", ObservedGeneration: 1}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.Proxy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Port != 3128 || got.Status.Phase != v1alpha1.PhaseRunning || got.Status.Endpoint != "10.0.0.1:3128" || got.Generation != 1 {
		t.Fatalf("after /status update: port %d phase %q endpoint %q generation %d; want 3128, Running, 10.0.0.1:3128, 1",
			got.Spec.Port, got.Status.Phase, got.Status.Endpoint, got.Generation)
	}

	// Through the main resource: the spec change lands, the status change
	// does not.
	got.Spec.Port = 8080
	got.Status.Phase = v1alpha1.PhaseFailed
	if err := env.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	again := &v1alpha1.Proxy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), again); err != nil {
		t.Fatal(err)
	}
	if again.Spec.Port != 8080 || again.Status.Phase != v1alpha1.PhaseRunning || again.Generation != 2 {
		t.Fatalf("after main update: port %d phase %q generation %d; want 8080, Running, 2",
			again.Spec.Port, again.Status.Phase, again.Generation)
	}
}

func TestProviderHealthIsClusterScoped(t *testing.T) {
	gvk := v1alpha1.GroupVersion.WithKind("ProviderHealth")
	mapping, err := env.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatal(err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameRoot {
		t.Fatalf("ProviderHealth scope = %s, want root (cluster)", mapping.Scope.Name())
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "providerhealths.egress.proxy-operator.dev"}, crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Scope != apiextensionsv1.ClusterScoped {
		t.Fatalf("CRD scope = %s", crd.Spec.Scope)
	}
	// Proxy, by contrast, lives in a namespace.
	pm, err := env.Client.RESTMapper().RESTMapping(v1alpha1.GroupVersion.WithKind("Proxy").GroupKind(), "v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	if pm.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Fatalf("Proxy scope = %s, want namespace", pm.Scope.Name())
	}
}

// TestProviderHealthStatus: the health loop creates the object, then writes
// its status through /status (a status sent on create is dropped).
func TestProviderHealthStatus(t *testing.T) {
	ctx := t.Context()
	ph := &v1alpha1.ProviderHealth{
		ObjectMeta: metav1.ObjectMeta{Name: "gcp-europe"},
		Status:     v1alpha1.ProviderHealthStatus{Type: "gcp"},
	}
	if err := env.Client.Create(ctx, ph); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ph) })
	if ph.Namespace != "" || ph.Status.Type != "" {
		t.Fatalf("after create: namespace %q status.type %q; want none of either", ph.Namespace, ph.Status.Type)
	}

	checked := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ph.Status = v1alpha1.ProviderHealthStatus{
		Type:          "gcp",
		Target:        "project my-project",
		Address:       "https://compute.googleapis.com",
		Details:       map[string]string{"zones": "3", "quota.cpus.free": "12"},
		LastCheckTime: &checked,
		Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, Reason: "Reachable",
			Message: "listed zones", LastTransitionTime: checked,
		}},
	}
	if err := env.Client.Status().Update(ctx, ph); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.ProviderHealth{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "gcp-europe"}, got); err != nil {
		t.Fatal(err)
	}
	s := got.Status
	c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionHealthy)
	if s.Type != "gcp" || s.Target != "project my-project" || s.Address != "https://compute.googleapis.com" ||
		s.Details["quota.cpus.free"] != "12" || s.LastCheckTime == nil || !s.LastCheckTime.Equal(&checked) ||
		c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Reachable" {
		t.Fatalf("status read back as %+v", s)
	}

	// A status sent to the main resource is ignored.
	got.Status.Type = "kvm"
	if err := env.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "gcp-europe"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Type != "gcp" {
		t.Fatalf("main-resource update changed status.type to %q", got.Status.Type)
	}

	// The Healthy condition is validated like any metav1.Condition.
	bad := got.DeepCopy()
	bad.Status.Conditions[0].Reason = "not a reason"
	checkInvalid(t, env.Client.Status().Update(ctx, bad), invalid{"status.conditions[0].reason", "should match"})
}

// TestPrinterColumns reads the generated CRDs: `kubectl get` columns are
// part of the API users see.
func TestPrinterColumns(t *testing.T) {
	tests := []struct {
		glob string
		want []apiextensionsv1.CustomResourceColumnDefinition
	}{
		{"*_proxies.yaml", []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Provider", Type: "string", JSONPath: ".spec.provider"},
			{Name: "Class", Type: "string", JSONPath: ".spec.className"},
			{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
			{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
			{Name: "Reason", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].reason`},
			{Name: "Endpoint", Type: "string", JSONPath: ".status.endpoint"},
			{Name: "Egress IP", Type: "string", JSONPath: ".status.egressIP"},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		}},
		{"*_providerhealths.yaml", []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Type", Type: "string", JSONPath: ".status.type"},
			{Name: "Healthy", Type: "string", JSONPath: `.status.conditions[?(@.type=="Healthy")].status`},
			{Name: "Reason", Type: "string", JSONPath: `.status.conditions[?(@.type=="Healthy")].reason`},
			{Name: "Last Check", Type: "date", JSONPath: ".status.lastCheckTime"},
		}},
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		files, _ := filepath.Glob(filepath.Join(root, "config", "crd", "bases", tt.glob))
		if len(files) != 1 {
			t.Fatalf("config/crd/bases/%s matches %v, want one file", tt.glob, files)
		}
		data, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			t.Fatalf("%s: %v", files[0], err)
		}
		if len(crd.Spec.Versions) != 1 {
			t.Fatalf("%s: %d versions, want 1", files[0], len(crd.Spec.Versions))
		}
		if got := crd.Spec.Versions[0].AdditionalPrinterColumns; !slices.Equal(got, tt.want) {
			t.Errorf("%s printer columns:\n got %+v\nwant %+v", filepath.Base(files[0]), got, tt.want)
		}
	}
}

// TestProxyTable asks the live server for the table `kubectl get proxies`
// prints, to see the columns filled from a real object.
func TestProxyTable(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	p := &v1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shown"},
		Spec:       v1alpha1.ProxySpec{Provider: "local", ClassName: "team-a"},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status = v1alpha1.ProxyStatus{Phase: v1alpha1.PhaseRunning, Endpoint: "127.0.0.1:40001", EgressIP: "203.0.113.7",
		Egress: &v1alpha1.EgressObservation{Source: "Echo", ProviderID: "i-1"}, Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRunning, Message: "serving at 127.0.0.1:40001",
			LastTransitionTime: metav1.Now()}}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}

	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(env.Config.Host, "/") + "/apis/egress.proxy-operator.dev/v1alpha1/namespaces/" + ns + "/proxies"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET table: %s: %s", resp.Status, body)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(body, table); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Provider", "Class", "Phase", "Ready", "Reason", "Endpoint", "Egress IP", "Age"}; !slices.Equal(names, want) {
		t.Fatalf("columns %v, want %v", names, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	cells := table.Rows[0].Cells
	if cells[0] != "shown" || cells[1] != "local" || cells[2] != "team-a" || cells[3] != "Running" ||
		cells[4] != "True" || cells[5] != "Running" || cells[6] != "127.0.0.1:40001" || cells[7] != "203.0.113.7" {
		t.Fatalf("row %v", cells)
	}
}
