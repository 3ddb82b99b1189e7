package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// echoPort is where the test serves the egress-IP echo on the node's
// bridge address: the pods entry's egressIPEcho (test/e2e/config).
const echoPort = 18081

// echoAsk is one request the echo got.
type echoAsk struct{ from, agent, token, path string }

// testEgressIPEcho (issue 23): the kubernetes provider reports the address
// destinations see. The operator, in its own Pod, asks the entry's echo
// through the Squid Pod, which admits that one request by the token
// mounted from the instance's Secret (the real Squid, the real kubelet's
// Secret volume); the echo, served here on the node's bridge address,
// sees the Squid Pod's own address, and status.egressIP reports it with
// EgressIPObserved True. The token never reaches the echo.
func (cl *cluster) testEgressIPEcho(t *testing.T) {
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeIP, strconv.Itoa(echoPort)))
	if err != nil {
		t.Fatalf("serving the echo on the node's bridge address: %v", err)
	}
	var mu sync.Mutex
	var asks []echoAsk
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		asks = append(asks, echoAsk{from: host, agent: r.UserAgent(), token: r.Header.Get("X-Egress-Probe"), path: r.URL.Path})
		mu.Unlock()
		fmt.Fprintln(w, host)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	p := cl.waitReady(t, cl.createProxy(t, "echo", podsProvider, []string{podRange}))
	ready := time.Now()
	testenv.EventuallyNilWithin(t, slow, "Proxy "+p.Name+"'s status.egressIP from the echo", func() error {
		if err := cl.c.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, egressv1.ConditionEgressIPObserved)
		if p.Status.EgressIP == "" || c == nil || c.Status != "True" {
			return fmt.Errorf("egressIP %q, condition %+v", p.Status.EgressIP, c)
		}
		return nil
	})
	if p.Status.EgressIP != p.Status.IP {
		t.Errorf("status.egressIP %s, want the Squid Pod's own address %s (it egresses from it on the bridge)", p.Status.EgressIP, p.Status.IP)
	}
	mu.Lock()
	defer mu.Unlock()
	ours := 0
	for _, a := range asks {
		if a.token != "" {
			t.Errorf("the echo got the token header from %s", a.from)
		}
		if a.from == p.Status.IP {
			ours++
			if a.agent != "egress-proxies-operator" || a.path != "/ip" {
				t.Errorf("the echo's ask from %s: User-Agent %q, path %q", a.from, a.agent, a.path)
			}
		}
	}
	if ours == 0 {
		t.Errorf("the echo was never asked from the Squid Pod %s: %+v", p.Status.IP, asks)
	}
	t.Logf("Proxy %s: status.egressIP %s (the Squid Pod's address) %s after Ready was seen, %d asks of the echo in all, egress %+v",
		p.Name, p.Status.EgressIP, time.Since(ready).Round(time.Millisecond), len(asks), p.Status.Egress)
}
