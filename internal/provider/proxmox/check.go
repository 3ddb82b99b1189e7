package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// Check probes every node concurrently; the first unhealthy node decides.
func (p *Provider) Check(ctx context.Context) provider.CheckResult {
	ctx = httpobserve.WithOp(ctx, provider.OpCheck)
	results := make([]provider.CheckResult, len(p.cfg.Nodes))
	var wg sync.WaitGroup
	for i, n := range p.cfg.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = p.checkNode(ctx, n) }()
	}
	wg.Wait()
	res := provider.CheckResult{Healthy: true, Reason: provider.ReasonHealthy, Target: strings.Join(p.cfg.Nodes, ","), Address: p.cfg.URL,
		Message: fmt.Sprintf("%d node(s) ready", len(p.cfg.Nodes))}
	for _, r := range results {
		if !r.Healthy {
			res = r
			break
		}
	}
	if p.cfg.InsecureSkipTLSVerify {
		res.Message += "; " + insecureCheckNote
	}
	return res
}

// insecureCheckNote ends every Check message while TLS is not verified,
// so ProviderHealth shows it.
const insecureCheckNote = "WARNING: pveproxy's TLS certificate is not verified (insecureSkipTLSVerify)"

func (p *Provider) checkNode(ctx context.Context, node string) provider.CheckResult {
	res := provider.CheckResult{Target: node, Address: p.cfg.URL, Details: map[string]string{}}
	fail := func(reason string, err error) provider.CheckResult {
		res.Reason, res.Message = reason, err.Error()
		return res
	}
	tok, err := p.api.token()
	if err != nil {
		return fail("CredentialsUnavailable", err)
	}
	res.Details["tokenID"], _, _ = strings.Cut(tok, "=")
	var ver struct {
		Version string `json:"version"`
	}
	if err := p.api.do(ctx, http.MethodGet, "/version", nil, &ver); err != nil {
		return fail(checkReason(ctx, err), err)
	}
	res.Details["version"] = ver.Version
	if err := p.api.do(ctx, http.MethodGet, "/nodes/"+node+"/status", nil, nil); err != nil {
		return fail(checkReason(ctx, err), err)
	}
	var ss struct {
		Active  int    `json:"active"`
		Content string `json:"content"`
		Avail   int64  `json:"avail"`
	}
	if err := p.api.do(ctx, http.MethodGet, "/nodes/"+node+"/storage/"+p.cfg.ISOStorage+"/status", nil, &ss); err != nil {
		if r := checkReason(ctx, err); r != provider.ReasonAPIError {
			return fail(r, err)
		}
		return fail("StorageNotFound", err)
	}
	if ss.Active != 1 || !strings.Contains(ss.Content, "iso") {
		return fail("StorageNotFound", fmt.Errorf("storage %s on %s is inactive or has no iso content", p.cfg.ISOStorage, node))
	}
	res.Details["isoStorageAvailBytes"] = fmt.Sprint(ss.Avail)
	rs, err := p.resources(ctx, false)
	if err != nil {
		return fail(checkReason(ctx, err), err)
	}
	for img, vmid := range p.cfg.Templates {
		r, ok := find(rs, vmid)
		if !ok || r.Template != 1 {
			return fail("TemplateNotFound", fmt.Errorf("template %s (VMID %d) is missing or not a template", img, vmid))
		}
	}
	res.Healthy, res.Reason, res.Message = true, provider.ReasonHealthy, "node ready"
	return res
}

func checkReason(ctx context.Context, err error) string {
	var ae *apiError
	switch {
	case ctx.Err() != nil:
		return provider.ReasonTimeout
	case strings.Contains(err.Error(), "TLS verification"), strings.Contains(err.Error(), "CA file"):
		return "CertificateInvalid"
	case errors.As(err, &ae) && ae.Status == 401:
		return provider.ReasonUnauthorized
	case errors.As(err, &ae) && ae.Status == 403:
		return provider.ReasonForbidden
	case errors.As(err, &ae) && (ae.Status == 595 || ae.Status == 596):
		return provider.ReasonUnreachable
	case errors.As(err, &ae):
		return provider.ReasonAPIError
	default:
		return provider.ReasonUnreachable
	}
}
