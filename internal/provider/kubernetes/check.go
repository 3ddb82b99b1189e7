package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// checkTarget is what Check reaches.
const checkTarget = "apiserver"

// needed are the permissions the provider uses, on every kind it writes:
// get and create (Create, adoption, FrontGroup), patch (adoption fills in
// an empty UID label, FrontGroup brings a group's Service and
// PodDisruptionBudget to the group), list (ListByTag lists the Pods,
// ListSecondary the Services, ConfigMaps, Secrets, NetworkPolicies and
// PodDisruptionBudgets) and delete.
// The instance watch adds watch on pods.
var neededVerbs = []string{"get", "list", "create", "patch", "delete"}

// neededPermissions is every verb on every resource the provider uses
// (the Pod, its secondaries, a group's front), and watch on those its
// cache's informers (cache.go) hold: the Pod and its secondaries.
func neededPermissions() []permission {
	var out []permission
	seen := map[groupResource]bool{}
	for _, k := range slices.Concat([]objectKind{podKind}, secondaryKinds, groupKinds) {
		r := groupResource{k.resource.Group, k.resource.Resource}
		if seen[r] {
			continue
		}
		seen[r] = true
		for _, verb := range neededVerbs {
			out = append(out, permission{verb, r})
		}
	}
	for _, k := range slices.Concat([]objectKind{podKind}, secondaryKinds) {
		out = append(out, permission{"watch", groupResource{k.resource.Group, k.resource.Resource}})
	}
	return out
}

// permission is a verb on a resource.
type permission struct {
	verb string
	groupResource
}

// groupResource is a resource of an API group ("" is the core group).
type groupResource struct{ group, resource string }

// Check reads the API server's version and asks it, with one
// SelfSubjectAccessReview per verb and resource, whether the operator may
// do what the provider does in the target namespace (every namespace when
// the entry names none). Reasons: Healthy, Forbidden (permissions missing,
// or the review itself refused), Unauthorized, Timeout, APIError,
// Unreachable. Details: serverVersion, namespace, missing.
func (p *Provider) Check(ctx context.Context) provider.CheckResult {
	return p.check(ctx)
}

func (p *Provider) check(ctx context.Context) provider.CheckResult {
	ns := p.cfg.Namespace
	shown := ns
	if shown == "" {
		shown = "*" // every namespace
	}
	res := provider.CheckResult{Target: checkTarget, Details: map[string]string{"namespace": shown}}
	c, err := p.begin(ctx, provider.OpCheck)
	if err != nil {
		res.Reason, res.Message = checkReason(ctx, err), err.Error()
		return res
	}
	p.mu.Lock()
	res.Address = p.host
	p.mu.Unlock()

	// Discovery's ServerVersion takes no ctx; the REST call does.
	raw, err := c.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		res.Reason, res.Message = checkReason(ctx, err), "reading the server version: "+err.Error()
		return res
	}
	var v version.Info
	if err := json.Unmarshal(raw, &v); err != nil {
		res.Reason, res.Message = provider.ReasonAPIError, "decoding the server version: "+err.Error()
		return res
	}
	res.Details["serverVersion"] = v.GitVersion

	missing, err := p.missingPermissions(ctx, c, ns)
	if err != nil {
		res.Reason, res.Message = checkReason(ctx, err), "reviewing permissions: "+err.Error()
		return res
	}
	if len(missing) > 0 {
		res.Details["missing"] = strings.Join(missing, ", ")
		res.Reason = provider.ReasonForbidden
		res.Message = fmt.Sprintf("the operator may not %s in namespace %s; install the kubernetes-provider RBAC component",
			res.Details["missing"], shown)
		return res
	}
	res.Details["missing"] = "none"
	res.Healthy, res.Reason = true, provider.ReasonHealthy
	var names []string
	for _, n := range neededPermissions() {
		if !slices.Contains(names, n.resource) {
			names = append(names, n.resource)
		}
	}
	res.Message = fmt.Sprintf("API server %s reachable; may get, list, create, patch and delete %s in namespace %s",
		v.GitVersion, strings.Join(names, ", "), shown)
	return res
}

// missingPermissions lists "<verb> <resource>" for each needed permission
// the API server denies.
func (p *Provider) missingPermissions(ctx context.Context, c clientset.Interface, ns string) ([]string, error) {
	var missing []string
	for _, n := range neededPermissions() {
		review := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: n.verb, Group: n.group, Resource: n.resource},
		}}
		got, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		if !got.Status.Allowed {
			missing = append(missing, n.verb+" "+n.resource)
		}
	}
	return missing, nil
}

// checkReason is the reason for a check that failed with err.
func checkReason(ctx context.Context, err error) string {
	var st apierrors.APIStatus
	switch {
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return provider.ReasonTimeout
	case apierrors.IsUnauthorized(err):
		return provider.ReasonUnauthorized
	case apierrors.IsForbidden(err):
		return provider.ReasonForbidden
	case errors.As(err, &st):
		return provider.ReasonAPIError
	default:
		return provider.ReasonUnreachable
	}
}
