package fakecompute

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/internal/fakehttp"
)

const (
	apiPrefix = "/compute/v1/"
	// linkBase is what the API writes in selfLink, zone, targetLink, ...
	linkBase = "https://www.googleapis.com/compute/v1/"
)

// Server is the fake Compute Engine v1 REST API: an http.Handler for
// httptest.NewServer. All methods are safe for concurrent use.
type Server struct {
	mu  sync.Mutex
	ix  *index
	now func() time.Time
	mux *http.ServeMux

	// state
	projects   map[string]*projectState
	ops        map[string]*operation // key: project/scope/name
	inflight   []*operation          // not DONE, in start order
	requestIDs map[string]*operation // project|requestId
	seq        uint64
	external   map[string]bool // external addresses in use or reserved
	extCursor  int             // the last external address handed out
	log        fakehttp.Log[Request]
	faults     fakehttp.Faults[Fault]

	knobs knobs
}

// knobs are the test controls; Reset restores defaultKnobs.
type knobs struct {
	opPolls      int
	waitPolls    int
	advanceOnGet bool
	addressDelay int
	unreachable  map[string]bool
	quotaSync    bool
	repeatDelete RepeatDelete
	token        string
	regionQuota  map[string]map[string]float64 // region -> metric -> limit
	projectQuota map[string]float64
}

func defaultKnobs() knobs {
	return knobs{opPolls: 2, advanceOnGet: true, unreachable: map[string]bool{},
		regionQuota: map[string]map[string]float64{}, projectQuota: map[string]float64{}}
}

// RepeatDelete is the answer to a delete of an instance whose delete is
// still running.
type RepeatDelete int

const (
	// RepeatDeleteRateLimited answers 403 rateLimitExceeded, as overlapping
	// deletes of one instance drew in cloudpilot-ai/karpenter-provider-gcp#242
	// and #243 (the threads give the status and reason, not the body; the body
	// is RateLimitExceeded's). The default.
	RepeatDeleteRateLimited RepeatDelete = iota
	// RepeatDeleteNotReady answers 400 resourceNotReady, the API's answer to
	// an operation on a resource another operation is busy with.
	RepeatDeleteNotReady
	// RepeatDeleteNewOperation accepts it and returns a second delete
	// operation, which ends DONE with the first.
	RepeatDeleteNewOperation
)

type projectState struct {
	id        string
	number    uint64
	created   string
	instances map[string]*instance // zone/name
	reserved  map[string]*operation
	firewalls map[string]*firewall
	internal  map[string]bool     // internal addresses in use or reserved
	addresses map[string]*address // region/name
	// addrPending are the names of address inserts that fail: taken until
	// their operation is DONE, as failed instance inserts are (reserved).
	addrPending map[string]*operation
}

// Option configures New.
type Option func(*Server)

// WithCatalogue replaces DefaultCatalogue.
func WithCatalogue(c Catalogue) Option {
	return func(s *Server) { s.ix = newIndex(c.clone()) }
}

// WithClock sets the clock timestamps are read from (time.Now by default).
// Nothing in the fake waits on it: operations and instances advance by
// polls and Advance.
func WithClock(now func() time.Time) Option {
	return func(s *Server) { s.now = now }
}

// New returns a fake with DefaultCatalogue, no instances and no firewall
// rules, and the default knobs: operations DONE on their second poll,
// instances advancing on each GET, quota failures asynchronous.
func New(opts ...Option) *Server {
	s := &Server{ix: newIndex(DefaultCatalogue()), now: time.Now}
	s.log.Target = requestTarget
	for _, o := range opts {
		o(s)
	}
	s.resetLocked()
	s.mux = s.routes()
	return s
}

// Reset empties the fake (instances, addresses, firewalls, operations, request log,
// faults) and restores every knob; the catalogue stays.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

func (s *Server) resetLocked() {
	s.projects = map[string]*projectState{}
	for id, n := range s.ix.projects {
		s.projects[id] = &projectState{id: id, number: n, created: "2026-01-05T09:12:44.312-08:00",
			instances: map[string]*instance{}, reserved: map[string]*operation{},
			firewalls: map[string]*firewall{}, internal: map[string]bool{},
			addresses: map[string]*address{}, addrPending: map[string]*operation{}}
	}
	s.ops = map[string]*operation{}
	s.inflight = nil
	s.requestIDs = map[string]*operation{}
	s.external = map[string]bool{}
	s.extCursor = 0
	s.log.Clear()
	s.faults.Clear()
	s.knobs = defaultKnobs()
}

// ---- knobs ----

// SetOperationPolls sets how many polls (zoneOperations/globalOperations get
// or wait, a GET of the target, or Advance) an operation started from now on
// runs: the n-th sees it DONE. 0 makes operations DONE when they start.
// Default 2.
func (s *Server) SetOperationPolls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.opPolls = n
}

// SetWaitPolls sets how many polls one operations.wait call counts for; 0
// (the default) waits the operation out, as the API's wait does within its
// two minutes. With 1 a wait returns a RUNNING operation as the API may
// ("this method is not guaranteed to return DONE").
func (s *Server) SetWaitPolls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.waitPolls = n
}

// SetAdvanceOnGet sets whether a GET of an instance or firewall (answered
// first) advances the operations running on it by one poll. Default on,
// so a client that only polls the instance sees PROVISIONING, STAGING,
// RUNNING, and a deleted instance disappear. Off, only operation polls and
// Advance move time.
func (s *Server) SetAdvanceOnGet(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.advanceOnGet = on
}

// SetAddressDelay makes the external IP appear that many steps (GETs of the
// instance or Advance) after the instance is RUNNING, so a client sees
// RUNNING without a natIP. Default 0.
func (s *Server) SetAddressDelay(steps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.addressDelay = steps
}

// SetZoneUnreachable marks zone as one aggregated lists cannot reach: it
// answers a warning UNREACHABLE instead of its instances.
func (s *Server) SetZoneUnreachable(zone string, unreachable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.unreachable[zone] = unreachable
}

// SetRegionQuota sets the limit of a regional quota metric (CPUS,
// INSTANCES, IN_USE_ADDRESSES, STATIC_ADDRESSES, ...). Usage is computed
// from the instances and the external addresses.
func (s *Server) SetRegionQuota(region, metric string, limit float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.knobs.regionQuota[region] == nil {
		s.knobs.regionQuota[region] = map[string]float64{}
	}
	s.knobs.regionQuota[region][metric] = limit
}

// SetProjectQuota sets the limit of a project quota metric (FIREWALLS,
// CPUS_ALL_REGIONS, ...) in every project.
func (s *Server) SetProjectQuota(metric string, limit float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.projectQuota[metric] = limit
}

// SetQuotaSynchronous chooses how an insert over a regional quota fails:
// false (default) accepts it and fails its operation with QUOTA_EXCEEDED,
// true answers 403 quotaExceeded at once. The API does both.
func (s *Server) SetQuotaSynchronous(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.quotaSync = on
}

// SetRepeatDelete sets the answer to a delete of an instance being deleted.
func (s *Server) SetRepeatDelete(mode RepeatDelete) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.repeatDelete = mode
}

// RequireToken makes every request need "Authorization: Bearer <token>"
// (401 otherwise); "" (the default) needs none, for
// option.WithoutAuthentication.
func (s *Server) RequireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.token = token
}

// Advance moves every running operation (and every pending external
// address) steps polls on, as if that much time passed.
func (s *Server) Advance(steps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < steps; i++ {
		for _, op := range append([]*operation(nil), s.inflight...) {
			s.advanceOp(op)
		}
		for _, p := range s.projects {
			for _, in := range p.instances {
				if in.op == nil {
					s.tickAddress(p, in)
				}
			}
		}
	}
}

// Settle runs every operation to its end and assigns pending addresses.
func (s *Server) Settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.inflight) > 0 {
		for _, op := range append([]*operation(nil), s.inflight...) {
			s.advanceOp(op)
		}
	}
	for _, p := range s.projects {
		for _, in := range p.instances {
			for in.natPending {
				s.tickAddress(p, in)
			}
		}
	}
}

// ---- request log ----

// Request is one call as the fake saw it.
type Request struct {
	Method string
	Path   string // e.g. /compute/v1/projects/p/zones/z/instances
	Query  url.Values
	// Body is the request body as compact JSON with every metadata item
	// value (user-data, startup scripts) replaced by its length, so the log
	// can be printed.
	Body          string
	Status        int    // the HTTP status answered
	RequestParams string // the x-goog-request-params header
	Authorized    bool   // an Authorization header was sent
}

// String is "METHOD path?query -> status".
func (r Request) String() string { return fakehttp.Line(r.Method, r.Path, r.Query, "", r.Status) }

// Requests returns the calls so far, oldest first.
func (s *Server) Requests() []Request { return s.log.All() }

// ClearRequests empties the request log.
func (s *Server) ClearRequests() { s.log.Clear() }

// Count is how many logged calls match method ("" any) and a Fault-style
// path pattern.
func (s *Server) Count(method, pattern string) int { return s.log.Count(method, pattern) }

// ---- HTTP ----

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ServeHTTP answers one call. The whole call runs under the fake's lock.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	sw := &statusWriter{ResponseWriter: w}

	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		s.log.Add(Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
			Body: summarizeBody(body), Status: sw.status, RequestParams: r.Header.Get("x-goog-request-params"),
			Authorized: r.Header.Get("Authorization") != ""})
	}()

	if s.knobs.token != "" {
		switch auth := r.Header.Get("Authorization"); {
		case auth == "":
			writeAPIError(sw, Unauthenticated(true))
			return
		case auth != "Bearer "+s.knobs.token:
			writeAPIError(sw, Unauthenticated(false))
			return
		}
	}
	if f := s.takeFault(r.Method, r.URL.Path, false); f != nil {
		writeAPIError(sw, f.Err.render(s.resourceOf(r, body), s.projectNumberOf(r)))
		return
	}
	s.mux.ServeHTTP(sw, r)
}

// resourceOf is the resource path a request is about, for {resource}.
func (s *Server) resourceOf(r *http.Request, body []byte) string {
	res := strings.TrimPrefix(r.URL.Path, apiPrefix)
	if r.Method == http.MethodPost && !strings.Contains(res, "/operations/") {
		var b struct {
			Name string `json:"name"`
		}
		last := res[strings.LastIndex(res, "/")+1:]
		if json.Unmarshal(body, &b) == nil && b.Name != "" && (last == "instances" || last == "firewalls" || last == "addresses") {
			res += "/" + b.Name // an insert into a collection
		}
	}
	return res
}

func (s *Server) projectNumberOf(r *http.Request) string {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, apiPrefix), "/")
	if len(parts) >= 2 && parts[0] == "projects" {
		if p, ok := s.projects[parts[1]]; ok {
			return strconv.FormatUint(p.number, 10)
		}
	}
	return "0"
}

func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	p := apiPrefix + "projects/{project}"
	m.HandleFunc("GET "+p, s.getProject)
	m.HandleFunc("GET "+p+"/regions/{region}", s.getRegion)
	m.HandleFunc("GET "+p+"/zones/{zone}", s.getZone)
	m.HandleFunc("GET "+p+"/aggregated/instances", s.aggregatedInstances)
	m.HandleFunc("GET "+p+"/zones/{zone}/instances", s.listInstances)
	m.HandleFunc("POST "+p+"/zones/{zone}/instances", s.insertInstance)
	m.HandleFunc("GET "+p+"/zones/{zone}/instances/{name}", s.getInstance)
	m.HandleFunc("DELETE "+p+"/zones/{zone}/instances/{name}", s.deleteInstance)
	m.HandleFunc("POST "+p+"/zones/{zone}/instances/{name}/start", s.startInstance)
	m.HandleFunc("POST "+p+"/zones/{zone}/instances/{name}/stop", s.stopInstance)
	m.HandleFunc("POST "+p+"/zones/{zone}/instances/{name}/resume", s.resumeInstance)
	m.HandleFunc("POST "+p+"/zones/{zone}/instances/{name}/suspend", s.suspendInstance)
	m.HandleFunc("POST "+p+"/zones/{zone}/instances/{name}/setLabels", s.setLabels)
	m.HandleFunc("GET "+p+"/zones/{zone}/instances/{name}/getGuestAttributes", s.getGuestAttributes)
	m.HandleFunc("POST "+p+"/zones/{zone}/instances/{name}/addAccessConfig", s.addAccessConfig)
	m.HandleFunc("POST "+p+"/zones/{zone}/instances/{name}/deleteAccessConfig", s.deleteAccessConfig)
	m.HandleFunc("GET "+p+"/aggregated/addresses", s.aggregatedAddresses)
	m.HandleFunc("GET "+p+"/regions/{region}/addresses", s.listAddresses)
	m.HandleFunc("POST "+p+"/regions/{region}/addresses", s.insertAddress)
	m.HandleFunc("GET "+p+"/regions/{region}/addresses/{name}", s.getAddress)
	m.HandleFunc("DELETE "+p+"/regions/{region}/addresses/{name}", s.deleteAddress)
	m.HandleFunc("POST "+p+"/regions/{region}/addresses/{name}/setLabels", s.setAddressLabels)
	m.HandleFunc("GET "+p+"/regions/{region}/operations/{op}", s.getOperation)
	m.HandleFunc("POST "+p+"/regions/{region}/operations/{op}/wait", s.waitOperation)
	m.HandleFunc("GET "+p+"/zones/{zone}/operations/{op}", s.getOperation)
	m.HandleFunc("POST "+p+"/zones/{zone}/operations/{op}/wait", s.waitOperation)
	m.HandleFunc("GET "+p+"/global/operations/{op}", s.getOperation)
	m.HandleFunc("POST "+p+"/global/operations/{op}/wait", s.waitOperation)
	m.HandleFunc("GET "+p+"/global/firewalls", s.listFirewalls)
	m.HandleFunc("POST "+p+"/global/firewalls", s.insertFirewall)
	m.HandleFunc("GET "+p+"/global/firewalls/{name}", s.getFirewall)
	m.HandleFunc("PATCH "+p+"/global/firewalls/{name}", s.patchFirewall)
	m.HandleFunc("PUT "+p+"/global/firewalls/{name}", s.updateFirewall)
	m.HandleFunc("DELETE "+p+"/global/firewalls/{name}", s.deleteFirewall)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeGFENotFound(w, r.URL.Path) })
	return m
}

// project is the request's project, or nil after answering 404 for it.
func (s *Server) project(w http.ResponseWriter, r *http.Request) *projectState {
	p := s.projects[r.PathValue("project")]
	if p == nil {
		writeAPIError(w, NotFound("projects/"+r.PathValue("project")))
	}
	return p
}

// zone is the request's zone, or "" after answering 400 Unknown zone.
func (s *Server) zone(w http.ResponseWriter, r *http.Request) string {
	z := r.PathValue("zone")
	if _, ok := s.ix.zoneRegion[z]; !ok {
		writeAPIError(w, unknownZone(z))
		return ""
	}
	return z
}

// region is the request's region, or "" after answering 400 Unknown region.
func (s *Server) region(w http.ResponseWriter, r *http.Request) string {
	rg := r.PathValue("region")
	if _, ok := s.ix.cat.Regions[rg]; !ok {
		writeAPIError(w, unknownRegion(rg))
		return ""
	}
	return rg
}

// ---- wire helpers ----

func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.Marshal(m)
	if err != nil {
		writeAPIError(w, BackendError())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// readProto decodes the body strictly, as the API rejects unknown fields.
func readProto(r *http.Request, m proto.Message) *APIError {
	body, _ := io.ReadAll(r.Body)
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := protojson.Unmarshal(body, m); err != nil {
		return invalidJSON(err.Error())
	}
	return nil
}

func link(parts ...string) string { return linkBase + strings.Join(parts, "/") }

// timestampZone is the offset the API writes its timestamps in (Pacific).
var timestampZone = time.FixedZone("PST", -8*60*60)

func (s *Server) timestamp() string {
	return s.now().In(timestampZone).Format("2006-01-02T15:04:05.000-07:00")
}

func (s *Server) nextID() uint64 {
	s.seq++
	return 4_000_000_000_000_000_000 + s.seq*7_919
}

// fingerprint is a stable 8-byte base64 digest, the form of the API's
// labelFingerprint and fingerprint fields ("42WmSpB8rSM=").
func fingerprint(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)[:8])
}

func labelFingerprint(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := []string{"labels"}
	for _, k := range keys {
		parts = append(parts, k+"="+labels[k])
	}
	return fingerprint(parts...)
}

// summarizeBody is body as compact JSON with metadata item values elided.
func summarizeBody(body []byte) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return ""
	}
	var v map[string]any
	if json.Unmarshal(body, &v) != nil {
		return fmt.Sprintf("<%d bytes, not JSON>", len(body))
	}
	if md, ok := v["metadata"].(map[string]any); ok {
		if items, ok := md["items"].([]any); ok {
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					if val, ok := m["value"].(string); ok {
						m["value"] = fmt.Sprintf("<%d bytes>", len(val))
					}
				}
			}
		}
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSpace(b.String())
}

// validRequestID: "must be a valid UUID with the exception that zero UUID
// is not supported" (the requestId field's description in the API).
func validRequestID(id string) bool {
	if len(id) != 36 || id == "00000000-0000-0000-0000-000000000000" {
		return false
	}
	for i, c := range id {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}

// requestIDOp is the operation an earlier call with this requestId started;
// it answers 400 for an id that is not a UUID (fake's own text after the
// field description). done reports that w was answered.
func (s *Server) requestIDOp(w http.ResponseWriter, r *http.Request, p *projectState) (done bool) {
	id := r.URL.Query().Get("requestId")
	if id == "" {
		return false
	}
	if !validRequestID(id) {
		writeAPIError(w, Invalid("requestId", id, "The request ID must be a valid UUID with the exception that zero UUID is not supported."))
		return true
	}
	if op := s.requestIDs[p.id+"|"+id]; op != nil {
		writeProto(w, op.pb)
		return true
	}
	return false
}

func (s *Server) rememberRequestID(r *http.Request, p *projectState, op *operation) {
	if id := r.URL.Query().Get("requestId"); id != "" {
		s.requestIDs[p.id+"|"+id] = op
	}
}

// answerOp starts op and answers the call that made it with it; a repeat
// of the call's requestId gets the same operation.
func (s *Server) answerOp(w http.ResponseWriter, r *http.Request, p *projectState, op *operation) {
	s.rememberRequestID(r, p, op)
	s.startOp(op)
	writeProto(w, op.pb)
}

// answeredEarly answers a call on an existing resource before it is looked
// up: 404 for an unknown project, or the operation an earlier call with
// this requestId started. It reports whether w was answered.
func (s *Server) answeredEarly(w http.ResponseWriter, r *http.Request) bool {
	p := s.project(w, r)
	return p == nil || s.requestIDOp(w, r, p)
}

// answerGet answers a GET with the resource, then counts one poll for the
// operations running on target (as an instance GET does).
func (s *Server) answerGet(w http.ResponseWriter, p *projectState, pb proto.Message, target string) {
	writeProto(w, pb)
	s.touch(p, target)
}

// ---- state inspection and seeding, for tests ----

// Instance returns a copy of the instance as a GET would answer it (without
// advancing anything), or nil.
func (s *Server) Instance(project, zone, name string) *computepb.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.projects[project]; p != nil {
		if in := p.instances[zone+"/"+name]; in != nil {
			return proto.Clone(in.pb).(*computepb.Instance)
		}
	}
	return nil
}

// Instances returns copies of every instance of project, by zone and name.
func (s *Server) Instances(project string) []*computepb.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*computepb.Instance
	if p := s.projects[project]; p != nil {
		for _, in := range p.sortedInstances() {
			out = append(out, proto.Clone(in.pb).(*computepb.Instance))
		}
	}
	return out
}

// Firewall returns a copy of the rule, or nil.
func (s *Server) Firewall(project, name string) *computepb.Firewall {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.projects[project]; p != nil {
		if fw := p.firewalls[name]; fw != nil {
			return proto.Clone(fw.pb).(*computepb.Firewall)
		}
	}
	return nil
}

// Operation returns a copy of the named operation of project (zonal or
// global), or nil.
func (s *Server) Operation(project, name string) *computepb.Operation {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range s.ops {
		if op.project == project && op.pb.GetName() == name {
			return proto.Clone(op.pb).(*computepb.Operation)
		}
	}
	return nil
}

// Operations returns copies of every operation of project, oldest first.
func (s *Server) Operations(project string) []*computepb.Operation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ops []*operation
	for _, op := range s.ops {
		if op.project == project {
			ops = append(ops, op)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].seq < ops[j].seq })
	out := make([]*computepb.Operation, 0, len(ops))
	for _, op := range ops {
		out = append(out, proto.Clone(op.pb).(*computepb.Operation))
	}
	return out
}
