package kubernetes

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Get reads the instance's Pod (from the cache, cache.go): Provisioning until it is Running, Ready and
// has an IP, Terminated once it ended or is being deleted (never Running
// then). A running Pod's Egress is what the entry's echo last answered
// through it (echo.go). A Pod that is gone, or that lost our mark, is NotFound.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	return p.get(ctx, id)
}

func (p *Provider) get(ctx context.Context, id string) (provider.Instance, error) {
	c, err := p.begin(ctx, provider.OpGet)
	if err != nil {
		return provider.Instance{}, err
	}
	ns, name, err := parseID(id)
	if err != nil {
		return provider.Instance{}, err
	}
	pod, err := p.readPod(ctx, c, ns, name)
	if err != nil {
		return provider.Instance{}, err
	}
	if !p.ours(pod.Labels) {
		return provider.Instance{}, provider.Errorf(provider.ErrNotFound, "pod %s is not this installation's", id)
	}
	inst := instanceOf(pod)
	// Once Squid serves: an ask before would only be refused, and the
	// next one is a minute away.
	if inst.Serving == provider.ServingAnswering && p.usesEcho() {
		inst.Egress = p.observeEgress(pod)
	}
	return inst, nil
}

// readPod is the Pod at namespace/name, from the cache when it can say,
// else from the API server; absent is NotFound.
func (p *Provider) readPod(ctx context.Context, c clientset.Interface, namespace, name string) (*corev1.Pod, error) {
	id := instanceID(namespace, name)
	pod, found, known := p.cache.pod(namespace, name)
	switch {
	case found:
		return pod, nil
	case known:
		return nil, provider.Errorf(provider.ErrNotFound, "pod %s is gone", id)
	}
	pod, err := c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p.cache.own.absent(objectKey{"pod", namespace, name})
	}
	if err != nil {
		return nil, classify(err, "reading pod "+id)
	}
	return pod, nil
}
