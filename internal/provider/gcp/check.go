package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// defaultEndpointHost is the Compute API's host when the entry names no
// endpoint.
const defaultEndpointHost = "compute.googleapis.com"

// regionalQuotas are the quota metrics the details report per region in
// use: what an instance of this provider takes.
var regionalQuotas = []string{"CPUS", "IN_USE_ADDRESSES", "INSTANCES"}

// Check makes one cheap authenticated call for the project (projects.get:
// the credentials, the API being enabled, the endpoint and the project in
// one), then reads the quota headroom of every region in use
// (regions.get: CPUS, IN_USE_ADDRESSES and INSTANCES, "<free> free of
// <limit>") and of the project's FIREWALLS when the entry manages rules. A
// region that cannot be read says so in its detail; it does not make the
// backend unhealthy.
//
// Reasons: Healthy; Unauthorized (no usable credentials, a refused token,
// HTTP 401); Forbidden (HTTP 403: a missing permission, the Compute API not
// enabled); Unreachable (no HTTP answer); Timeout (the check's ctx ended);
// APIError (any other answer, a wrong endpoint's 404 included).
func (p *Provider) Check(ctx context.Context) provider.CheckResult {
	ctx = httpobserve.WithOp(ctx, provider.OpCheck)
	res := provider.CheckResult{
		Target:  "projects/" + p.cfg.Project,
		Address: p.endpointHost(),
		Details: map[string]string{
			"project": p.cfg.Project, "credentials": p.creds.describe(), "addressMode": p.cfg.AddressMode,
			"network": p.netPath, "firewall": "unmanaged",
		},
	}
	if p.cfg.managesFirewall() {
		res.Details["firewall"] = "managed"
	}
	if err := ctx.Err(); err != nil {
		res.Reason, res.Message = provider.ReasonTimeout, err.Error()
		return res
	}
	api, err := p.client()
	if err != nil {
		res.Reason, res.Message = provider.ReasonAPIError, errText(err)
		return res
	}
	proj, err := api.GetProject(ctx)
	if err != nil {
		res.Reason, res.Message = checkReason(ctx, err), "reading project "+p.cfg.Project+": "+checkMessage(err)
		return res
	}
	var low []string
	if p.cfg.managesFirewall() {
		if d, exhausted := quotaDetail(proj.GetQuotas(), "FIREWALLS"); d != "" {
			res.Details["FIREWALLS"] = d
			if exhausted {
				low = append(low, "FIREWALLS")
			}
		}
	}
	for _, region := range p.regionsInUse() {
		reg, err := api.GetRegion(ctx, region)
		if err != nil {
			if ctx.Err() != nil {
				res.Reason, res.Message = provider.ReasonTimeout, "reading region "+region+": "+ctx.Err().Error()
				return res
			}
			res.Details[region+".quota"] = "unavailable: " + checkReason(ctx, err) + ": " + checkMessage(err)
			continue
		}
		for _, metric := range regionalQuotas {
			if metric == "IN_USE_ADDRESSES" && p.cfg.AddressMode == AddressInternal {
				continue // internal instances take no external address
			}
			if d, exhausted := quotaDetail(reg.GetQuotas(), metric); d != "" {
				res.Details[region+"."+metric] = d
				if exhausted {
					low = append(low, region+" "+metric)
				}
			}
		}
	}
	res.Healthy, res.Reason = true, provider.ReasonHealthy
	res.Message = fmt.Sprintf("project %s reachable at %s with %s", p.cfg.Project, res.Address, p.creds.describe())
	if len(low) > 0 {
		res.Message += "; quota used up: " + strings.Join(low, ", ") + " (new instances fail with QuotaExceeded)"
	}
	return res
}

// quotaDetail is a quota's headroom, "<free> free of <limit>", and whether
// none is left; "" when the answer has no such metric.
func quotaDetail(quotas []*computepb.Quota, metric string) (string, bool) {
	for _, q := range quotas {
		if q.GetMetric() != metric {
			continue
		}
		free := q.GetLimit() - q.GetUsage()
		if free < 0 {
			free = 0
		}
		return fmt.Sprintf("%s free of %s", num(free), num(q.GetLimit())), free < 1
	}
	return "", false
}

func num(f float64) string {
	if f == float64(int64(f)) {
		return fmt.Sprint(int64(f))
	}
	return fmt.Sprintf("%.1f", f)
}

// endpointHost is where the API is reached.
func (p *Provider) endpointHost() string {
	if p.cfg.Endpoint == "" {
		return defaultEndpointHost
	}
	if u, err := url.Parse(p.cfg.Endpoint); err == nil && u.Host != "" {
		return u.Host
	}
	return p.cfg.Endpoint
}

// checkReason is the reason for a check that failed with err.
func checkReason(ctx context.Context, err error) string {
	var ce *credentialError
	var gerr *googleapi.Error
	switch {
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return provider.ReasonTimeout
	case errors.As(err, &ce):
		return provider.ReasonUnauthorized
	case !errors.As(err, &gerr):
		return provider.ReasonUnreachable
	case gerr.Code == http.StatusUnauthorized:
		return provider.ReasonUnauthorized
	case gerr.Code == http.StatusForbidden && !hasReason(gerr, reasonQuotaExceeded, reasonRateLimitExceeded, reasonUserRateLimit):
		return provider.ReasonForbidden
	default:
		return provider.ReasonAPIError
	}
}

// checkMessage is err for the ProviderHealth message: the API's own
// message, without an HTML body.
func checkMessage(err error) string {
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		_, e := classOf(err, call{what: "API"})
		return strings.TrimPrefix(e.Error(), "API: ")
	}
	return errText(err)
}
