// Package fakecompute is a fake of the Compute Engine v1 REST API for
// tests: the real SDK (cloud.google.com/go/compute/apiv1 REST clients) talks
// to it over HTTP, so a provider is tested through the code it runs in
// production, wire format, error decoding, retries and operation polling
// included. There is no Compute emulator; this is the stand-in.
//
//	fake := fakecompute.New()
//	srv := httptest.NewServer(fake)
//	ic, _ := compute.NewInstancesRESTClient(ctx,
//		option.WithEndpoint(srv.URL), option.WithoutAuthentication())
//
// (option.WithHTTPClient(c) instead of WithoutAuthentication uses c as is,
// e.g. an otelhttp transport; an operation's Wait polls the same endpoint.)
// It is imported by tests only, like internal/provider/providertest.
//
// # What is modelled
//
// Paths (under /compute/v1/projects/{p}): GET the project; regions/{r}
// (with quotas); zones/{z}; aggregated/instances; zones/{z}/instances (list,
// insert); zones/{z}/instances/{n} (get, delete) and its start, stop,
// suspend, resume, setLabels, getGuestAttributes, addAccessConfig and
// deleteAccessConfig; aggregated/addresses; regions/{r}/addresses (list,
// insert) and regions/{r}/addresses/{n} (get, delete) and its setLabels;
// zones/{z}/operations/{op}, regions/{r}/operations/{op} and
// global/operations/{op} (get, and POST .../wait); global/firewalls (list,
// insert) and global/firewalls/{n} (get, patch, update, delete). Any other
// path answers the HTML 404 page of Google's front end, which the SDK turns
// into a *googleapi.Error with Code 404 and no Message or Errors.
//
// Wire form: protojson of the SDK's own computepb messages, so field names
// are camelCase, int64/uint64 (id, targetId, diskSizeGb) are strings,
// enums are names; kind, id, selfLink and creationTimestamp (RFC 3339 with
// milliseconds and a -08:00 offset, as the API writes Pacific time) are
// set; links are https://www.googleapis.com/compute/v1/... . Request bodies
// are decoded strictly: an unknown field is 400, as the API answers.
//
// Catalogue: projects, regions and zones, machine types, images and
// networks (DefaultCatalogue; WithCatalogue). An unknown project is 404
// "The resource 'projects/x' was not found"; an unknown zone 400 "Invalid
// value for field 'zone': 'x'. Unknown zone." (a region's likewise); an unknown machine type 400
// "Machine type with name 't' does not exist in zone 'z'."; an unknown image
// 404 for its path; a malformed reference 400 "The URL is malformed.".
//
// Inserts are validated as the API does before accepting them: the name
// (`[a-z]([-a-z0-9]{0,61}[a-z0-9])?`), the machine type as
// zones/<z>/machineTypes/<t> (or the URL), the boot disk first with
// initializeParams.sourceImage, a network interface on a known network (the
// default network when none is named), network tags, and labels (keys and
// values of lowercase letters, digits, '_' and '-', international letters
// allowed, keys starting with a letter, 63 characters at most, 64 labels at
// most) with the API's messages. An INGRESS firewall rule without any
// source gets sourceRanges 0.0.0.0/0, as the API fills it in.
//
// Time: nothing waits on a clock. An operation runs for SetOperationPolls
// polls (default 2): each zoneOperations/globalOperations get, each GET of
// its target (SetAdvanceOnGet, default on; the GET answers first) and each
// Advance step counts one, and the poll that makes it DONE applies its
// effect. An insert makes the instance PROVISIONING at once (STAGING on
// the next step, with its internal address from 10.128.0.0/20; RUNNING with
// its external address from TEST-NET-3 203.0.113.0/24 when the operation is
// DONE, or SetAddressDelay steps later); delete makes it STOPPING and
// removes it at DONE; stop STOPPING then TERMINATED (external address
// released); start PROVISIONING, STAGING, RUNNING with a new external
// address; suspend SUSPENDING then SUSPENDED; resume STAGING then RUNNING.
// A call on an instance another operation is running on answers 400
// resourceNotReady; a second delete while one runs answers per
// SetRepeatDelete (403 rateLimitExceeded by default). The addresses are
// strings only; nothing listens on them and no test may connect to them.
// operations.wait runs the operation out (SetWaitPolls to return early).
//
// Addresses (addresses.go, accessconfigs.go): a reserved regional address
// is RESERVING while its insert's regional operation runs, then RESERVED;
// IN_USE, users naming the instance, while an instance holds it through its
// access config's natIP or its networkIP (on insert, addAccessConfig, or by
// reserving the ephemeral IP an instance has), RESERVED again after
// deleteAccessConfig or the instance's delete (a stopped instance keeps
// it). External ones come from 203.0.113.0/24 like ephemeral ones, internal
// ones from 10.128.0.0/20. Deleting an IN_USE address is 400
// resourceInUseByAnotherResource; a natIP naming no reserved address of the
// instance's region is 400 "... The specified external IP address 'x' was
// not found in region 'r'."; an IP another resource holds fails the
// operation with IP_IN_USE_BY_ANOTHER_RESOURCE (409); a second access
// config is 400 "At most one access config currently supported."; static
// external addresses count against the region's STATIC_ADDRESSES quota.
//
// Guest attributes (guestattributes.go): a test writes and withdraws them
// as the guest would (SetGuestAttribute, DeleteGuestAttribute), which only
// a RUNNING instance whose metadata has enable-guest-attributes = TRUE can;
// getGuestAttributes answers them by queryPath ("", "<ns>/", "<ns>/<key>")
// or the legacy variableKey, 404 notFound for a path with no value, and
// moves no operation.
//
// Idempotency: a repeated requestId (a UUID; anything else is 400) returns
// the operation the first call started.
//
// Asynchronous failures (AsyncError): the call is accepted with a RUNNING
// operation that ends DONE with error.errors[{code, message, errorDetails}]
// and httpErrorStatusCode/httpErrorMessage, or without the latter
// (WithoutHTTPStatus), in which case the SDK's Operation.Wait returns nil
// and only op.Proto().GetError() shows the failure. A failed insert leaves
// no instance (GET 404 while its operation runs; the name stays taken, 409,
// until it is DONE). Quota: an insert over the region's CPUS, INSTANCES or
// IN_USE_ADDRESSES limit (SetRegionQuota; usage counted from the instances)
// fails asynchronously with QUOTA_EXCEEDED, or synchronously with 403
// quotaExceeded (SetQuotaSynchronous); so does an address insert over
// STATIC_ADDRESSES.
//
// Lists: aggregatedList and list take filter (see below), maxResults (500
// at most) and pageToken and answer nextPageToken. Every zone of the
// catalogue is a key on every aggregated page: its instances on the page,
// or a warning NO_RESULTS_ON_PAGE, or for a zone made unreachable
// (SetZoneUnreachable) a warning UNREACHABLE and none of its instances
// (also in "unreachables" with returnPartialSuccess=true, which this SDK
// version cannot send but raw clients can). Filters: `labels.k = "v"`,
// `labels.k=v`, `(labels.a = "x") AND (labels.b = "y")`, OR, `!=`,
// `labels.k:*`, and the regular-expression form `name eq "re"`; mixing the
// forms or naming an unknown field is 400 "Invalid list filter expression.".
//
// Knobs for tests, Karpenter-fake style: Requests (method, path, query, a
// body summary with metadata values elided, status), Count, FailNext (a
// synchronous APIError or an AsyncError for the next N calls matching a
// method and path pattern, or Always), SetOperationPolls, SetWaitPolls,
// SetAdvanceOnGet, Advance, Settle, SetAddressDelay, SetZoneUnreachable,
// SetRegionQuota, SetProjectQuota, SetQuotaSynchronous, SetRepeatDelete,
// RequireToken (401 without the bearer token), PutInstance,
// SetInstanceStatus, SetGuestAttribute, DeleteGuestAttribute, PutFirewall,
// PutAddress, Instance, Instances, Firewall, Address, Addresses,
// Operation(s), Reset. Every method is safe for concurrent use; each call
// is served under one lock.
//
// # What is not modelled
//
// Other resources (disks as resources, global addresses, images, networks
// beyond their names, instance groups, templates), addresses.move, access
// configs on network interfaces other than nic0, resources named by id, IAM (every call is allowed
// unless a fault says otherwise), per-method rate quotas (inject
// RateLimitExceeded or TooManyRequests), orderBy, includeAllScopes,
// fields/prettyPrint, metadata and tag updates, machine type changes,
// deletion protection, preemption, live migration, multiple NICs beyond
// echoing them, IPv6, the filter grammar beyond the forms above, and the
// 60-minute expiry of request ids. The fake never sleeps; the SDK does
// (Operation.Wait backs off from 1 s; its GET and list calls retry 503
// and 504 from 100 ms), so tests that call Wait take about a second per
// poll past the first.
//
// # Sources
//
// Every error constructor (apierror.go, asyncerror.go) names the public
// issue thread or document its text and shape come from; texts no source
// quotes are marked "fake's own" there and follow the API's frame ("Invalid
// value for field '<f>': '<v>'. <reason>"). The SDK behaviour relied on is
// in cloud.google.com/go/compute@v1.75.0/apiv1 (operations.go: Wait and
// Poll; instances_client.go: the paths, query parameters and retry
// options) and google.golang.org/api/googleapi (CheckResponseWithBody).
package fakecompute
