package local

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// connectStatus sends CONNECT target through inst and returns the status
// of the answer without reading a tunnel's (endless) body.
func connectStatus(t *testing.T, inst provider.Instance, target string) int {
	t.Helper()
	conn, err := net.Dial("tcp4", proxyAddr(inst))
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return resp.StatusCode
}

// Base-code probe (run in a fresh network namespace with only lo up).
func TestDestinationsDeniedByDefault(t *testing.T) {
	var hits atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer origin.Close()
	p := newTestProvider(t, testInstallation, 24)
	inst := mustCreate(t, p, request("dest"))
	client := proxyClient(t, inst, nil)
	for _, target := range []string{origin.URL + "/", "http://10.0.0.1/", "http://[fd00::1]/", "http://169.254.169.254/latest/meta-data/"} {
		resp, err := client.Get(target)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s through the proxy = %d %q, want 403 (denied destination)", target, resp.StatusCode, body)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback origin was reached %d times", n)
	}
	echo, _ := echoServer(t)
	if code := connectStatus(t, inst, echo); code != http.StatusForbidden {
		t.Errorf("CONNECT %s (not port 443) = %d, want 403", echo, code)
	}
}
