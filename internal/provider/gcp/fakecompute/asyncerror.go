package fakecompute

import (
	"fmt"
	"net/http"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// AsyncError is how an accepted operation fails: the request answers 200 with
// a RUNNING operation, and the operation ends DONE with
//
//	"error": {"errors": [{"code": "...", "message": "...", "errorDetails": [...]}]},
//	"httpErrorStatusCode": 503, "httpErrorMessage": "SERVICE UNAVAILABLE"
//
// The SDK's Operation.Wait returns an error only when httpErrorStatusCode is
// set (zoneOperationsHandle.Poll in cloud.google.com/go/compute/apiv1
// operations.go); WithoutHTTPStatus drops it, and then Wait returns nil while
// op.Proto().GetError() holds the failure (the recipe's trap).
//
// The constructors leave the request's particulars (project, zone, machine
// type, image) to be filled in from the request the error meets.
type AsyncError struct {
	kind        asyncKind
	metric      string // QuotaExceeded
	code        string // Custom
	ip          string // IPInUseByAnotherResource
	message     string // Custom
	httpStatus  int32
	httpMessage string
	noHTTP      bool
}

type asyncKind int

const (
	kindPoolExhausted asyncKind = iota + 1
	kindPoolExhaustedDetails
	kindQuota
	kindImageNotFound
	kindMachineType
	kindIPInUse
	kindCustom
)

// ZoneResourcePoolExhausted: the zone has no capacity. Text (two spaces before
// "Try") and the operation shape: CCExtractor/sample-platform#901 (a whole
// operation: code, message, errorDetails help + localizedMessage),
// googlefonts/fontbakery-dashboard#81; httpErrorStatusCode 503 "SERVICE
// UNAVAILABLE": scylladb/scylla-cluster-tests#12477 and the recipe.
func ZoneResourcePoolExhausted() *AsyncError {
	return &AsyncError{kind: kindPoolExhausted, httpStatus: http.StatusServiceUnavailable, httpMessage: "SERVICE UNAVAILABLE"}
}

// ZoneResourcePoolExhaustedWithDetails: the newer stock-out form, "... fulfill
// the request.  '(resource type:compute)'." with an ErrorInfo detail (reason
// resource_availability, metadatas vmType/zone/zonesAvailable).
// Source: scylladb/scylla-cluster-tests#12477 (text, 503 SERVICE UNAVAILABLE),
// kubernetes/k8s.io#9834 (errorDetails), google/syzkaller#4385.
func ZoneResourcePoolExhaustedWithDetails() *AsyncError {
	return &AsyncError{kind: kindPoolExhaustedDetails, httpStatus: http.StatusServiceUnavailable, httpMessage: "SERVICE UNAVAILABLE"}
}

// QuotaExceededAsync: the regional quota metric (CPUS, INSTANCES,
// IN_USE_ADDRESSES, STATIC_ADDRESSES) is used up, "Quota 'CPUS' exceeded.  Limit: 24.0 in region
// us-central1." with a quotaInfo detail, httpErrorStatusCode 403 "FORBIDDEN".
// Source: kubernetes/k8s.io#6380 (message and quotaInfo: metric name
// compute.googleapis.com/cpus, limit name CPUS-per-project-region, dimensions
// region), GoogleCloudPlatform/ai-on-gke#849 (HttpErrorStatusCode:403
// HttpErrorMessage:FORBIDDEN on the insert operation). For STATIC_ADDRESSES
// on addresses.insert: "Quota 'STATIC_ADDRESSES' exceeded.  Limit: 1.0 in
// region us-east1." (mesosphere-backup/terraform-dcos#61, as Terraform
// printed the operation's error), code QUOTA_EXCEEDED (kubeflow/testing#616,
// "ResourceErrorCode":"QUOTA_EXCEEDED" for STATIC_ADDRESSES).
func QuotaExceededAsync(metric string) *AsyncError {
	return &AsyncError{kind: kindQuota, metric: metric, httpStatus: http.StatusForbidden, httpMessage: "FORBIDDEN"}
}

// ImageNotFound: the boot image does not exist, code RESOURCE_NOT_FOUND
// "The resource 'projects/debian-cloud/global/images/family/debian-8' was not
// found" (the text: googlecodelabs/feedback#463), httpErrorStatusCode 404.
// The catalogue check answers a bad image synchronously (404 notFound, as
// googleapis/google-cloud-java#11032 saw); this is the asynchronous form.
func ImageNotFound() *AsyncError {
	return &AsyncError{kind: kindImageNotFound, httpStatus: http.StatusNotFound, httpMessage: "NOT FOUND"}
}

// InvalidMachineType: the machine type does not exist in the zone, as an
// operation error: code UNSUPPORTED_OPERATION, "Machine type with name 'x'
// does not exist in zone 'z'.", httpErrorStatusCode 400 "BAD REQUEST".
// Source: a recorded operation in apache/airflow's compute operator tests
// (setMachineType). The catalogue check answers it synchronously on insert
// (gruntwork-io/terratest#1132); this is the asynchronous form.
func InvalidMachineType() *AsyncError {
	return &AsyncError{kind: kindMachineType, httpStatus: http.StatusBadRequest, httpMessage: "BAD REQUEST"}
}

// IPInUseByAnotherResource: the IP an insert asks for (an instance's
// networkIP or natIP, an address's address) is another resource's: code
// IP_IN_USE_BY_ANOTHER_RESOURCE, "IP '10.0.0.0' is already being used by
// another resource.", httpErrorStatusCode 409 "CONFLICT". Source: an
// instance insert's operation quoted from `gcloud compute operations
// describe` in a public kubernetes-the-hard-way write-up (code and message),
// hashicorp/terraform#18998 (the message, instance networkIP of a reserved
// internal address), GoogleCloudPlatform's NFS proxy docs ('error code
// "IP_IN_USE_BY_ANOTHER_RESOURCE", message: IP '10.0.0.2' is already being
// used by another resource.', forwarding rule); the 409 is how
// kubernetes/ingress-gce's tests model it (googleapi.Error Code
// StatusConflict). For an external natIP held by another instance no newer
// source quotes the answer (hashicorp/terraform#3841, 2015, shows an older
// "Specified IP address is already allocated to an instance."); the fake
// answers the same as for an internal IP.
func IPInUseByAnotherResource(ip string) *AsyncError {
	return &AsyncError{kind: kindIPInUse, ip: ip, httpStatus: http.StatusConflict, httpMessage: "CONFLICT"}
}

// CustomAsyncError is an operation error with the given code and message and
// the given httpErrorStatusCode/httpErrorMessage (0 and "" leave them out).
func CustomAsyncError(code, message string, httpStatus int32, httpMessage string) *AsyncError {
	return &AsyncError{kind: kindCustom, code: code, message: message, httpStatus: httpStatus,
		httpMessage: httpMessage, noHTTP: httpStatus == 0}
}

// WithoutHTTPStatus returns a copy without httpErrorStatusCode and
// httpErrorMessage: the operation carries only "error", and the SDK's Wait
// returns nil for it.
func (e *AsyncError) WithoutHTTPStatus() *AsyncError {
	c := *e
	c.noHTTP = true
	return &c
}

// opContext is what an operation error is rendered from.
type opContext struct {
	project, zone, region string
	machineType, image    string // short machine type name, image path
	cpus                  int
	limit                 float64 // quota limit of metric
}

// render builds the operation's error fields.
func (e *AsyncError) render(c opContext) (errs *computepb.Error, httpStatus *int32, httpMessage *string) {
	var item *computepb.Errors
	help := &computepb.ErrorDetails{Help: &computepb.Help{Links: []*computepb.HelpLink{{
		Description: proto.String("Troubleshooting documentation"),
		Url:         proto.String("https://cloud.google.com/compute/docs/resource-error"),
	}}}}
	unavailable := &computepb.ErrorDetails{LocalizedMessage: &computepb.LocalizedMessage{
		Locale: proto.String("en-US"),
		// GoogleCloudPlatform/ai-on-gke#849 (the form without zonesAvailable).
		Message: proto.String(fmt.Sprintf("A %s VM instance is currently unavailable in the %s zone. "+
			"Alternatively, you can try your request again with a different VM hardware configuration "+
			"or at a later time. For more information, see the troubleshooting documentation.", c.machineType, c.zone)),
	}}
	switch e.kind {
	case kindPoolExhausted:
		item = &computepb.Errors{Code: proto.String("ZONE_RESOURCE_POOL_EXHAUSTED"),
			Message: proto.String(fmt.Sprintf("The zone 'projects/%s/zones/%s' does not have enough resources "+
				"available to fulfill the request.  Try a different zone, or try again later.", c.project, c.zone)),
			ErrorDetails: []*computepb.ErrorDetails{help, unavailable}}
	case kindPoolExhaustedDetails:
		item = &computepb.Errors{Code: proto.String("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
			Message: proto.String(fmt.Sprintf("The zone 'projects/%s/zones/%s' does not have enough resources "+
				"available to fulfill the request.  '(resource type:compute)'.", c.project, c.zone)),
			ErrorDetails: []*computepb.ErrorDetails{help, unavailable, {ErrorInfo: &computepb.ErrorInfo{
				Domain: proto.String("compute.googleapis.com"),
				Reason: proto.String("resource_availability"),
				Metadatas: map[string]string{"attachment": "", "vmType": c.machineType,
					"zone": c.zone, "zonesAvailable": ""},
			}}}}
	case kindQuota:
		metricName, limitName := quotaNames(e.metric)
		item = &computepb.Errors{Code: proto.String("QUOTA_EXCEEDED"),
			Message: proto.String(quotaMessage(e.metric, c.limit, c.region)),
			ErrorDetails: []*computepb.ErrorDetails{{QuotaInfo: &computepb.QuotaExceededInfo{
				MetricName: proto.String(metricName), LimitName: proto.String(limitName),
				Dimensions: map[string]string{"region": c.region}, Limit: proto.Float64(c.limit),
			}}}}
	case kindImageNotFound:
		item = &computepb.Errors{Code: proto.String("RESOURCE_NOT_FOUND"),
			Message: proto.String(fmt.Sprintf("The resource '%s' was not found", c.image))}
	case kindMachineType:
		item = &computepb.Errors{Code: proto.String("UNSUPPORTED_OPERATION"),
			Message: proto.String(fmt.Sprintf("Machine type with name '%s' does not exist in zone '%s'.", c.machineType, c.zone))}
	case kindIPInUse:
		item = &computepb.Errors{Code: proto.String("IP_IN_USE_BY_ANOTHER_RESOURCE"),
			Message: proto.String(fmt.Sprintf("IP '%s' is already being used by another resource.", e.ip))}
	default:
		item = &computepb.Errors{Code: proto.String(e.code), Message: proto.String(e.message)}
	}
	errs = &computepb.Error{Errors: []*computepb.Errors{item}}
	if !e.noHTTP {
		httpStatus, httpMessage = proto.Int32(e.httpStatus), proto.String(e.httpMessage)
	}
	return errs, httpStatus, httpMessage
}

// quotaNames are the metric and limit names of a regional quota in a
// quotaInfo detail. CPUS is quoted in kubernetes/k8s.io#6380; the limit
// names IN-USE-ADDRESSES-per-project-region and
// STATIC-ADDRESSES-per-project-region appear in a public quota table; the
// metric names follow CPUS's pattern (fake's own).
func quotaNames(metric string) (metricName, limitName string) {
	switch metric {
	case "CPUS":
		return "compute.googleapis.com/cpus", "CPUS-per-project-region"
	case "INSTANCES":
		return "compute.googleapis.com/instances", "INSTANCES-per-project-region"
	case "IN_USE_ADDRESSES":
		return "compute.googleapis.com/in_use_addresses", "IN-USE-ADDRESSES-per-project-region"
	case "STATIC_ADDRESSES":
		return "compute.googleapis.com/static_addresses", "STATIC-ADDRESSES-per-project-region"
	}
	return "compute.googleapis.com/" + metric, metric + "-per-project-region"
}
