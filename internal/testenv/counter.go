package testenv

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// Request is one request seen by a RequestCounter.
type Request struct {
	// Method is the HTTP method: GET, POST, PUT, PATCH or DELETE.
	Method string
	// Group and Version of the resource; Group is "" for the core group.
	Group, Version string
	// Namespace is "" for cluster-scoped resources and collections across
	// namespaces.
	Namespace string
	// Resource is the plural resource ("proxies", "events"), "" for
	// non-resource paths such as /version or discovery.
	Resource string
	// Subresource is e.g. "status"; "" for the main resource.
	Subresource string
	// Name is the object's name, "" for collections.
	Name string
	// Path is the URL path as sent.
	Path string
	// StatusCode is the response's status, 0 when no response came back.
	StatusCode int
}

// IsWrite reports whether the request asks the API server to change
// something.
func (r Request) IsWrite() bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// Key is "VERB resource[/subresource]", e.g. "PATCH proxies/status". The
// group is left out so keys stay short; for a non-resource path the key
// carries the path.
func (r Request) Key() string {
	switch {
	case r.Resource == "":
		return r.Method + " " + r.Path
	case r.Subresource == "":
		return r.Method + " " + r.Resource
	default:
		return r.Method + " " + r.Resource + "/" + r.Subresource
	}
}

// RequestCounter records every request sent through a config made by
// CountingConfig. It is safe for concurrent use.
type RequestCounter struct {
	mu   sync.Mutex
	reqs []Request
	// inFlight counts the writes sent whose responses have not come back.
	inFlight int
}

// CountingConfig returns a copy of cfg whose requests are recorded by the
// returned counter, so a test can assert how many API writes an operation
// costs. cfg itself is not changed.
func CountingConfig(cfg *rest.Config) (*rest.Config, *RequestCounter) {
	c := &RequestCounter{}
	counted := rest.CopyConfig(cfg)
	// Wrap chains after any wrapper cfg already has.
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: rt, counter: c}
	})
	return counted, c
}

// Requests returns a copy of the requests recorded since the last Reset,
// in the order their responses arrived.
func (c *RequestCounter) Requests() []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.reqs...)
}

// Writes is the number of POST, PUT, PATCH and DELETE requests since the
// last Reset, failed ones included: a refused write still cost a round trip.
func (c *RequestCounter) Writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.reqs {
		if r.IsWrite() {
			n++
		}
	}
	return n
}

// WritesBy counts the writes since the last Reset by Key, e.g.
// {"PATCH proxies/status": 1, "POST events": 2}.
func (c *RequestCounter) WritesBy() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for _, r := range c.reqs {
		if r.IsWrite() {
			m[r.Key()]++
		}
	}
	return m
}

// InFlightWrites is the number of writes sent whose responses have not come
// back yet. Together with a known final state it tells a test that every
// write which led there has been counted: a write that began before the
// state was observed is either in flight or recorded. Reset does not change
// it.
func (c *RequestCounter) InFlightWrites() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// Reset forgets every recorded request.
func (c *RequestCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = nil
}

func (c *RequestCounter) record(r Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, r)
}

func (c *RequestCounter) addInFlight(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight += n
}

type countingTransport struct {
	next    http.RoundTripper
	counter *RequestCounter
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := parseRequest(req.Method, req.URL.Path)
	if r.IsWrite() {
		t.counter.addInFlight(1)
	}
	resp, err := t.next.RoundTrip(req)
	if resp != nil {
		r.StatusCode = resp.StatusCode
	}
	// Recorded before the response is handed back, so by the time a client
	// call returns its request is counted; it leaves the in-flight count
	// only once recorded.
	t.counter.record(r)
	if r.IsWrite() {
		t.counter.addInFlight(-1)
	}
	return resp, err
}

// parseRequest splits a Kubernetes API path the way the API server's
// request-info resolver does:
//
//	/api/v1/namespaces/{ns}/{resource}[/{name}[/{sub}]]
//	/apis/{group}/{version}/{resource}[/{name}[/{sub}]]
func parseRequest(method, path string) Request {
	r := Request{Method: method, Path: path}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		r.Version, rest = segs[1], segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		r.Group, r.Version, rest = segs[1], segs[2], segs[3:]
	default:
		return r // /version, /healthz, group discovery
	}
	if len(rest) == 0 {
		return Request{Method: method, Path: path} // version discovery
	}
	// namespaces/{ns}/status and /finalize are subresources of the
	// Namespace itself, anything else after {ns} is a namespaced resource.
	if rest[0] == "namespaces" && len(rest) >= 3 && rest[2] != "status" && rest[2] != "finalize" {
		r.Namespace, rest = rest[1], rest[2:]
	}
	r.Resource = rest[0]
	if len(rest) >= 2 {
		r.Name = rest[1]
	}
	if len(rest) >= 3 {
		r.Subresource = strings.Join(rest[2:], "/")
	}
	return r
}
