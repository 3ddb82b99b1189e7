package kubernetes

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Get reads the instance's Pod: Provisioning until it is Running, Ready and
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
	pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return provider.Instance{}, classify(err, "reading pod "+id)
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
