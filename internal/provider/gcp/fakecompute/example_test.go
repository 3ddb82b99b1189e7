package fakecompute_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/fakecompute"
)

// A provider's view: insert, poll the instance until RUNNING, delete, poll
// until 404, then read the request log.
func Example() {
	ctx := context.Background()
	fake := fakecompute.New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ic, err := compute.NewInstancesRESTClient(ctx, option.WithEndpoint(srv.URL), option.WithoutAuthentication())
	if err != nil {
		panic(err)
	}
	defer ic.Close()

	ref := &computepb.GetInstanceRequest{Project: "proj-1", Zone: "us-central1-a", Instance: "egress-a"}
	if _, err := ic.Insert(ctx, &computepb.InsertInstanceRequest{Project: "proj-1", Zone: "us-central1-a",
		InstanceResource: body("egress-a")}); err != nil {
		panic(err)
	}
	for {
		in, err := ic.Get(ctx, ref)
		if err != nil {
			panic(err)
		}
		fmt.Println(in.GetStatus())
		if in.GetStatus() == "RUNNING" {
			break
		}
	}
	if _, err := ic.Delete(ctx, &computepb.DeleteInstanceRequest{Project: "proj-1", Zone: "us-central1-a", Instance: "egress-a"}); err != nil {
		panic(err)
	}
	for {
		in, err := ic.Get(ctx, ref)
		var gerr *googleapi.Error
		if errors.As(err, &gerr) && gerr.Code == 404 {
			fmt.Println("404", gerr.Errors[0].Reason)
			break
		}
		fmt.Println(in.GetStatus())
	}
	for _, r := range fake.Requests() {
		fmt.Println(r)
	}
	// Output:
	// PROVISIONING
	// STAGING
	// RUNNING
	// STOPPING
	// STOPPING
	// 404 notFound
	// POST /compute/v1/projects/proj-1/zones/us-central1-a/instances -> 200
	// GET /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a -> 200
	// GET /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a -> 200
	// GET /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a -> 200
	// DELETE /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a -> 200
	// GET /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a -> 200
	// GET /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a -> 200
	// GET /compute/v1/projects/proj-1/zones/us-central1-a/instances/egress-a -> 404
}
