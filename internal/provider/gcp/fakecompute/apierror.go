package fakecompute

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// APIError is a synchronous error answer: the HTTP status and the JSON body
// Google's front end sends, {"error":{"code","message","errors":[{"message",
// "domain","reason"}]}}. The Go SDK turns it into a *googleapi.Error (Code,
// Message, Errors[].Reason) wrapped in an *apierror.APIError.
//
// Message may contain "{resource}" and "{project_number}", replaced by the
// resource path of the request that meets the error (e.g.
// "projects/p/zones/z/instances/x") and its project's number, so one
// injected fault fits whatever call it hits.
type APIError struct {
	Code    int    // HTTP status
	Message string // error.message and error.errors[0].message
	Reason  string // error.errors[0].reason: notFound, invalid, ...
	Domain  string // error.errors[0].domain: "global" or "usageLimits"
	// Status is error.status ("UNAUTHENTICATED", "RESOURCE_EXHAUSTED"); the
	// compute API itself leaves it out of most of its answers, the front end
	// (authentication, rate limits) sets it.
	Status       string
	Location     string // error.errors[0].location, e.g. "If-Match"
	LocationType string // error.errors[0].locationType, e.g. "header"
	// Details is error.details, google.rpc messages in JSON form with @type.
	Details []map[string]any
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, e.Reason, e.Message)
}

// render returns a copy with the placeholders replaced.
func (e *APIError) render(resource, projectNumber string) *APIError {
	c := *e
	c.Message = strings.NewReplacer("{resource}", resource, "{project_number}", projectNumber).Replace(c.Message)
	return &c
}

// body is the JSON the API sends with the error.
func (e *APIError) body() []byte {
	item := map[string]any{"message": e.Message, "domain": e.Domain, "reason": e.Reason}
	if e.Location != "" {
		item["location"] = e.Location
		item["locationType"] = e.LocationType
	}
	inner := map[string]any{"code": e.Code, "message": e.Message, "errors": []any{item}}
	if e.Status != "" {
		inner["status"] = e.Status
	}
	if len(e.Details) > 0 {
		inner["details"] = e.Details
	}
	b, _ := json.Marshal(map[string]any{"error": inner})
	return b
}

func writeAPIError(w http.ResponseWriter, e *APIError) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.Code)
	_, _ = w.Write(e.body())
}

// Synchronous errors. Each constructor cites where its text and shape come
// from (GitHub issue threads quote the bodies the API sent); texts marked
// "fake's own" were not found in any source and only follow the API's frame.

// NotFound: 404 notFound "The resource '<r>' was not found".
// Source: googleapis/google-cloud-go#7802 (body shape), scylladb/scylla-cluster-tests#673,
// googleapis/google-cloud-java#11032 (image), mludvig/gcp-ethereum-miner#1 (project).
func NotFound(resource string) *APIError {
	return &APIError{Code: http.StatusNotFound, Reason: "notFound", Domain: "global",
		Message: fmt.Sprintf("The resource '%s' was not found", resource)}
}

// AlreadyExists: 409 alreadyExists "The resource '<r>' already exists".
// Source: the recipe's proven answer (shared/recipes/gcp), the API's reason list.
func AlreadyExists(resource string) *APIError {
	return &APIError{Code: http.StatusConflict, Reason: "alreadyExists", Domain: "global",
		Message: fmt.Sprintf("The resource '%s' already exists", resource)}
}

// Forbidden: 403 forbidden "Required '<permission>' permission for '<r>'".
// Source: udacity/devops-intro-project#77, cloud-foundation-toolkit#97,
// googleapis/google-api-dotnet-client#2095 (Reason[forbidden] Domain[global]).
func Forbidden(permission, resource string) *APIError {
	return &APIError{Code: http.StatusForbidden, Reason: "forbidden", Domain: "global",
		Message: fmt.Sprintf("Required '%s' permission for '%s'", permission, resource)}
}

// QuotaExceeded: the synchronous quota answer, 403 quotaExceeded
// "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1." (two spaces).
// Source: kubermatic/machine-controller#583 ("Error 403: Quota 'IN_USE_ADDRESSES'
// exceeded. Limit: 30.0 in region europe-west3., quotaExceeded"),
// mesosphere-backup/terraform-dcos#61, kubernetes/k8s.io#6380 (spacing).
func QuotaExceeded(metric string, limit float64, region string) *APIError {
	return &APIError{Code: http.StatusForbidden, Reason: "quotaExceeded", Domain: "global",
		Message: quotaMessage(metric, limit, region)}
}

func quotaMessage(metric string, limit float64, region string) string {
	return fmt.Sprintf("Quota '%s' exceeded.  Limit: %.1f in region %s.", metric, limit, region)
}

// RateLimitExceeded: the API rate quota, 403 rateLimitExceeded (domain
// usageLimits). "If your project exceeds a rate quota, you receive a 403 error
// with the reason rateLimitExceeded" (cloud.google.com/compute/api-quota);
// message form from hashicorp/terraform-provider-google#8360.
func RateLimitExceeded() *APIError {
	return &APIError{Code: http.StatusForbidden, Reason: "rateLimitExceeded", Domain: "usageLimits",
		Message: "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service " +
			"'compute.googleapis.com' for consumer 'project_number:{project_number}'."}
}

// TooManyRequests: 429 with status RESOURCE_EXHAUSTED, the front end's rate
// answer. Message from the 429 body quoted in oneuptime's "How to Resolve HTTP
// 429 Too Many Requests Errors from GCP APIs" (compute read requests); the
// errors[] item (rateLimitExceeded, usageLimits) follows the 403 form.
func TooManyRequests() *APIError {
	return &APIError{Code: http.StatusTooManyRequests, Reason: "rateLimitExceeded", Domain: "usageLimits",
		Status: "RESOURCE_EXHAUSTED",
		Message: "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' " +
			"of service 'compute.googleapis.com' for consumer 'project_number:{project_number}'."}
}

// Invalid: 400 invalid "Invalid value for field '<field>': '<value>'. <why>".
// Source: inspec/inspec-gcp#301 (full body), gruntwork-io/terratest#1132.
func Invalid(field, value, why string) *APIError {
	return &APIError{Code: http.StatusBadRequest, Reason: "invalid", Domain: "global",
		Message: fmt.Sprintf("Invalid value for field '%s': '%s'. %s", field, value, why)}
}

// Required: 400 required "Required field '<field>' not specified".
// Source: the Compute API's required-field answer as quoted for
// 'resource.fingerprint' and 'resource.requestedRunDuration' in public docs.
func Required(field string) *APIError {
	return &APIError{Code: http.StatusBadRequest, Reason: "required", Domain: "global",
		Message: fmt.Sprintf("Required field '%s' not specified", field)}
}

// ConditionNotMet: 412 "Labels fingerprint either invalid or resource labels
// have changed", location If-Match (header). Source: googleapis/google-cloud-go#7802
// (the full body), hashicorp/terraform-provider-google#18826.
func ConditionNotMet() *APIError {
	return &APIError{Code: http.StatusPreconditionFailed, Reason: "conditionNotMet", Domain: "global",
		Message:  "Labels fingerprint either invalid or resource labels have changed",
		Location: "If-Match", LocationType: "header"}
}

// ResourceNotReady: 400 resourceNotReady "The resource '<r>' is not ready":
// another operation on the resource is still running.
// Source: googleapis/google-api-python-client#485 (instance delete),
// opstrace/opstrace#976 (message form).
func ResourceNotReady(resource string) *APIError {
	return &APIError{Code: http.StatusBadRequest, Reason: "resourceNotReady", Domain: "global",
		Message: fmt.Sprintf("The resource '%s' is not ready", resource)}
}

// BackendError: 503 backendError "Internal error. Please try again or contact
// Google Support. (Code: '...')". Source: ansible/ansible#61515 (compute body).
// The SDK retries GETs and lists on 503 by itself (its default call options).
func BackendError() *APIError {
	return &APIError{Code: http.StatusServiceUnavailable, Reason: "backendError", Domain: "global",
		Message: "Internal error. Please try again or contact Google Support. (Code: '5913B7676272E.AC29531.6D091185')"}
}

// Unauthenticated: 401 with status UNAUTHENTICATED. Messages from
// rohitaryal/imageFX-api#2 (invalid) and google/googleapis.dart#577 (missing);
// the errors[] items ("Invalid Credentials"/authError, "Login Required."/required,
// location Authorization) are Google's classic 401 items.
func Unauthenticated(missing bool) *APIError {
	if missing {
		return &APIError{Code: http.StatusUnauthorized, Reason: "required", Domain: "global",
			Status: "UNAUTHENTICATED", Location: "Authorization", LocationType: "header",
			Message: "Request is missing required authentication credential. Expected OAuth 2 access token, " +
				"login cookie or other valid authentication credential. See " +
				"https://developers.google.com/identity/sign-in/web/devconsole-project."}
	}
	return &APIError{Code: http.StatusUnauthorized, Reason: "authError", Domain: "global",
		Status: "UNAUTHENTICATED", Location: "Authorization", LocationType: "header",
		Message: "Request had invalid authentication credentials. Expected OAuth 2 access token, " +
			"login cookie or other valid authentication credential. See " +
			"https://developers.google.com/identity/sign-in/web/devconsole-project."}
}

// unknownZone: 400 invalid "Invalid value for field 'zone': 'x'. Unknown zone."
// Source: inspec/inspec-gcp#301, hashicorp/consul#4214.
func unknownZone(zone string) *APIError {
	return Invalid("zone", zone, "Unknown zone.")
}

// unknownRegion: 400 invalid "Invalid value for field 'region': 'x'. Unknown
// region." Source: a gcloud transcript in a public qwiklabs notebook
// ("Invalid value for field 'region': 'us-west3-b'. Unknown region."), the
// zone's answer's twin.
func unknownRegion(region string) *APIError {
	return Invalid("region", region, "Unknown region.")
}

// ResourceInUseByAnotherResource: 400 resourceInUseByAnotherResource "The
// <kind> resource '<r>' is already being used by '<user>'", a delete of
// something another resource holds. The frame and reason:
// terraform-google-modules/terraform-google-vm#45 (instance_template,
// instance_group_manager, health_check), kubernetes/ingress-gce's docs
// (backendService); the kind "address" in it: a gcloud transcript quoted in
// public notes ("The address resource is already being used by
// '//serverless.googleapis.com/...'"). No source quotes an address held by
// an instance; that message is composed from the frame.
func ResourceInUseByAnotherResource(kind, resource, user string) *APIError {
	return &APIError{Code: http.StatusBadRequest, Reason: "resourceInUseByAnotherResource", Domain: "global",
		Message: fmt.Sprintf("The %s resource '%s' is already being used by '%s'", kind, resource, user)}
}

// natIPNotFound: 400 invalid for an access config's natIP that is no
// reserved external address of the instance's region (an ephemeral address,
// an internal one, one of another region): "Invalid value for field
// '<field>': '<ip>'. The specified external IP address '<ip>' was not found
// in region '<r>'." Source: hashicorp/terraform-provider-google#435 (an
// INTERNAL address's IP as natIP), cycloidio/terracognita#189 and
// GoogleCloudPlatform/terraformer#662 (an ephemeral IP reused), all on
// instances.insert with field 'resource.networkInterfaces[0].accessConfigs[0].natIP'.
// On addAccessConfig the field is 'resource.natIP' (the body is the access
// config; composed).
func natIPNotFound(field, ip, region string) *APIError {
	return Invalid(field, ip, fmt.Sprintf("The specified external IP address '%s' was not found in region '%s'.", ip, region))
}

// atMostOneAccessConfig: 400 badRequest "At most one access config currently
// supported.", addAccessConfig on a network interface that has one. Source:
// terraform-google-modules/terraform-google-vm#111 ("Error adding new
// access_config: googleapi: Error 400: At most one access config currently
// supported., badRequest"); OpenStack's gce-api answers the same text.
func atMostOneAccessConfig() *APIError {
	return &APIError{Code: http.StatusBadRequest, Reason: "badRequest", Domain: "global",
		Message: "At most one access config currently supported."}
}

// badNetworkInterface: 400 invalid for a networkInterface parameter that
// names no network interface: "Invalid value for field
// 'networkInterfaceName': 'External NAT'.  Must be a valid network interface
// name (e.g. nic0, nic1)" (two spaces). Source: hashicorp/terraform#1024 (a
// deleteAccessConfig with the access config's name in its place).
func badNetworkInterface(name string) *APIError {
	return Invalid("networkInterfaceName", name, " Must be a valid network interface name (e.g. nic0, nic1)")
}

// labelError: 400 invalid for a label key or value, with the ErrorInfo detail
// newer answers carry. Source: oap-project/cloudtik#14 and hashicorp/boundary#5400
// (value, on insert: field 'resource.labels'), cloudfoundry-incubator/kubo-deployment#159
// (key, on setLabels: field 'labels'), scylladb/scylla-cluster-tests#13147 (details).
func labelError(field, why string) *APIError {
	e := Invalid(field, "", why)
	e.Details = []map[string]any{{
		"@type":  "type.googleapis.com/google.rpc.ErrorInfo",
		"reason": "INVALID_FIELD_VALUE",
		"domain": "compute.googleapis.com",
		"metadata": map[string]string{
			"field": strings.TrimPrefix(field, "resource."), "reason": why, "value": "",
		},
	}}
	return e
}

// invalidJSON: 400 for a body that does not decode (unknown field, bad type).
// Frame "Invalid JSON payload received." is the front end's; the rest is the
// decoder's text (fake's own).
func invalidJSON(detail string) *APIError {
	return &APIError{Code: http.StatusBadRequest, Reason: "invalid", Domain: "global",
		Status: "INVALID_ARGUMENT", Message: "Invalid JSON payload received. " + detail}
}

// gfeNotFound is the HTML page Google's front end answers for a path no API
// serves (pulumi/pulumi-google-native#565, hashicorp/terraform-provider-google#6182:
// "googleapi: got HTTP response code 404 with body: <!DOCTYPE html>...").
// The SDK's *googleapi.Error then has Code 404, no Message, no Errors.
func writeGFENotFound(w http.ResponseWriter, path string) {
	w.Header().Set("Content-Type", "text/html; charset=UTF-8")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n"+
		"  <meta name=viewport content=\"initial-scale=1, minimum-scale=1, width=device-width\">\n"+
		"  <title>Error 404 (Not Found)!!1</title>\n"+
		"  <a href=//www.google.com/><span id=logo aria-label=Google></span></a>\n"+
		"  <p><b>404.</b> <ins>That’s an error.</ins>\n"+
		"  <p>The requested URL <code>%s</code> was not found on this server.  <ins>That’s all we know.</ins>\n",
		htmlEscape(path))
}

func htmlEscape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;")
	return r.Replace(s)
}
