package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/callctx"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"
)

// computeAPI is the seam: exactly the Compute Engine calls the provider
// makes, ctx first, each bound to the entry's project (the firewall calls
// to the network's, which differs for a Shared VPC). Errors are the SDK's
// (a *googleapi.Error under an *apierror.APIError, or a transport error);
// the provider classifies them where it knows what the call was for.
type computeAPI interface {
	GetInstance(ctx context.Context, zone, name string) (*computepb.Instance, error)
	InsertInstance(ctx context.Context, zone string, in *computepb.Instance, requestID string) (*computepb.Operation, error)
	DeleteInstance(ctx context.Context, zone, name, requestID string) (*computepb.Operation, error)
	StartInstance(ctx context.Context, zone, name string) (*computepb.Operation, error)
	ResumeInstance(ctx context.Context, zone, name string) (*computepb.Operation, error)
	SetInstanceLabels(ctx context.Context, zone, name string, labels map[string]string, fingerprint string) (*computepb.Operation, error)
	// GetGuestAttributes reads the guest attributes under queryPath
	// ("<namespace>/<key>" for one value).
	GetGuestAttributes(ctx context.Context, zone, name, queryPath string) (*computepb.GuestAttributes, error)
	// ListInstances reads every page of the aggregated list with filter,
	// handing each zone's part of each page to each.
	ListInstances(ctx context.Context, filter string, each func(scope string, part *computepb.InstancesScopedList)) error
	WaitZoneOperation(ctx context.Context, zone, op string) (*computepb.Operation, error)
	// GetZoneOperation reads an operation without waiting (Delete reads
	// its delete's operation within the caller's bound).
	GetZoneOperation(ctx context.Context, zone, op string) (*computepb.Operation, error)

	GetFirewall(ctx context.Context, name string) (*computepb.Firewall, error)
	InsertFirewall(ctx context.Context, fw *computepb.Firewall) (*computepb.Operation, error)
	// UpdateFirewall replaces the rule (PUT), so fields the provider does
	// not set are cleared: a patch would keep a source tag added by hand.
	UpdateFirewall(ctx context.Context, name string, fw *computepb.Firewall) (*computepb.Operation, error)
	DeleteFirewall(ctx context.Context, name string) (*computepb.Operation, error)
	ListFirewalls(ctx context.Context, filter string, each func(*computepb.Firewall)) error
	WaitGlobalOperation(ctx context.Context, op string) (*computepb.Operation, error)

	// AddAccessConfig and DeleteAccessConfig change the external address
	// of an instance's network interface nic in place (the egress address's
	// move).
	AddAccessConfig(ctx context.Context, zone, name, nic string, ac *computepb.AccessConfig) (*computepb.Operation, error)
	DeleteAccessConfig(ctx context.Context, zone, name, nic, accessConfig string) (*computepb.Operation, error)

	// Regional static addresses (the egress address) and their regional
	// operations.
	GetAddress(ctx context.Context, region, name string) (*computepb.Address, error)
	InsertAddress(ctx context.Context, region string, a *computepb.Address) (*computepb.Operation, error)
	DeleteAddress(ctx context.Context, region, name string) (*computepb.Operation, error)
	SetAddressLabels(ctx context.Context, region, name string, labels map[string]string, fingerprint string) (*computepb.Operation, error)
	// ListAddresses reads every page of the aggregated list with filter,
	// handing each scope's part of each page to each.
	ListAddresses(ctx context.Context, filter string, each func(scope string, part *computepb.AddressesScopedList)) error
	WaitRegionOperation(ctx context.Context, region, op string) (*computepb.Operation, error)

	GetProject(ctx context.Context) (*computepb.Project, error)
	GetRegion(ctx context.Context, region string) (*computepb.Region, error)

	Close() error
}

// pageSize is the aggregated and firewall lists' page: the API's maximum,
// so a large project is listed in few calls.
const pageSize = 500

// sdkAPI adapts the SDK's REST clients to the seam.
type sdkAPI struct {
	project   string
	fwProject string

	instances  *compute.InstancesClient
	zoneOps    *compute.ZoneOperationsClient
	firewalls  *compute.FirewallsClient
	globalOps  *compute.GlobalOperationsClient
	projects   *compute.ProjectsClient
	regions    *compute.RegionsClient
	addresses  *compute.AddressesClient
	regionOps  *compute.RegionOperationsClient
	closeOnce  sync.Once
	closeError error
}

var _ computeAPI = (*sdkAPI)(nil)

// newSDKAPI builds the clients over hc (which authenticates and observes
// every request itself: the SDK adds nothing to a client it is given) at
// endpoint ("" is the SDK's default). It makes no call.
func newSDKAPI(project, fwProject, endpoint string, hc *http.Client) (*sdkAPI, error) {
	opts := []option.ClientOption{
		option.WithHTTPClient(hc),
		// The SDK's own telemetry and debug logger stay off: spans come
		// from our transport (parent-gated), and its debug log would dump
		// request bodies, user-data included.
		option.WithTelemetryDisabled(),
		option.WithLogger(discardSlog),
	}
	if endpoint != "" {
		opts = append(opts, option.WithEndpoint(endpoint))
	}
	ctx := context.Background()
	a := &sdkAPI{project: project, fwProject: fwProject}
	var err error
	if a.instances, err = compute.NewInstancesRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	if a.zoneOps, err = compute.NewZoneOperationsRESTClient(ctx, opts...); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if a.firewalls, err = compute.NewFirewallsRESTClient(ctx, opts...); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if a.globalOps, err = compute.NewGlobalOperationsRESTClient(ctx, opts...); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if a.projects, err = compute.NewProjectsRESTClient(ctx, opts...); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if a.regions, err = compute.NewRegionsRESTClient(ctx, opts...); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if a.addresses, err = compute.NewAddressesRESTClient(ctx, opts...); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if a.regionOps, err = compute.NewRegionOperationsRESTClient(ctx, opts...); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	return a, nil
}

// Close closes every client (the earlier providers never closed theirs); later calls
// fail.
func (a *sdkAPI) Close() error {
	a.closeOnce.Do(func() {
		var errs []error
		for _, c := range []interface{ Close() error }{a.instances, a.zoneOps, a.firewalls, a.globalOps, a.projects, a.regions, a.addresses, a.regionOps} {
			if c != nil && !isNilClient(c) {
				errs = append(errs, c.Close())
			}
		}
		a.closeError = errors.Join(errs...)
	})
	return a.closeError
}

// isNilClient tells a typed nil client (one that was never made) apart.
func isNilClient(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *compute.InstancesClient:
		return v == nil
	case *compute.ZoneOperationsClient:
		return v == nil
	case *compute.FirewallsClient:
		return v == nil
	case *compute.GlobalOperationsClient:
		return v == nil
	case *compute.ProjectsClient:
		return v == nil
	case *compute.RegionsClient:
		return v == nil
	case *compute.AddressesClient:
		return v == nil
	case *compute.RegionOperationsClient:
		return v == nil
	}
	return false
}

func (a *sdkAPI) GetInstance(ctx context.Context, zone, name string) (*computepb.Instance, error) {
	return a.instances.Get(ctx, &computepb.GetInstanceRequest{Project: a.project, Zone: zone, Instance: name})
}

func (a *sdkAPI) InsertInstance(ctx context.Context, zone string, in *computepb.Instance, requestID string) (*computepb.Operation, error) {
	return protoOf(a.instances.Insert(ctx, &computepb.InsertInstanceRequest{
		Project: a.project, Zone: zone, InstanceResource: in, RequestId: proto.String(requestID),
	}))
}

func (a *sdkAPI) DeleteInstance(ctx context.Context, zone, name, requestID string) (*computepb.Operation, error) {
	return protoOf(a.instances.Delete(ctx, &computepb.DeleteInstanceRequest{
		Project: a.project, Zone: zone, Instance: name, RequestId: proto.String(requestID),
	}))
}

func (a *sdkAPI) StartInstance(ctx context.Context, zone, name string) (*computepb.Operation, error) {
	return protoOf(a.instances.Start(ctx, &computepb.StartInstanceRequest{Project: a.project, Zone: zone, Instance: name}))
}

func (a *sdkAPI) ResumeInstance(ctx context.Context, zone, name string) (*computepb.Operation, error) {
	return protoOf(a.instances.Resume(ctx, &computepb.ResumeInstanceRequest{Project: a.project, Zone: zone, Instance: name}))
}

func (a *sdkAPI) SetInstanceLabels(ctx context.Context, zone, name string, labels map[string]string, fingerprint string) (*computepb.Operation, error) {
	return protoOf(a.instances.SetLabels(ctx, &computepb.SetLabelsInstanceRequest{
		Project: a.project, Zone: zone, Instance: name,
		InstancesSetLabelsRequestResource: &computepb.InstancesSetLabelsRequest{Labels: labels, LabelFingerprint: proto.String(fingerprint)},
	}))
}

func (a *sdkAPI) GetGuestAttributes(ctx context.Context, zone, name, queryPath string) (*computepb.GuestAttributes, error) {
	return a.instances.GetGuestAttributes(ctx, &computepb.GetGuestAttributesInstanceRequest{
		Project: a.project, Zone: zone, Instance: name, QueryPath: proto.String(queryPath),
	})
}

func (a *sdkAPI) ListInstances(ctx context.Context, filter string, each func(string, *computepb.InstancesScopedList)) error {
	it := a.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project: a.project, Filter: proto.String(filter), MaxResults: proto.Uint32(pageSize),
	})
	return drain(it.Next, func(pair compute.InstancesScopedListPair) { each(pair.Key, pair.Value) })
}

func (a *sdkAPI) WaitZoneOperation(ctx context.Context, zone, op string) (*computepb.Operation, error) {
	return a.zoneOps.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: a.project, Zone: zone, Operation: op})
}

func (a *sdkAPI) GetZoneOperation(ctx context.Context, zone, op string) (*computepb.Operation, error) {
	return a.zoneOps.Get(ctx, &computepb.GetZoneOperationRequest{Project: a.project, Zone: zone, Operation: op})
}

func (a *sdkAPI) GetFirewall(ctx context.Context, name string) (*computepb.Firewall, error) {
	return a.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: a.fwProject, Firewall: name})
}

func (a *sdkAPI) InsertFirewall(ctx context.Context, fw *computepb.Firewall) (*computepb.Operation, error) {
	return protoOf(a.firewalls.Insert(ctx, &computepb.InsertFirewallRequest{Project: a.fwProject, FirewallResource: fw}))
}

func (a *sdkAPI) UpdateFirewall(ctx context.Context, name string, fw *computepb.Firewall) (*computepb.Operation, error) {
	return protoOf(a.firewalls.Update(ctx, &computepb.UpdateFirewallRequest{Project: a.fwProject, Firewall: name, FirewallResource: fw}))
}

func (a *sdkAPI) DeleteFirewall(ctx context.Context, name string) (*computepb.Operation, error) {
	return protoOf(a.firewalls.Delete(ctx, &computepb.DeleteFirewallRequest{Project: a.fwProject, Firewall: name}))
}

func (a *sdkAPI) ListFirewalls(ctx context.Context, filter string, each func(*computepb.Firewall)) error {
	it := a.firewalls.List(ctx, &computepb.ListFirewallsRequest{
		Project: a.fwProject, Filter: proto.String(filter), MaxResults: proto.Uint32(pageSize),
	})
	return drain(it.Next, each)
}

func (a *sdkAPI) WaitGlobalOperation(ctx context.Context, op string) (*computepb.Operation, error) {
	return a.globalOps.Wait(ctx, &computepb.WaitGlobalOperationRequest{Project: a.fwProject, Operation: op})
}

func (a *sdkAPI) AddAccessConfig(ctx context.Context, zone, name, nic string, ac *computepb.AccessConfig) (*computepb.Operation, error) {
	return protoOf(a.instances.AddAccessConfig(ctx, &computepb.AddAccessConfigInstanceRequest{
		Project: a.project, Zone: zone, Instance: name, NetworkInterface: nic, AccessConfigResource: ac,
	}))
}

func (a *sdkAPI) DeleteAccessConfig(ctx context.Context, zone, name, nic, accessConfig string) (*computepb.Operation, error) {
	return protoOf(a.instances.DeleteAccessConfig(ctx, &computepb.DeleteAccessConfigInstanceRequest{
		Project: a.project, Zone: zone, Instance: name, NetworkInterface: nic, AccessConfig: accessConfig,
	}))
}

func (a *sdkAPI) GetAddress(ctx context.Context, region, name string) (*computepb.Address, error) {
	return a.addresses.Get(ctx, &computepb.GetAddressRequest{Project: a.project, Region: region, Address: name})
}

func (a *sdkAPI) InsertAddress(ctx context.Context, region string, addr *computepb.Address) (*computepb.Operation, error) {
	return protoOf(a.addresses.Insert(ctx, &computepb.InsertAddressRequest{Project: a.project, Region: region, AddressResource: addr}))
}

func (a *sdkAPI) DeleteAddress(ctx context.Context, region, name string) (*computepb.Operation, error) {
	return protoOf(a.addresses.Delete(ctx, &computepb.DeleteAddressRequest{Project: a.project, Region: region, Address: name}))
}

func (a *sdkAPI) SetAddressLabels(ctx context.Context, region, name string, labels map[string]string, fingerprint string) (*computepb.Operation, error) {
	return protoOf(a.addresses.SetLabels(ctx, &computepb.SetLabelsAddressRequest{
		Project: a.project, Region: region, Resource: name,
		RegionSetLabelsRequestResource: &computepb.RegionSetLabelsRequest{Labels: labels, LabelFingerprint: proto.String(fingerprint)},
	}))
}

func (a *sdkAPI) ListAddresses(ctx context.Context, filter string, each func(string, *computepb.AddressesScopedList)) error {
	it := a.addresses.AggregatedList(ctx, &computepb.AggregatedListAddressesRequest{
		Project: a.project, Filter: proto.String(filter), MaxResults: proto.Uint32(pageSize),
	})
	return drain(it.Next, func(pair compute.AddressesScopedListPair) { each(pair.Key, pair.Value) })
}

func (a *sdkAPI) WaitRegionOperation(ctx context.Context, region, op string) (*computepb.Operation, error) {
	return a.regionOps.Wait(ctx, &computepb.WaitRegionOperationRequest{Project: a.project, Region: region, Operation: op})
}

func (a *sdkAPI) GetProject(ctx context.Context) (*computepb.Project, error) {
	return a.projects.Get(ctx, &computepb.GetProjectRequest{Project: a.project})
}

func (a *sdkAPI) GetRegion(ctx context.Context, region string) (*computepb.Region, error) {
	return a.regions.Get(ctx, &computepb.GetRegionRequest{Project: a.project, Region: region})
}

// protoOf is the operation an SDK call started (or the call's error) in
// the form the seam hands on.
func protoOf(op *compute.Operation, err error) (*computepb.Operation, error) {
	if err != nil {
		return nil, err
	}
	return op.Proto(), nil
}

// drain hands every item of an SDK list iterator (its Next) to each, page
// after page, until the list ends or a page fails.
func drain[T any](next func() (T, error), each func(T)) error {
	for {
		item, err := next()
		if errors.Is(err, iterator.Done) {
			return nil
		}
		if err != nil {
			return err
		}
		each(item)
	}
}

// ---- the call's ctx on every request ----

// The SDK's list iterators build their HTTP requests without the caller's
// ctx (instances.aggregatedList and firewalls.list in v1.75.0: the request
// is never cancelled, carries no span and no logger). Every seam call
// therefore puts a call ID into the request's headers (gax copies
// callctx headers into every request it builds), and the outermost
// transport gives the request that call's ctx back and strips the header.
// So every request, list pages included, ends with its caller's ctx, is
// logged with its logger and is a child of its span.

// callHeader carries the call ID; it never leaves the process.
const callHeader = "x-egress-proxies-operator-call"

// callRegistry maps live call IDs to their ctx.
type callRegistry struct {
	next  atomic.Uint64
	calls sync.Map // string -> context.Context
}

// begin registers ctx for one seam call; end must be called when it
// returns.
func (r *callRegistry) begin(ctx context.Context) (context.Context, func()) {
	id := strconv.FormatUint(r.next.Add(1), 10)
	r.calls.Store(id, ctx)
	return callctx.SetHeaders(ctx, callHeader, id), func() { r.calls.Delete(id) }
}

// transport restores each request's ctx from its call ID.
func (r *callRegistry) transport(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		id := headerValue(req.Header, callHeader)
		if id == "" {
			return next.RoundTrip(req)
		}
		ctx := req.Context()
		if c, ok := r.calls.Load(id); ok {
			ctx = c.(context.Context)
		}
		out := req.Clone(ctx)
		delete(out.Header, callHeader)
		delete(out.Header, http.CanonicalHeaderKey(callHeader))
		return next.RoundTrip(out)
	})
}

// headerValue reads a header whether its key was canonicalised or not
// (gax builds headers from lower-case metadata keys).
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return h.Get(key)
}

// ---- budgets ----

// Per-call budgets: a call that outlives its budget ends Transient, so a
// hung request never holds a background step for ever. The foreground of
// every provider call (what its caller waits for) is bounded as a whole by
// foregroundBound.
const (
	// readBudget and writeBudget bound one request (the SDK's GET retries
	// on 503 included).
	readBudget  = 20 * time.Second
	writeBudget = 30 * time.Second
	// waitBudget bounds one operations.wait call, which the API answers
	// within two minutes, DONE or not.
	waitBudget = 150 * time.Second
	// foregroundBound is what a Create, Get, Delete or list may spend in
	// total while its caller waits: provider.CallBound minus a margin for
	// the boundary's own work.
	foregroundBound = 9 * time.Second
)

// withBudget bounds ctx by d.
func withBudget(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// budgeted wraps a computeAPI: every call runs under its budget and with
// its call ID (callRegistry).
type budgeted struct {
	inner computeAPI
	calls *callRegistry
}

func (b *budgeted) call(ctx context.Context, d time.Duration) (context.Context, func()) {
	ctx, cancel := withBudget(ctx, d)
	ctx, end := b.calls.begin(ctx)
	return ctx, func() { end(); cancel() }
}

func (b *budgeted) GetInstance(ctx context.Context, zone, name string) (*computepb.Instance, error) {
	ctx, end := b.call(ctx, readBudget)
	defer end()
	return b.inner.GetInstance(ctx, zone, name)
}

func (b *budgeted) InsertInstance(ctx context.Context, zone string, in *computepb.Instance, requestID string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.InsertInstance(ctx, zone, in, requestID)
}

func (b *budgeted) DeleteInstance(ctx context.Context, zone, name, requestID string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.DeleteInstance(ctx, zone, name, requestID)
}

func (b *budgeted) StartInstance(ctx context.Context, zone, name string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.StartInstance(ctx, zone, name)
}

func (b *budgeted) ResumeInstance(ctx context.Context, zone, name string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.ResumeInstance(ctx, zone, name)
}

func (b *budgeted) SetInstanceLabels(ctx context.Context, zone, name string, labels map[string]string, fingerprint string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.SetInstanceLabels(ctx, zone, name, labels, fingerprint)
}

func (b *budgeted) GetGuestAttributes(ctx context.Context, zone, name, queryPath string) (*computepb.GuestAttributes, error) {
	ctx, end := b.call(ctx, readBudget)
	defer end()
	return b.inner.GetGuestAttributes(ctx, zone, name, queryPath)
}

// ListInstances has no budget of its own beyond its caller's ctx: a
// listing is as long as the project is large, and each page is one
// request the caller's ctx ends.
func (b *budgeted) ListInstances(ctx context.Context, filter string, each func(string, *computepb.InstancesScopedList)) error {
	ctx, end := b.calls.begin(ctx)
	defer end()
	return b.inner.ListInstances(ctx, filter, each)
}

func (b *budgeted) WaitZoneOperation(ctx context.Context, zone, op string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, waitBudget)
	defer end()
	return b.inner.WaitZoneOperation(ctx, zone, op)
}

func (b *budgeted) GetZoneOperation(ctx context.Context, zone, op string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, readBudget)
	defer end()
	return b.inner.GetZoneOperation(ctx, zone, op)
}

func (b *budgeted) GetFirewall(ctx context.Context, name string) (*computepb.Firewall, error) {
	ctx, end := b.call(ctx, readBudget)
	defer end()
	return b.inner.GetFirewall(ctx, name)
}

func (b *budgeted) InsertFirewall(ctx context.Context, fw *computepb.Firewall) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.InsertFirewall(ctx, fw)
}

func (b *budgeted) UpdateFirewall(ctx context.Context, name string, fw *computepb.Firewall) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.UpdateFirewall(ctx, name, fw)
}

func (b *budgeted) DeleteFirewall(ctx context.Context, name string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.DeleteFirewall(ctx, name)
}

func (b *budgeted) ListFirewalls(ctx context.Context, filter string, each func(*computepb.Firewall)) error {
	ctx, end := b.calls.begin(ctx)
	defer end()
	return b.inner.ListFirewalls(ctx, filter, each)
}

func (b *budgeted) WaitGlobalOperation(ctx context.Context, op string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, waitBudget)
	defer end()
	return b.inner.WaitGlobalOperation(ctx, op)
}

func (b *budgeted) AddAccessConfig(ctx context.Context, zone, name, nic string, ac *computepb.AccessConfig) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.AddAccessConfig(ctx, zone, name, nic, ac)
}

func (b *budgeted) DeleteAccessConfig(ctx context.Context, zone, name, nic, accessConfig string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.DeleteAccessConfig(ctx, zone, name, nic, accessConfig)
}

func (b *budgeted) GetAddress(ctx context.Context, region, name string) (*computepb.Address, error) {
	ctx, end := b.call(ctx, readBudget)
	defer end()
	return b.inner.GetAddress(ctx, region, name)
}

func (b *budgeted) InsertAddress(ctx context.Context, region string, a *computepb.Address) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.InsertAddress(ctx, region, a)
}

func (b *budgeted) DeleteAddress(ctx context.Context, region, name string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.DeleteAddress(ctx, region, name)
}

func (b *budgeted) SetAddressLabels(ctx context.Context, region, name string, labels map[string]string, fingerprint string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, writeBudget)
	defer end()
	return b.inner.SetAddressLabels(ctx, region, name, labels, fingerprint)
}

// ListAddresses, as ListInstances, has only its caller's ctx.
func (b *budgeted) ListAddresses(ctx context.Context, filter string, each func(string, *computepb.AddressesScopedList)) error {
	ctx, end := b.calls.begin(ctx)
	defer end()
	return b.inner.ListAddresses(ctx, filter, each)
}

func (b *budgeted) WaitRegionOperation(ctx context.Context, region, op string) (*computepb.Operation, error) {
	ctx, end := b.call(ctx, waitBudget)
	defer end()
	return b.inner.WaitRegionOperation(ctx, region, op)
}

func (b *budgeted) GetProject(ctx context.Context) (*computepb.Project, error) {
	ctx, end := b.call(ctx, readBudget)
	defer end()
	return b.inner.GetProject(ctx)
}

func (b *budgeted) GetRegion(ctx context.Context, region string) (*computepb.Region, error) {
	ctx, end := b.call(ctx, readBudget)
	defer end()
	return b.inner.GetRegion(ctx, region)
}

func (b *budgeted) Close() error { return b.inner.Close() }

func (b *budgeted) String() string { return fmt.Sprintf("budgeted(%T)", b.inner) }
