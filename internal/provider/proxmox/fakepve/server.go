package fakepve

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/internal/fakehttp"
)

// Server is the fake PVE API. New builds it, Start serves it over TLS on
// loopback. Every method is safe for concurrent use; each API call is
// served under one lock (a held call waits outside it).
type Server struct {
	mu   sync.Mutex
	cond *sync.Cond
	now  func() time.Time

	world World // as given to New, for Reset

	nodes    []string
	offline  map[string]*Error
	storages []*storageDef
	stores   map[string]*storeInst // node/id, or */id for a shared storage
	vms      map[int]*vm
	tasks    map[string]*task
	running  []*task // tasks not ended, in start order
	tokens   map[string]*Token
	version  Version
	nextID   NextID
	pidSeq   int
	step     int64 // Advance steps so far
	log      fakehttp.Log[Request]
	faults   fakehttp.Faults[Fault]
	holding  int
	knobs    knobs

	ts     *httptest.Server
	conns  map[net.Conn]bool
	closed bool
	connWG sync.WaitGroup
}

type knobs struct {
	taskPolls     map[string]int
	taskOutcome   map[string]TaskOutcome
	lockWaitPolls int
	agentBoot     int
	statsInterval int
	execPolls     int
}

func defaultKnobs() knobs {
	return knobs{taskPolls: map[string]int{}, taskOutcome: map[string]TaskOutcome{},
		lockWaitPolls: 10, execPolls: 1}
}

// Option configures New.
type Option func(*Server)

// WithWorld replaces DefaultWorld. Tokens without a Secret get a random one.
func WithWorld(w World) Option { return func(s *Server) { s.world = w.clone() } }

// WithClock sets the clock for Date headers and task start times
// (time.Now by default). Nothing in the fake waits on it.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New returns a fake of DefaultWorld (or WithWorld's) with the default
// knobs: every task ends on its second status poll, OK; agents answer as
// soon as their VM runs; /cluster/resources is current on every read.
func New(opts ...Option) *Server {
	s := &Server{world: DefaultWorld(), now: time.Now, conns: map[net.Conn]bool{}}
	s.log.Target = requestTarget
	s.cond = sync.NewCond(&s.mu)
	for _, o := range opts {
		o(s)
	}
	for i := range s.world.Tokens {
		if s.world.Tokens[i].Secret == "" {
			s.world.Tokens[i].Secret = randomUUID()
		}
	}
	s.resetLocked()
	return s
}

// Start serves the fake on a loopback TLS listener (httptest's certificate
// for 127.0.0.1) and returns it.
func (s *Server) Start() *Server {
	ts := httptest.NewTLSServer(s)
	s.mu.Lock()
	s.ts = ts
	s.mu.Unlock()
	return s
}

// Close stops serving and ends every connection.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	ts := s.ts
	for c := range s.conns {
		c.Close()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	if ts != nil {
		ts.Close()
	}
	s.connWG.Wait()
}

// URL is the API base, https://127.0.0.1:<port>/api2/json.
func (s *Server) URL() string { return s.ts.URL + apiBase + "/json" }

// Host is host:port of the listener.
func (s *Server) Host() string { return strings.TrimPrefix(s.ts.URL, "https://") }

// CertPool trusts the fake's certificate.
func (s *Server) CertPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.ts.Certificate())
	return p
}

// CACertPEM is the fake's (self-signed) certificate in PEM, what a
// provider's CA file holds.
func (s *Server) CACertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ts.Certificate().Raw})
}

// WriteCredentials writes the files a proxmox entry reads into dir: the
// first token (tokenFile's form, user@realm!id=secret) and the CA that
// signs the fake's certificate (caFile).
func (s *Server) WriteCredentials(dir string) (tokenFile, caFile string, err error) {
	tokenFile, caFile = filepath.Join(dir, "token"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(tokenFile, []byte(s.Token()+"\n"), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(caFile, s.CACertPEM(), 0o600); err != nil {
		return "", "", err
	}
	return tokenFile, caFile, nil
}

// Client is an HTTP client that verifies the fake's certificate and sends
// no credentials.
func (s *Server) Client() *http.Client { return s.ts.Client() }

// Token is the Authorization header value of the first token:
// "PVEAPIToken=<id>=<secret>".
func (s *Server) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.world.Tokens[0]
	return "PVEAPIToken=" + t.ID + "=" + t.Secret
}

// TokenSecret is the secret of the token id.
func (s *Server) TokenSecret(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tokens[id]; t != nil {
		return t.Secret
	}
	return ""
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = true
	s.connWG.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.connWG.Done()
}

// Reset returns to the world New started with (VMs, storages, volumes,
// tokens, nodes online) and drops tasks, the request log, faults and every
// knob. Token secrets stay.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

func (s *Server) resetLocked() {
	w := s.world.clone()
	s.nodes = w.Nodes
	s.offline = map[string]*Error{}
	s.version = w.Version
	s.nextID = w.NextID
	if s.nextID.Lower == 0 {
		s.nextID.Lower = 100
	}
	if s.nextID.Upper == 0 {
		s.nextID.Upper = 1000 * 1000
	}
	s.tokens = map[string]*Token{}
	for i := range w.Tokens {
		t := w.Tokens[i]
		s.tokens[t.ID] = &t
	}
	s.storages = nil
	s.stores = map[string]*storeInst{}
	for _, st := range w.Storages {
		s.addStorageLocked(st)
	}
	s.vms = map[int]*vm{}
	s.tasks = map[string]*task{}
	s.running = nil
	s.pidSeq = 0x0022A5F0
	s.step = 0
	s.log.Clear()
	s.faults.Clear()
	s.knobs = defaultKnobs()
	for _, v := range w.Volumes {
		if err := s.putVolumeLocked(v); err != nil {
			panic("fakepve: world volume: " + err.Error())
		}
	}
	for _, v := range w.VMs {
		if err := s.putVMLocked(v); err != nil {
			panic("fakepve: world VM: " + err.Error())
		}
	}
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ---- request log ----

// Request is one call as the fake saw it. It never holds a token secret or
// an upload's content.
type Request struct {
	Method   string
	Path     string // as sent, e.g. /api2/json/nodes/pve1/qemu/101/config
	Query    url.Values
	FormKeys []string // parameter names of the body (and query), sorted
	Status   int      // the status answered; 0 when the connection was dropped
	TokenID  string   // the token the call authenticated as, "" if none
	Upload   *UploadInfo
}

// UploadInfo describes an upload's file part.
type UploadInfo struct {
	Filename string
	Size     int
}

// String is "METHOD path?query [keys] -> status".
func (r Request) String() string {
	k := ""
	if len(r.FormKeys) > 0 {
		k = " [" + strings.Join(r.FormKeys, ",") + "]"
	}
	return fakehttp.Line(r.Method, r.Path, r.Query, k, r.Status)
}

// requestTarget is where a logged call went, for Count: its path below
// /api2/<format>.
func requestTarget(r Request) (string, string, bool) {
	_, rel, ok := splitAPIPath(r.Path)
	return r.Method, rel, ok
}

// Requests returns the calls so far, oldest first.
func (s *Server) Requests() []Request { return s.log.All() }

// ClearRequests empties the request log.
func (s *Server) ClearRequests() { s.log.Clear() }

// Count is how many logged calls match method ("" any) and a Fault-style
// path pattern (below /api2/json).
func (s *Server) Count(method, pattern string) int { return s.log.Count(method, pattern) }

// ---- dispatch ----

// call is one API call inside the lock.
type call struct {
	s     *Server
	req   *request
	p     map[string]string // URI parameters and request parameters
	lists map[string][]item // array parameters (repeated keys, JSON arrays)
	node  string            // the node the call runs on (its path's, or the entry node)
	fault *Fault
	total *int
}

func (c *call) vmid() int { return atoi(c.p["vmid"]) }

type route struct {
	method string
	path   []string // segments; "{x}" binds x
	perm   func(c *call) *Error
	proxy  bool // proxyto => 'node'
	params schema
	handle func(c *call) (any, *Error)
}

func (s *Server) match(method, rel string) (*route, map[string]string, bool) {
	var segs []string // find_handler skips empty fragments
	for _, x := range strings.Split(rel, "/") {
		if x != "" {
			segs = append(segs, x)
		}
	}
	pathFound := false
	for _, rt := range routes {
		vars, ok := matchRoute(rt.path, segs)
		if !ok {
			continue
		}
		pathFound = true
		if rt.method == method {
			return rt, vars, true
		}
	}
	return nil, nil, pathFound
}

// matchRoute matches path segments; a last "{x*}" takes the rest of the
// path as one value (the storage content subclass' fragmentDelimiter ”,
// since volume IDs contain '/').
func matchRoute(pat, segs []string) (map[string]string, bool) {
	if n := len(pat); n > 0 && strings.HasSuffix(pat[n-1], "*}") && len(segs) > n {
		segs = append(append([]string(nil), segs[:n-1]...), strings.Join(segs[n-1:], "/"))
	}
	if len(pat) != len(segs) {
		return nil, false
	}
	vars := map[string]string{}
	for i, p := range pat {
		if strings.HasPrefix(p, "{") {
			vars[strings.TrimSuffix(strings.Trim(p, "{}"), "*")] = segs[i]
		} else if p != segs[i] {
			return nil, false
		}
	}
	return vars, true
}

// handle is rest_handler: the handler for the path, the URI and request
// parameters merged, the permission check, the proxy to the path's node,
// parameter verification, then the code.
func (s *Server) handle(req *request) (any, *int, *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	rt, vars, _ := s.match(req.method, req.rel)
	f := s.takeFault(req.method, req.rel)
	if f != nil && f.Hold > 0 {
		target := s.step + int64(f.Hold)
		s.holding++
		for s.step < target && !s.closed {
			s.cond.Wait()
		}
		s.holding--
	}
	if f != nil && f.Err != nil {
		if vars == nil {
			vars = map[string]string{}
		}
		return nil, nil, f.Err.render(vars)
	}
	if rt == nil {
		return nil, nil, notImplemented(req.method, req.rel)
	}
	c := &call{s: s, req: req, p: map[string]string{}, lists: map[string][]item{}, node: s.nodes[0], fault: f}
	for k, v := range req.params {
		if uv, ok := vars[k]; ok && uv != v {
			return nil, nil, ParamErrors(map[string]string{k: "duplicate parameter (already defined in URI) with conflicting values!"})
		}
		c.p[k] = v
	}
	for k, v := range req.arrays {
		if _, ok := vars[k]; ok {
			// An array never equals the URI's string.
			return nil, nil, ParamErrors(map[string]string{k: "duplicate parameter (already defined in URI) with conflicting values!"})
		}
		c.lists[k] = v
	}
	for k, v := range vars {
		c.p[k] = v
	}
	if rt.perm != nil {
		if e := rt.perm(c); e != nil {
			return nil, nil, e
		}
	}
	if rt.proxy {
		n := c.p["node"]
		if n == "localhost" {
			n = s.nodes[0]
		}
		if !s.hasNode(n) {
			return nil, nil, NoSuchNode(n)
		}
		if e := s.offline[n]; e != nil {
			return nil, nil, e
		}
		c.node = n
	}
	rt.params.normalize(c.p, c.lists)
	if errs := rt.params.validate(c.p, c.lists); len(errs) > 0 {
		return nil, nil, ParamErrors(errs)
	}
	data, err := rt.handle(c)
	if err != nil {
		return nil, nil, err
	}
	return data, c.total, nil
}

func (s *Server) hasNode(n string) bool {
	for _, x := range s.nodes {
		if x == n {
			return true
		}
	}
	return false
}

// sortedVMIDs lists the VMIDs as PVE iterates them: `sort keys`, a string
// sort (101, 102, 9000, 99999).
func (s *Server) sortedVMIDs() []int {
	ids := make([]int, 0, len(s.vms))
	for id := range s.vms {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return itoa(ids[i]) < itoa(ids[j]) })
	return ids
}
