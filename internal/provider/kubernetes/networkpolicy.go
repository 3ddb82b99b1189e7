package kubernetes

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// buildNetworkPolicy admits only allowedSourceRanges to the proxy port of
// the instance's Pod, so the cluster's network enforces what Squid's
// allowed_clients says (with a CNI that enforces NetworkPolicy). No ranges
// means no ingress rule at all: the Pod takes no connections, matching
// Squid's loopback-only default. Kubernetes always lets the node reach its
// Pods, so the kubelet's probes still pass. With an echo, the operator's
// Pods (in Options.OperatorNamespace) are admitted too: they ask the echo
// through the Pod, which Squid admits by the token only (echo.go).
func (p *Provider) buildNetworkPolicy(s spec) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: p.meta(s),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				labelInstance:        s.name,
				provider.MarkManaged: provider.MarkManagedValue,
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
		},
	}
	proxyPort := []networkingv1.NetworkPolicyPort{{
		Protocol: ptr.To(corev1.ProtocolTCP),
		Port:     ptr.To(intstr.FromInt32(s.req.Port)),
	}}
	if len(s.ranges) > 0 {
		rule := networkingv1.NetworkPolicyIngressRule{Ports: proxyPort}
		for _, r := range s.ranges {
			rule.From = append(rule.From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: r.String()}})
		}
		np.Spec.Ingress = append(np.Spec.Ingress, rule)
	}
	if s.echoToken != "" && p.opts.OperatorNamespace != "" {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
			Ports: proxyPort,
			From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
					corev1.LabelMetadataName: p.opts.OperatorNamespace,
				}},
				PodSelector: &metav1.LabelSelector{MatchLabels: operatorPodLabels},
			}},
		})
	}
	return np
}

// ensureNetworkPolicy creates the instance's NetworkPolicy, or accepts the
// one already there when it passes the adoption rule.
func (p *Provider) ensureNetworkPolicy(ctx context.Context, c clientset.Interface, s spec) error {
	api := c.NetworkingV1().NetworkPolicies(s.namespace)
	return ensure(ctx, p, s, "networkpolicy", func() (*networkingv1.NetworkPolicy, error) {
		return api.Create(ctx, p.buildNetworkPolicy(s), metav1.CreateOptions{})
	}, func() (*networkingv1.NetworkPolicy, error) {
		return api.Get(ctx, s.name, metav1.GetOptions{})
	}, api.Patch)
}
