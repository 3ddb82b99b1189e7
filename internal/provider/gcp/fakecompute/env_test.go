package fakecompute_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
)

const (
	project = "proj-1"
	zone    = "us-central1-a"
	region  = "us-central1"
)

// env is the fake behind an httptest server and every SDK client the
// provider uses, all built the way the provider builds them.
type env struct {
	t    *testing.T
	ctx  context.Context
	fake *fakecompute.Server
	srv  *httptest.Server
	ic   *compute.InstancesClient
	zo   *compute.ZoneOperationsClient
	gop  *compute.GlobalOperationsClient
	fw   *compute.FirewallsClient
	rc   *compute.RegionsClient
	pc   *compute.ProjectsClient
	ac   *compute.AddressesClient
	ro   *compute.RegionOperationsClient
}

func newEnv(t *testing.T, opts ...fakecompute.Option) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, fake: fakecompute.New(opts...)}
	e.srv = httptest.NewServer(e.fake)
	t.Cleanup(e.srv.Close)
	co := []option.ClientOption{option.WithEndpoint(e.srv.URL), option.WithoutAuthentication()}
	var err error
	if e.ic, err = compute.NewInstancesRESTClient(ctx, co...); err != nil {
		t.Fatal(err)
	}
	if e.zo, err = compute.NewZoneOperationsRESTClient(ctx, co...); err != nil {
		t.Fatal(err)
	}
	if e.gop, err = compute.NewGlobalOperationsRESTClient(ctx, co...); err != nil {
		t.Fatal(err)
	}
	// The firewall client takes the caller's *http.Client, the other way
	// the provider may build its clients (an instrumented transport).
	if e.fw, err = compute.NewFirewallsRESTClient(ctx, option.WithEndpoint(e.srv.URL), option.WithHTTPClient(e.srv.Client())); err != nil {
		t.Fatal(err)
	}
	if e.rc, err = compute.NewRegionsRESTClient(ctx, co...); err != nil {
		t.Fatal(err)
	}
	if e.pc, err = compute.NewProjectsRESTClient(ctx, co...); err != nil {
		t.Fatal(err)
	}
	if e.ac, err = compute.NewAddressesRESTClient(ctx, co...); err != nil {
		t.Fatal(err)
	}
	if e.ro, err = compute.NewRegionOperationsRESTClient(ctx, co...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range []interface{ Close() error }{e.ic, e.zo, e.gop, e.fw, e.rc, e.pc, e.ac, e.ro} {
			_ = c.Close()
		}
	})
	return e
}

// body is a valid insert body: e2-small, Debian 12, the default network
// with an external address, two labels, a startup script.
func body(name string) *computepb.Instance {
	return &computepb.Instance{
		Name:        proto.String(name),
		MachineType: proto.String("zones/" + zone + "/machineTypes/e2-small"),
		Labels:      map[string]string{"egress-operator-managed": "true", "egress-operator-uid": "6f1c2a"},
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String("projects/debian-cloud/global/images/family/debian-12"),
				DiskSizeGb:  proto.Int64(20)}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"),
			AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}}}},
		Metadata: &computepb.Metadata{Items: []*computepb.Items{{Key: proto.String("user-data"),
			Value: proto.String("#cloud-config\npassword: s3cret\n")}}},
		Tags: &computepb.Tags{Items: []string{"egress-proxy-6f1c2a"}},
	}
}

func (e *env) insert(b *computepb.Instance) *compute.Operation {
	e.t.Helper()
	op, err := e.insertErr(b, "")
	if err != nil {
		e.t.Fatalf("insert %s: %v", b.GetName(), err)
	}
	return op
}

func (e *env) insertErr(b *computepb.Instance, requestID string) (*compute.Operation, error) {
	req := &computepb.InsertInstanceRequest{Project: project, Zone: zone, InstanceResource: b}
	if requestID != "" {
		req.RequestId = proto.String(requestID)
	}
	return e.ic.Insert(e.ctx, req)
}

func (e *env) get(name string) (*computepb.Instance, error) {
	return e.ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: zone, Instance: name})
}

func (e *env) mustGet(name string) *computepb.Instance {
	e.t.Helper()
	in, err := e.get(name)
	if err != nil {
		e.t.Fatalf("get %s: %v", name, err)
	}
	return in
}

func (e *env) pollZoneOp(name string) *computepb.Operation {
	e.t.Helper()
	op, err := e.zo.Get(e.ctx, &computepb.GetZoneOperationRequest{Project: project, Zone: zone, Operation: name})
	if err != nil {
		e.t.Fatalf("zoneOperations.get %s: %v", name, err)
	}
	return op
}

// wantAPIError checks err is the SDK's decoding of an API error with this
// status, reason and a message containing msg.
func wantAPIError(t *testing.T, err error, code int, reason, msg string) *googleapi.Error {
	t.Helper()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) {
		t.Fatalf("want a *googleapi.Error %d %s, got %T: %v", code, reason, err, err)
	}
	if gerr.Code != code {
		t.Errorf("code %d, want %d (%v)", gerr.Code, code, err)
	}
	if reason != "" && (len(gerr.Errors) == 0 || gerr.Errors[0].Reason != reason) {
		t.Errorf("reasons %+v, want %s", gerr.Errors, reason)
	}
	if !strings.Contains(gerr.Message, msg) {
		t.Errorf("message %q, want it to contain %q", gerr.Message, msg)
	}
	return gerr
}

// aggregated lists every instance and warning of an aggregated list.
func (e *env) aggregated(filter string, pageSize uint32) (names []string, warnings map[string]string) {
	e.t.Helper()
	req := &computepb.AggregatedListInstancesRequest{Project: project}
	req.Filter, req.MaxResults = listParams(filter, pageSize)
	warnings = map[string]string{}
	it := e.ic.AggregatedList(e.ctx, req)
	eachItem(e.t, fmt.Sprintf("aggregatedList %q", filter), it.Next, func(pair compute.InstancesScopedListPair) {
		for _, in := range pair.Value.GetInstances() {
			names = append(names, in.GetName())
		}
		if w := pair.Value.GetWarning(); w != nil && warnings[pair.Key] != "UNREACHABLE" {
			warnings[pair.Key] = w.GetCode()
		}
	})
	return names, warnings
}

// listParams are a list request's filter and maxResults; "" and 0 leave
// them out.
func listParams(filter string, size uint32) (*string, *uint32) {
	var f *string
	var n *uint32
	if filter != "" {
		f = proto.String(filter)
	}
	if size > 0 {
		n = proto.Uint32(size)
	}
	return f, n
}

// eachItem hands every item an SDK iterator's next yields to f; an error
// fails the test, what saying which list it was.
func eachItem[T any](t *testing.T, what string, next func() (T, error), f func(T)) {
	t.Helper()
	for {
		v, err := next()
		if err == iterator.Done {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		f(v)
	}
}

// raw sends a request straight to the fake (no SDK), for the wire form.
func (e *env) raw(method, path string) (*http.Response, []byte) {
	e.t.Helper()
	return e.do(method, e.srv.URL+path, nil)
}

// do sends one request to the fake and reads the whole answer.
func (e *env) do(method, url string, body io.Reader) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, method, url, body)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, b
}
