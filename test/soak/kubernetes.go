package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/kubelet"
)

// backendNamespace holds the kubernetes provider's objects: a fixed
// namespace, as a deployed entry has, so the objects carry no
// OwnerReference (no kube-controller-manager runs here anyway) and only
// the operator's own deletes remove them.
const backendNamespace = "soak-backend"

// kubernetesBackend soaks the kubernetes provider on the run's own API
// server; the stand-in kubelet (internal/testenv/kubelet) marks its Pods
// Running and Ready.
type kubernetesBackend struct {
	s  *soak
	kl *kubelet.Kubelet
}

// The kinds of object the provider makes per instance, in the report's
// order.
var kubernetesKinds = []string{"pods", "services", "configmaps", "networkpolicies"}

func (b *kubernetesBackend) prepare(context.Context) error { return nil }

func (b *kubernetesBackend) providersConfig() string {
	return `providers:
  - name: ` + entryName + `
    type: kubernetes
    kubernetes:
      namespace: ` + backendNamespace + `
`
}

func (b *kubernetesBackend) namespaces() []string { return []string{backendNamespace} }

func (b *kubernetesBackend) start(ctx context.Context) error {
	// --inject-leak calls the provider as a library, which finds its
	// cluster the way the operator does.
	if err := os.Setenv("KUBECONFIG", b.s.cp.kubeconfig); err != nil {
		return err
	}
	kl, err := kubelet.Start(ctx, b.s.cp.env.Config, backendNamespace, b.s.out.say)
	if err != nil {
		return err
	}
	b.kl = kl
	return nil
}

func (b *kubernetesBackend) proxySpec() egressv1.ProxySpec {
	return egressv1.ProxySpec{Provider: entryName, Port: basePort, AllowedSourceRanges: []string{"10.244.0.0/16"}}
}

func (b *kubernetesBackend) kinds() []string { return kubernetesKinds }

// count lists every object of this installation, in every namespace.
func (b *kubernetesBackend) count(ctx context.Context, exists map[string]string) (map[string][]leak, []string, error) {
	cl := b.s.cp.client()
	ours := client.MatchingLabels{provider.MarkManaged: provider.MarkManagedValue, provider.MarkInstallation: installationID}
	lists := map[string]client.ObjectList{
		"pods":            &corev1.PodList{},
		"services":        &corev1.ServiceList{},
		"configmaps":      &corev1.ConfigMapList{},
		"networkpolicies": &networkingv1.NetworkPolicyList{},
	}
	leaked := map[string][]leak{}
	podsOf := map[string][]string{}
	for _, kind := range kubernetesKinds {
		if err := cl.List(ctx, lists[kind], ours); err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", kind, err)
		}
		objs, err := apimeta.ExtractList(lists[kind])
		if err != nil {
			return nil, nil, err
		}
		for _, o := range objs {
			m := o.(client.Object)
			uid := m.GetLabels()[provider.MarkUID]
			if _, ok := exists[uid]; !ok {
				leaked[kind] = append(leaked[kind], leak{desc: fmt.Sprintf("%s/%s (uid %q)", m.GetNamespace(), m.GetName(), uid), uid: uid})
			} else if kind == "pods" {
				podsOf[uid] = append(podsOf[uid], m.GetName())
			}
		}
	}
	var duplicates []string
	for uid, pods := range podsOf {
		if len(pods) > 1 {
			duplicates = append(duplicates, fmt.Sprintf("%s: %s", exists[uid], strings.Join(pods, ", ")))
		}
	}
	sort.Strings(duplicates)
	return leaked, duplicates, nil
}

// newInjector is the provider as the entry is: its Create makes the Pod,
// Service, ConfigMap and NetworkPolicy with the marks the operator writes.
func (b *kubernetesBackend) newInjector() (provider.Provider, error) {
	return kubernetes.New(entryName, kubernetes.Config{Namespace: backendNamespace}, provider.Options{InstallationID: installationID})
}

// settle: Create made every object before it returned.
func (b *kubernetesBackend) settle(context.Context, provider.CreateRequest, provider.Instance) error {
	return nil
}

func (b *kubernetesBackend) stop(context.Context) error {
	if b.kl != nil {
		b.kl.Stop()
	}
	return nil
}
