package fakecompute_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// addressesDiscovery is testdata/discovery-addresses.json: the methods
// (by id) and schemas of compute v1's discovery document that the
// addresses, access-config and region-operation endpoints answer by.
type addressesDiscovery struct {
	Revision string `json:"revision"`
	Methods  map[string]struct {
		HTTPMethod string `json:"httpMethod"`
		Path       string `json:"path"`
		Parameters map[string]struct {
			Location string `json:"location"`
			Required bool   `json:"required"`
		} `json:"parameters"`
		Request *struct {
			Ref string `json:"$ref"`
		} `json:"request"`
		Response *struct {
			Ref string `json:"$ref"`
		} `json:"response"`
	} `json:"methods"`
	Schemas map[string]map[string]any `json:"schemas"`
}

const addressesExcerpt = "testdata/discovery-addresses.json"

// queryParams says, for each method, what the fake does with each of its
// query parameters: "honoured" ones change the answer (tested here or in
// the test named), "ignored" ones are accepted and change nothing (the
// fake does not model them). Together they must be exactly the method's
// query parameters in the discovery document.
var queryParams = map[string]struct{ honoured, ignored []string }{
	"compute.addresses.aggregatedList":     {[]string{"filter", "maxResults", "pageToken"}, []string{"includeAllScopes", "orderBy", "serviceProjectNumber"}},
	"compute.addresses.list":               {[]string{"filter", "maxResults", "pageToken"}, []string{"orderBy"}},
	"compute.addresses.get":                {},
	"compute.addresses.insert":             {[]string{"requestId"}, nil},
	"compute.addresses.delete":             {[]string{"requestId"}, nil},
	"compute.addresses.setLabels":          {[]string{"requestId"}, nil},
	"compute.instances.addAccessConfig":    {[]string{"networkInterface", "requestId"}, nil},
	"compute.instances.deleteAccessConfig": {[]string{"accessConfig", "networkInterface", "requestId"}, nil},
	"compute.regionOperations.get":         {},
	"compute.regionOperations.wait":        {},
}

// callOrder is the order the endpoint test calls the methods in, so each
// finds what it needs (delete last).
var callOrder = []string{
	"compute.addresses.insert", "compute.addresses.get", "compute.addresses.list", "compute.addresses.aggregatedList",
	"compute.addresses.setLabels", "compute.regionOperations.get", "compute.regionOperations.wait",
	"compute.instances.addAccessConfig", "compute.instances.deleteAccessConfig", "compute.addresses.delete",
}

func (e *env) send(method, path string, q url.Values, body string) (int, string, []byte) {
	e.t.Helper()
	u := e.srv.URL + "/compute/v1/" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	resp, b := e.do(method, u, rd)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// The fake's endpoints are the discovery document's: each method answers
// at its path and HTTP method (and only there: another HTTP method on the
// path is the front end's 404), its path parameters are the path's, its
// required query parameters are required, the optional ones do what they
// say, and every answer (and the access config on the instance) has only
// fields of its schema, enum values among the schema's, and its kind.
func TestAddressEndpointsMatchTheDiscoveryDocument(t *testing.T) {
	d := readJSON[addressesDiscovery](t, addressesExcerpt)
	var ids []string
	for id := range d.Methods {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	order := slices.Clone(callOrder)
	sort.Strings(order)
	if !slices.Equal(ids, order) {
		t.Fatalf("the excerpt's methods %v are not the ones the test calls %v", ids, order)
	}

	e := newEnv(t)
	if err := e.fake.PutAddress(project, region, &computepb.Address{Name: proto.String("egress-ip")}); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.PutAddress(project, region, &computepb.Address{Name: proto.String("egress-ip2")}); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.PutInstance(project, zone, body("egress-a"), ""); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.PutInstance(project, zone, bareBody("egress-b"), ""); err != nil {
		t.Fatal(err)
	}
	values := map[string]string{"project": project, "region": region, "zone": zone, "address": "egress-ip",
		"resource": "egress-ip", "instance": "egress-a"}
	perMethod := map[string]map[string]string{"compute.instances.addAccessConfig": {"instance": "egress-b"}}
	requiredValues := map[string]string{"networkInterface": "nic0", "accessConfig": "External NAT"}
	bodies := map[string]func() string{
		"Address":      func() string { return `{"name":"egress-new","labels":{"egress-operator-managed":"true"}}` },
		"AccessConfig": func() string { return `{"name":"External NAT","type":"ONE_TO_ONE_NAT"}` },
		"RegionSetLabelsRequest": func() string {
			return `{"labels":{"proxy":"p1"},"labelFingerprint":"` + e.fake.Address(project, region, "egress-ip").GetLabelFingerprint() + `"}`
		},
	}
	declared := map[string][]string{} // path template -> its HTTP methods
	for _, m := range d.Methods {
		declared[m.Path] = append(declared[m.Path], m.HTTPMethod)
	}

	for i, id := range callOrder {
		m := d.Methods[id]
		requestID := fmt.Sprintf("0b5c0d7e-0000-4000-8000-%012d", i+1) // one per call: an id names one call
		t.Run(id, func(t *testing.T) {
			// Path parameters: exactly the path's, all required.
			var inPath []string
			for _, g := range pathParam.FindAllStringSubmatch(m.Path, -1) {
				inPath = append(inPath, g[1])
			}
			var pathParams, query, required []string
			for name, p := range m.Parameters {
				switch {
				case p.Location == "path":
					pathParams = append(pathParams, name)
					if !p.Required {
						t.Errorf("path parameter %s not required", name)
					}
				case p.Required:
					required = append(required, name)
					query = append(query, name)
				default:
					query = append(query, name)
				}
			}
			sort.Strings(inPath)
			sort.Strings(pathParams)
			if !slices.Equal(inPath, pathParams) {
				t.Errorf("path %s has parameters %v, the method declares %v", m.Path, inPath, pathParams)
			}
			// Query parameters: the fake's table is the document's.
			qp := queryParams[id]
			known := append(slices.Clone(qp.honoured), qp.ignored...)
			sort.Strings(known)
			sort.Strings(query)
			if !slices.Equal(known, query) {
				t.Errorf("query parameters %v, the fake's table says %v", query, known)
			}

			path := pathParam.ReplaceAllStringFunc(m.Path, func(s string) string {
				name := s[1 : len(s)-1]
				if v, ok := perMethod[id][name]; ok {
					return v
				}
				return values[name]
			})
			q := url.Values{}
			for _, name := range required {
				q.Set(name, requiredValues[name])
			}
			reqBody := ""
			if m.Request != nil {
				reqBody = bodies[m.Request.Ref]()
			}

			// Another HTTP method on the path is no endpoint.
			for _, other := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
				if slices.Contains(declared[m.Path], other) {
					continue
				}
				if code, ct, _ := e.send(other, path, q, ""); code != 404 || !strings.HasPrefix(ct, "text/html") {
					t.Errorf("%s %s: %d %s, want the front end's 404", other, path, code, ct)
				}
			}
			// Required query parameters are required.
			for _, name := range required {
				without := url.Values{}
				for k, v := range q {
					if k != name {
						without[k] = v
					}
				}
				code, _, b := e.send(m.HTTPMethod, path, without, reqBody)
				if code != 400 || !strings.Contains(string(b), `"reason":"required"`) || !strings.Contains(string(b), "'"+name+"'") {
					t.Errorf("without %s: %d %s, want 400 required naming it", name, code, b)
				}
			}
			// requestId makes the call idempotent.
			if slices.Contains(qp.honoured, "requestId") {
				q.Set("requestId", requestID)
			}

			code, ct, b := e.send(m.HTTPMethod, path, q, reqBody)
			if code != 200 || !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("%s %s?%s: %d %s %s", m.HTTPMethod, path, q.Encode(), code, ct, b)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			checkDiscovery(t, d, m.Response.Ref, map[string]any{"$ref": m.Response.Ref}, got, m.Response.Ref)
			if q.Has("requestId") {
				_, _, again := e.send(m.HTTPMethod, path, q, reqBody)
				var op map[string]any
				if err := json.Unmarshal(again, &op); err != nil || op["name"] != got["name"] || got["name"] == nil {
					t.Errorf("the same requestId answered %s, want the operation %v", again, got["name"])
				}
			}
			switch id {
			case "compute.addresses.insert":
				// The next methods poll this insert's operation.
				values["operation"] = got["name"].(string)
			case "compute.addresses.list", "compute.addresses.aggregatedList":
				checkPaging(t, e, path)
			case "compute.instances.addAccessConfig":
				e.fake.Settle()
				_, _, ib := e.send("GET", pathParam.ReplaceAllStringFunc("projects/{project}/zones/{zone}/instances/egress-b",
					func(s string) string { return values[s[1:len(s)-1]] }), nil, "")
				var in struct {
					NetworkInterfaces []struct {
						AccessConfigs []map[string]any `json:"accessConfigs"`
					} `json:"networkInterfaces"`
				}
				if err := json.Unmarshal(ib, &in); err != nil || len(in.NetworkInterfaces) == 0 || len(in.NetworkInterfaces[0].AccessConfigs) != 1 {
					t.Fatalf("instance after addAccessConfig: %s", ib)
				}
				checkDiscovery(t, d, "AccessConfig", map[string]any{"$ref": "AccessConfig"}, in.NetworkInterfaces[0].AccessConfigs[0], "AccessConfig")
			}
		})
	}
}

// checkPaging: maxResults cuts a page and sets nextPageToken, pageToken
// goes on from it, filter selects.
func checkPaging(t *testing.T, e *env, path string) {
	t.Helper()
	names := func(q url.Values) ([]string, string) {
		_, _, b := e.send("GET", path, q, "")
		var l struct {
			Items         json.RawMessage `json:"items"`
			NextPageToken string          `json:"nextPageToken"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		var flat []map[string]any
		var scoped map[string]struct {
			Addresses []map[string]any `json:"addresses"`
		}
		if json.Unmarshal(l.Items, &flat) != nil && json.Unmarshal(l.Items, &scoped) == nil {
			for _, s := range scoped {
				flat = append(flat, s.Addresses...)
			}
		}
		var out []string
		for _, a := range flat {
			out = append(out, a["name"].(string))
		}
		sort.Strings(out)
		return out, l.NextPageToken
	}
	first, tok := names(url.Values{"maxResults": {"1"}})
	if len(first) != 1 || tok == "" {
		t.Errorf("maxResults=1: %v, token %q", first, tok)
	}
	second, _ := names(url.Values{"maxResults": {"1"}, "pageToken": {tok}})
	if len(second) != 1 || second[0] == first[0] {
		t.Errorf("pageToken: %v after %v", second, first)
	}
	if got, _ := names(url.Values{"filter": {`name eq "egress-ip2"`}}); !slices.Equal(got, []string{"egress-ip2"}) {
		t.Errorf("filter: %v", got)
	}
}

// checkDiscovery fails for any field of v its schema does not declare,
// any enum value not among the schema's, any JSON type not the schema's,
// and a kind other than the schema's default, following $ref, nested
// objects, arrays and maps (additionalProperties).
func checkDiscovery(t *testing.T, d addressesDiscovery, name string, schema map[string]any, v any, at string) {
	t.Helper()
	if ref, ok := schema["$ref"].(string); ok {
		s, ok := d.Schemas[ref]
		if !ok {
			t.Errorf("%s: schema %s is not in the excerpt", at, ref)
			return
		}
		schema, name = s, ref
	}
	typ, _ := schema["type"].(string)
	switch x := v.(type) {
	case map[string]any:
		if typ != "object" {
			t.Errorf("%s: an object where %s is %q", at, name, typ)
			return
		}
		props, _ := schema["properties"].(map[string]any)
		extra, _ := schema["additionalProperties"].(map[string]any)
		for k, val := range x {
			p, ok := props[k].(map[string]any)
			switch {
			case ok:
				if k == "kind" && p["default"] != nil && val != p["default"] {
					t.Errorf("%s.kind %v, want %v", at, val, p["default"])
				}
				checkDiscovery(t, d, name+"."+k, p, val, at+"."+k)
			case extra != nil:
				checkDiscovery(t, d, name+"[]", extra, val, at+"["+k+"]")
			default:
				t.Errorf("%s: field %s is not in %s", at, k, name)
			}
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		if typ != "array" || items == nil {
			t.Errorf("%s: an array where %s is %q", at, name, typ)
			return
		}
		for i, it := range x {
			checkDiscovery(t, d, name, items, it, at+"["+strconv.Itoa(i)+"]")
		}
	case string:
		if typ != "string" {
			t.Errorf("%s: a string where %s is %q", at, name, typ)
		}
		if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, any(x)) {
			t.Errorf("%s: %q is not one of %v", at, x, enum)
		}
	case float64:
		if typ != "integer" && typ != "number" {
			t.Errorf("%s: a number where %s is %q", at, name, typ)
		}
	case bool:
		if typ != "boolean" {
			t.Errorf("%s: a boolean where %s is %q", at, name, typ)
		}
	}
}

// The excerpt is the module's discovery document, unchanged: the
// google.golang.org/api the repository requires carries it.
func TestAddressesDiscoveryExcerpt(t *testing.T) {
	checkExcerptOfModuleDocument(t, addressesExcerpt)
}
