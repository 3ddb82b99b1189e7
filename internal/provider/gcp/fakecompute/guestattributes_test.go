package fakecompute_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
)

// guestBody is body(name) with guest attributes enabled, as gcloud's tests
// spell TRUE.
func guestBody(name, enable string) *computepb.Instance {
	b := body(name)
	if enable != "" {
		b.Metadata.Items = append(b.Metadata.Items, &computepb.Items{Key: proto.String("enable-guest-attributes"), Value: proto.String(enable)})
	}
	return b
}

func (e *env) guestAttributes(name, queryPath string) (*computepb.GuestAttributes, error) {
	return e.ic.GetGuestAttributes(e.ctx, &computepb.GetGuestAttributesInstanceRequest{
		Project: project, Zone: zone, Instance: name, QueryPath: proto.String(queryPath)})
}

// items is "ns/key=value" for each entry.
func items(ga *computepb.GuestAttributes) []string {
	var out []string
	for _, it := range ga.GetQueryValue().GetItems() {
		out = append(out, it.GetNamespace()+"/"+it.GetKey()+"="+it.GetValue())
	}
	return out
}

// The guest writes and withdraws; getGuestAttributes reads by key, by
// namespace and everything, answers 404 notFound for a path with no value,
// and advances nothing.
func TestGuestAttributesReadAndWithdraw(t *testing.T) {
	e := newEnv(t)
	if err := e.fake.PutInstance(project, zone, guestBody("egress-g", "TruE"), ""); err != nil {
		t.Fatal(err)
	}
	_, err := e.guestAttributes("egress-g", "egress-proxy/report")
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/proj-1/zones/us-central1-a/instances/egress-g/guestAttributes/egress-proxy/report' was not found")

	for _, kv := range [][3]string{{"egress-proxy", "report", "serving=yes\n"}, {"egress-proxy", "other", "x"}, {"hostkeys", "ssh-ed25519", "AAAA"}} {
		if err := e.fake.SetGuestAttribute(project, zone, "egress-g", kv[0], kv[1], kv[2]); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"egress-proxy/report", []string{"egress-proxy/report=serving=yes\n"}},
		{"egress-proxy/", []string{"egress-proxy/other=x", "egress-proxy/report=serving=yes\n"}},
		{"", []string{"egress-proxy/other=x", "egress-proxy/report=serving=yes\n", "hostkeys/ssh-ed25519=AAAA"}},
	} {
		ga, err := e.guestAttributes("egress-g", tc.path)
		if err != nil {
			t.Fatalf("queryPath %q: %v", tc.path, err)
		}
		if got := items(ga); !slices.Equal(got, tc.want) || ga.GetQueryPath() != tc.path || ga.GetKind() != "compute#guestAttributes" ||
			ga.GetSelfLink() != "https://www.googleapis.com/compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-g/guestAttributes/" {
			t.Errorf("queryPath %q: %v, want items %q", tc.path, ga, tc.want)
		}
	}

	// The legacy variableKey answers variableValue.
	ga, err := e.ic.GetGuestAttributes(e.ctx, &computepb.GetGuestAttributesInstanceRequest{
		Project: project, Zone: zone, Instance: "egress-g", VariableKey: proto.String("hostkeys/ssh-ed25519")})
	if err != nil || ga.GetVariableValue() != "AAAA" || ga.GetQueryValue() != nil {
		t.Errorf("variableKey: %v %v", ga, err)
	}

	if err := e.fake.DeleteGuestAttribute(project, zone, "egress-g", "egress-proxy", "report"); err != nil {
		t.Fatal(err)
	}
	_, err = e.guestAttributes("egress-g", "egress-proxy/report")
	wantAPIError(t, err, 404, "notFound", "/guestAttributes/egress-proxy/report' was not found")

	_, err = e.guestAttributes("egress-g", "a/b/c")
	wantAPIError(t, err, 400, "invalid", "Invalid value for field 'queryPath': 'a/b/c'.")
	_, err = e.guestAttributes("egress-none", "egress-proxy/report")
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/proj-1/zones/us-central1-a/instances/egress-none' was not found")

	if n := e.fake.Count("GET", "projects/proj-1/zones/*/instances/egress-g/getGuestAttributes"); n != 7 {
		t.Errorf("%d getGuestAttributes calls counted, want 7", n)
	}
}

// A read is no poll: an operation on the instance stays where it is.
func TestGuestAttributesReadsAdvanceNothing(t *testing.T) {
	e := newEnv(t)
	e.insert(guestBody("egress-p", "TRUE"))
	for range 5 {
		_, err := e.guestAttributes("egress-p", "egress-proxy/report")
		wantAPIError(t, err, 404, "notFound", "was not found")
	}
	if st := e.fake.Instance(project, zone, "egress-p").GetStatus(); st != "PROVISIONING" {
		t.Errorf("status %s after reads, want PROVISIONING", st)
	}
}

// Without enable-guest-attributes = TRUE (any case) the guest cannot
// write; nor can a guest that does not run.
func TestGuestAttributesNeedTheMetadataKeyAndARunningGuest(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, enable string }{{"egress-none", ""}, {"egress-false", "false"}, {"egress-odd", "yes"}} {
		if err := e.fake.PutInstance(project, zone, guestBody(tc.name, tc.enable), ""); err != nil {
			t.Fatal(err)
		}
		if err := e.fake.SetGuestAttribute(project, zone, tc.name, "egress-proxy", "report", "serving=yes"); !errors.Is(err, fakecompute.ErrGuestAttributesDisabled) {
			t.Errorf("%s (enable-guest-attributes %q): %v, want ErrGuestAttributesDisabled", tc.name, tc.enable, err)
		}
		_, err := e.guestAttributes(tc.name, "egress-proxy/report")
		wantAPIError(t, err, 404, "notFound", "was not found")
	}
	if err := e.fake.PutInstance(project, zone, guestBody("egress-stopped", "TRUE"), "TERMINATED"); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.SetGuestAttribute(project, zone, "egress-stopped", "egress-proxy", "report", "x"); err == nil || !strings.Contains(err.Error(), "TERMINATED") {
		t.Errorf("a TERMINATED instance's guest wrote: %v", err)
	}
}

// discoveryExcerpt is testdata/discovery-guest-attributes.json: the
// getGuestAttributes method and its schemas from the compute v1 discovery
// document.
type discoveryExcerpt struct {
	Revision string `json:"revision"`
	Methods  map[string]struct {
		HTTPMethod string                     `json:"httpMethod"`
		Path       string                     `json:"path"`
		Parameters map[string]json.RawMessage `json:"parameters"`
		Response   struct {
			Ref string `json:"$ref"`
		} `json:"response"`
	} `json:"methods"`
	Schemas map[string]struct {
		Properties map[string]struct {
			Default string `json:"default"`
			Ref     string `json:"$ref"`
			Items   struct {
				Ref string `json:"$ref"`
			} `json:"items"`
		} `json:"properties"`
	} `json:"schemas"`
}

const guestAttributesExcerpt = "testdata/discovery-guest-attributes.json"

// readJSON decodes the JSON file at path.
func readJSON[T any](t *testing.T, path string) T {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The fake's getGuestAttributes is the discovery document's: its method
// and path, its query parameters, and an answer whose every field (nested
// ones too) is a property of GuestAttributes, with its kind.
func TestGuestAttributesMatchTheDiscoveryDocument(t *testing.T) {
	d := readJSON[discoveryExcerpt](t, guestAttributesExcerpt)
	m, ok := d.Methods["compute.instances.getGuestAttributes"]
	if !ok || m.HTTPMethod != "GET" || m.Path != "projects/{project}/zones/{zone}/instances/{instance}/getGuestAttributes" || m.Response.Ref != "GuestAttributes" {
		t.Fatalf("the excerpt's method: %+v", m)
	}
	for _, q := range []string{"queryPath", "variableKey"} {
		if _, ok := m.Parameters[q]; !ok {
			t.Errorf("parameter %s is not the method's", q)
		}
	}

	e := newEnv(t)
	if err := e.fake.PutInstance(project, zone, guestBody("egress-w", "TRUE"), ""); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.SetGuestAttribute(project, zone, "egress-w", "egress-proxy", "report", "serving=yes"); err != nil {
		t.Fatal(err)
	}
	for _, query := range []string{"queryPath=egress-proxy%2Freport", "variableKey=egress-proxy%2Freport"} {
		resp, b := e.raw("GET", "/compute/v1/"+strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(m.Path,
			"{project}", project), "{zone}", zone), "{instance}", "egress-w")+"?"+query)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", query, resp.StatusCode, b)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got["kind"] != d.Schemas["GuestAttributes"].Properties["kind"].Default {
			t.Errorf("kind %v, want the schema's default %q", got["kind"], d.Schemas["GuestAttributes"].Properties["kind"].Default)
		}
		checkSchema(t, d, "GuestAttributes", got)
	}
}

// checkSchema fails for any field of v that schema does not declare,
// following $ref into objects and arrays.
func checkSchema(t *testing.T, d discoveryExcerpt, schema string, v map[string]any) {
	t.Helper()
	props := d.Schemas[schema].Properties
	for k, val := range v {
		p, ok := props[k]
		if !ok {
			t.Errorf("field %s.%s is not in the discovery document", schema, k)
			continue
		}
		switch x := val.(type) {
		case map[string]any:
			checkSchema(t, d, p.Ref, x)
		case []any:
			for _, it := range x {
				if obj, ok := it.(map[string]any); ok {
					checkSchema(t, d, p.Items.Ref, obj)
				}
			}
		}
	}
}

// The excerpt is the module's discovery document, unchanged: the
// google.golang.org/api the repository requires carries it.
func TestGuestAttributesDiscoveryExcerpt(t *testing.T) {
	checkExcerptOfModuleDocument(t, guestAttributesExcerpt)
}

// checkExcerptOfModuleDocument checks that the excerpt at path (its
// revision, methods by id and schemas) is the discovery document of the
// google.golang.org/api the repository requires, unchanged.
func checkExcerptOfModuleDocument(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to find the module cache")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "google.golang.org/api").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go list -m google.golang.org/api: %v", err)
	}
	type document struct {
		Revision  string `json:"revision"`
		Resources map[string]struct {
			Methods map[string]json.RawMessage `json:"methods"`
		} `json:"resources"`
		Schemas map[string]json.RawMessage `json:"schemas"`
	}
	doc := readJSON[document](t, filepath.Join(strings.TrimSpace(string(out)), "compute", "v1", "compute-api.json"))
	excerpt := readJSON[struct {
		Revision string                     `json:"revision"`
		Methods  map[string]json.RawMessage `json:"methods"`
		Schemas  map[string]json.RawMessage `json:"schemas"`
	}](t, path)
	same := func(a, b json.RawMessage) bool {
		var x, y any
		return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
	}
	if excerpt.Revision != doc.Revision {
		t.Errorf("excerpt of revision %s, the module's document is %s: extract it again", excerpt.Revision, doc.Revision)
	}
	for id, m := range excerpt.Methods {
		parts := strings.Split(id, ".") // compute.<resource>.<method>
		if len(parts) != 3 || !same(m, doc.Resources[parts[1]].Methods[parts[2]]) {
			t.Errorf("the excerpt's %s differs from the module's discovery document", id)
		}
	}
	for name, s := range excerpt.Schemas {
		if !same(s, doc.Schemas[name]) {
			t.Errorf("the excerpt's schema %s differs from the module's discovery document", name)
		}
	}
}
