package testenv

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestInFlightWrites: a write is in flight from the moment it is sent until
// its response is recorded; reads never are. No control plane needed: the
// server is a handler that holds the write until the test lets it go.
func TestInFlightWrites(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			close(arrived)
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	cfg, counter := CountingConfig(&rest.Config{Host: srv.URL})
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	send := func(method string) error {
		req, err := http.NewRequest(method, srv.URL+"/api/v1/namespaces/n/configmaps", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}

	if err := send(http.MethodGet); err != nil {
		t.Fatal(err)
	}
	if n := counter.InFlightWrites(); n != 0 {
		t.Fatalf("after a GET: %d writes in flight, want 0", n)
	}
	done := make(chan error, 1)
	go func() { done <- send(http.MethodPost) }()
	<-arrived
	if n, w := counter.InFlightWrites(), counter.Writes(); n != 1 || w != 0 {
		t.Fatalf("while the POST is held: %d in flight, %d counted; want 1 and 0", n, w)
	}
	counter.Reset()
	if n := counter.InFlightWrites(); n != 1 {
		t.Fatalf("Reset changed the in-flight count to %d", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, w := counter.InFlightWrites(), counter.Writes(); n != 0 || w != 1 {
		t.Fatalf("after the POST returned: %d in flight, %d counted; want 0 and 1", n, w)
	}
}
