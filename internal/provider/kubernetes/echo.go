package kubernetes

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/echowatch"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// The egress address of a Pod. A Pod has no reporter of its own (the image
// is any Squid image), so the operator asks the entry's egressIPEcho
// through the Pod's Squid: the request leaves as the Pod's own clients'
// requests do (through its node, or the CNI's egress gateway when a policy
// selects the Pod), and the echo sees that address. Squid admits that one
// request from the operator by a token, made per instance and kept in the
// instance's Secret (squid.EchoProber); nobody else can use it, and it
// opens nothing but the echo's GET. Each running Pod has its own
// observation, refreshed in the background once a minute at most; Get only
// reads it.

// echoTokenKey is the Secret's key holding the token file Squid reads.
const echoTokenKey = "egress-probe"

// operatorPodLabels select the operator's Pods (config/manager's
// Deployment template): the NetworkPolicy admits them to ask the echo.
var operatorPodLabels = map[string]string{
	"app.kubernetes.io/name": "egress-proxies-operator",
	"control-plane":          "controller-manager",
}

// echoes are the observations of the provider's running Pods, by instance
// ID.
type echoes struct {
	mu     sync.Mutex
	closed bool
	byID   map[string]*podEcho
}

// podEcho is one Pod's observation. A Pod made again under the same name
// has another UID, address and token, so it gets a new one.
type podEcho struct {
	podUID types.UID
	watch  *echowatch.Watch
}

// usesEcho says whether the entry names an echo: the Pods then hold a
// token and admit the operator's ask.
func (p *Provider) usesEcho() bool { return !p.dest.Echo().IsZero() }

// observeEgress returns what the echo last answered through the running
// pod, starting its observation on the first call. It never waits for the
// echo.
func (p *Provider) observeEgress(pod *corev1.Pod) provider.Egress {
	id := instanceID(pod.Namespace, pod.Name)
	proxy, ok := podProxyURL(pod)
	if !ok {
		return provider.Egress{}
	}
	p.echoes.mu.Lock()
	defer p.echoes.mu.Unlock()
	if p.echoes.closed {
		return provider.Egress{}
	}
	pe := p.echoes.byID[id]
	if pe != nil && pe.podUID != pod.UID {
		pe.watch.Stop()
		pe = nil
	}
	if pe == nil {
		ns, name := pod.Namespace, pod.Name
		var token tokenCache
		pe = &podEcho{podUID: pod.UID, watch: echowatch.New(p.dest.Echo(), &echowatch.Via{
			Proxy: proxy,
			Header: func(ctx context.Context) (http.Header, error) {
				t, err := token.get(func() (string, error) { return p.readEchoToken(ctx, ns, name) })
				if err != nil {
					return nil, err
				}
				return http.Header{squid.EchoProberHeader: []string{t}}, nil
			},
		})}
		if p.echoes.byID == nil {
			p.echoes.byID = map[string]*podEcho{}
		}
		p.echoes.byID[id] = pe
	}
	return pe.watch.Observe()
}

// forgetEgress ends the observation of instance id.
func (p *Provider) forgetEgress(id string) {
	p.echoes.mu.Lock()
	pe := p.echoes.byID[id]
	delete(p.echoes.byID, id)
	p.echoes.mu.Unlock()
	if pe != nil {
		pe.watch.Stop()
	}
}

// Close ends the cache (and with it the instance watch), every
// observation and its ask in flight. The provider asks nothing after it.
func (p *Provider) Close() error {
	p.stopCache()
	p.echoes.mu.Lock()
	p.echoes.closed = true
	all := p.echoes.byID
	p.echoes.byID = nil
	p.echoes.mu.Unlock()
	for _, pe := range all {
		pe.watch.Stop()
	}
	return nil
}

// podProxyURL is the Squid of a running pod, by Pod IP: the operator asks
// it directly, not through the Service (a cluster may run no kube-proxy).
func podProxyURL(pod *corev1.Pod) (*url.URL, bool) {
	if pod.Status.PodIP == "" || len(pod.Spec.Containers) == 0 || len(pod.Spec.Containers[0].Ports) == 0 {
		return nil, false
	}
	port := pod.Spec.Containers[0].Ports[0].ContainerPort
	return &url.URL{Scheme: "http", Host: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port)))}, true
}

// readEchoToken reads the token from the instance's Secret. Its errors
// are what the observation says, so they name the Secret and never its
// content.
func (p *Provider) readEchoToken(ctx context.Context, ns, name string) (string, error) {
	c, err := p.clientFor()
	if err != nil {
		return "", fmt.Errorf("the operator has no API client to read secret %s", instanceID(ns, name))
	}
	sec, err := c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading secret %s for the echo's token failed", instanceID(ns, name))
	}
	token, ok := squid.EchoProberTokenOf(sec.Data[echoTokenKey])
	if !ok {
		return "", fmt.Errorf("secret %s holds no echo token (a Pod made before its entry named an egressIPEcho asks nothing until it is replaced)", instanceID(ns, name))
	}
	return token, nil
}

// tokenCache keeps the token once read: it is the Pod's for its life.
type tokenCache struct {
	mu    sync.Mutex
	token string
}

func (c *tokenCache) get(read func() (string, error)) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" {
		return c.token, nil
	}
	t, err := read()
	if err != nil {
		return "", err
	}
	c.token = t
	return t, nil
}
