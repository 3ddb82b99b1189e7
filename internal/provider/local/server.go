package local

// The forward proxy is written here on net/http rather than taken from
// github.com/elazarl/goproxy (v1.9.3, in go.mod), because goproxy gets in
// the way of three things this provider promises:
//   - Delete and Close must end every connection and return only when done.
//     goproxy runs each CONNECT tunnel in goroutines it detaches from the
//     handler, so nothing can wait for a tunnel to end, and their Warnf
//     lines can fire after the instance (and the caller's logger) is gone.
//   - Its defaults chain to the operator's own HTTPS_PROXY (read from the
//     environment at construction) and skip TLS verification for absolute
//     https:// requests; both would have to be undone field by field.
//   - It strips only some hop-by-hop headers (not those a Connection header
//     names, nor Keep-Alive, TE or Upgrade on responses).
// Plain HTTP goes through the standard library's httputil.ReverseProxy,
// which already handles hop-by-hop headers, trailers, upgrades, streaming
// flushes and the request context; CONNECT is a small hijack-and-splice
// below. Both dial upstream with the request's context and dialTimeout.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/go-logr/logr"
)

const (
	// dialTimeout bounds every upstream dial, on top of the request context.
	dialTimeout = 10 * time.Second
	// readHeaderTimeout stops clients that open a connection and send
	// nothing from holding it forever.
	readHeaderTimeout = 30 * time.Second
	// idleTimeout closes keep-alive client connections left unused.
	idleTimeout = 2 * time.Minute
)

// What a client reads when the proxy answers for the destination: one fixed
// text per class, naming no address, resolver or error of the proxy's host
// (the detail goes to the log at V(1)).
const (
	textRefused      = "refused: this proxy's destination policy does not allow this request"
	textUnresolved   = "refused: the destination's name does not resolve"
	textCannotReach  = "bad gateway: cannot connect to the destination"
	textTimeout      = "gateway timeout: the destination did not answer in time"
	textShuttingDown = "proxy is shutting down"
	textAuthRequired = "proxy authentication required"
)

// acl is who may use an instance and where they may go: its Proxy's client
// ranges and the entry's policy narrowed to its destination rules.
type acl struct {
	// prefixes empty means loopback clients only, never everyone.
	prefixes []netip.Prefix
	policy   *egress.Policy
	// users, when set, must name every request's user (Proxy-Authorization).
	users *clientauth.Users
}

// parseACL is what a request makes of the entry's policy (ForRequest);
// each error names the bad field (allowedSourceRanges[i],
// destinations[i]...).
func parseACL(entry *egress.Policy, req provider.CreateRequest) (*acl, []string) {
	prefixes, policy, errs := entry.ForRequest(req.AllowedSourceRanges, req.Destinations)
	problems := make([]string, len(errs))
	for i, e := range errs {
		problems[i] = e.Error()
	}
	var users *clientauth.Users
	if req.ClientAuth.Len() > 0 {
		var err error
		// The error names a line and a fixed reason, never the file's text.
		if users, err = clientauth.Parse([]byte(req.ClientAuth.Reveal())); err != nil {
			problems = append(problems, "clientAuth: "+err.Error())
		}
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return &acl{prefixes: prefixes, policy: policy, users: users}, nil
}

// allows says whether a client at addr may use the proxy.
func (a *acl) allows(addr netip.Addr) bool {
	addr = addr.Unmap()
	if len(a.prefixes) == 0 {
		return addr.IsLoopback() // 127.0.0.0/8 and ::1
	}
	for _, p := range a.prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func (a *acl) String() string {
	if len(a.prefixes) == 0 {
		return "loopback only"
	}
	s := make([]string, len(a.prefixes))
	for i, p := range a.prefixes {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// upstream is how a server reaches origins: in tests, seams that see
// every lookup and dial. Where it may go is its acl's policy.
type upstream struct {
	// lookup resolves a host name; nil is the system resolver.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// dial connects to an address the policy passed, from local when it is
	// valid; nil is a net.Dialer.
	dial func(ctx context.Context, remote netip.AddrPort, local netip.Addr) (net.Conn, error)
}

// server is one instance's listener and proxy.
type server struct {
	ln     net.Listener
	hs     *http.Server
	dialer *net.Dialer
	// fwdMu guards forward and its transport, made by the first plain
	// request: most instances of a fleet never forward one, and each pair
	// is a few KiB.
	fwdMu     sync.Mutex
	forward   *httputil.ReverseProxy
	transport *http.Transport
	up        upstream
	acl       atomic.Pointer[acl]
	log       logr.Logger

	// ctx is the base of every request's context; close cancels it, which
	// ends upstream dials, forwarded requests and tunnels.
	ctx    context.Context
	cancel context.CancelFunc

	// closing is set by close; stopped closes when Serve returns.
	closing atomic.Bool
	stopped chan struct{}

	mu sync.Mutex // orders active.Add against close's Wait
	// active counts the Serve loop and running handlers; finished closes
	// when it drops to zero after close.
	active   sync.WaitGroup
	finished chan struct{}
	onDone   func()
}

// newServer starts serving ln at once. onDone runs when the server has
// finished draining after close; onStop (nil: none) when the listener
// stops without close.
func newServer(ln net.Listener, a *acl, up upstream, logger logr.Logger, onDone, onStop func()) *server {
	if a.policy == nil {
		a.policy = egress.Default()
	}
	s := &server{ln: ln, up: up, log: logger, stopped: make(chan struct{}), finished: make(chan struct{}), onDone: onDone}
	// The instance outlives the Create call that made it, so its requests
	// hang off their own root rather than off Create's ctx.
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.acl.Store(a)
	s.dialer = &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	s.hs = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          log.New(serverLog{s}, "", 0),
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		// Plain HTTP only: a non-nil empty map keeps Serve from setting up
		// HTTP/2 (its per-server state) for a TLS this server never speaks.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	s.active.Add(1)
	go func() {
		defer s.active.Done()
		err := s.hs.Serve(ln)
		close(s.stopped)
		if !s.closing.Load() {
			// Not asked to stop: Get now reports the instance Stopped and
			// Check names it, so say why once.
			s.log.V(1).Info("listener stopped", "error", err.Error())
			if onStop != nil {
				onStop()
			}
		}
	}()
	return s
}

// forwarder is the server's reverse proxy, made on first use.
func (s *server) forwarder() *httputil.ReverseProxy {
	s.fwdMu.Lock()
	defer s.fwdMu.Unlock()
	if s.forward == nil {
		s.transport = &http.Transport{
			Proxy:                 nil, // never chain to the operator's own HTTP(S)_PROXY
			DialContext:           s.dial,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			DisableCompression:    true, // pass bodies through as the origin sent them
		}
		s.forward = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				// The absolute URI is already the target. Rewrite has dropped
				// the forwarding headers and adds none; egress names the rest
				// that a proxy must not pass on.
				for _, h := range egress.HiddenRequestHeaders {
					pr.Out.Header.Del(h)
				}
			},
			Transport:    s.transport,
			ErrorLog:     log.New(serverLog{s}, "", 0),
			ErrorHandler: s.upstreamError,
		}
	}
	return s.forward
}

// closeIdle closes the idle upstream connections, if any were made.
func (s *server) closeIdle() {
	s.fwdMu.Lock()
	t := s.transport
	s.fwdMu.Unlock()
	if t != nil {
		t.CloseIdleConnections()
	}
}

// alive says whether the listener still serves.
func (s *server) alive() bool {
	select {
	case <-s.stopped:
		return false
	default:
		return !s.closing.Load()
	}
}

// setACL replaces the admitted ranges; new requests see them at once.
func (s *server) setACL(a *acl) { s.acl.Store(a) }

// close stops the server without waiting: the listener is closed (its
// address is free when close returns), every connection, hijacked tunnels
// included, is ended, and finished closes once every handler returned.
func (s *server) close() {
	s.mu.Lock()
	if s.closing.Swap(true) {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	_ = s.ln.Close() // synchronously, so the address is free now
	_ = s.hs.Close() // every connection the server still tracks
	s.cancel()       // forwarded requests, upstream dials and tunnels end
	s.closeIdle()
	go func() {
		s.active.Wait()
		s.closeIdle()
		close(s.finished)
		if s.onDone != nil {
			s.onDone()
		}
	}()
}

// wait blocks until the server finished draining or ctx ends.
func (s *server) wait(ctx context.Context) error {
	select {
	case <-s.finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enter registers a handler; false once the server is closing.
func (s *server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.active.Add(1)
	return true
}

// ServeHTTP admits clients by source address, then forwards plain requests
// and tunnels CONNECT; each request ends with its access log line at V(1).
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		w.Header().Set("Connection", "close")
		http.Error(w, textShuttingDown, http.StatusServiceUnavailable)
		return
	}
	defer s.active.Done()
	a := &access{start: time.Now()}
	a.entry.Client, a.entry.Method = clientAddr(r.RemoteAddr), r.Method
	switch {
	case r.Method == http.MethodConnect:
		if host, portText, err := net.SplitHostPort(r.Host); err == nil {
			port, _ := targetPort(portText, "")
			a.target(host, port)
		}
	case r.URL.IsAbs():
		port, _ := targetPort(r.URL.Port(), r.URL.Scheme)
		a.target(r.URL.Hostname(), port)
	}
	if r.Body != nil {
		r.Body = countingBody{countingReader{r.Body, &a.bytesIn}, r.Body}
	}
	rw := &recordingWriter{ResponseWriter: w, a: a}
	defer func() {
		if v := s.log.V(1); v.Enabled() {
			v.Info("access", a.line(rw.status).KeysAndValues()...)
		}
	}()
	s.serve(rw, r.WithContext(a.traced(context.WithValue(r.Context(), accessKey{}, a))), a)
}

func (s *server) serve(w *recordingWriter, r *http.Request, a *access) {
	src, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !s.acl.Load().allows(src.Addr()) {
		a.decide(egress.DecisionRefused, egress.RuleClientRanges)
		s.log.V(1).Info("refused client outside allowedSourceRanges",
			"source", r.RemoteAddr, "method", r.Method, "target", r.Host)
		w.Header().Set("Connection", "close")
		http.Error(w, "forbidden: your address is not in this proxy's allowedSourceRanges", http.StatusForbidden)
		return
	}
	if users := s.acl.Load().users; users != nil {
		user, password, ok := clientauth.ParseProxyAuthorization(r.Header.Get("Proxy-Authorization"))
		if !ok || !users.Verify(user, password) {
			a.decide(egress.DecisionRefused, egress.RuleClientAuth)
			// Neither the header, the user nor the password is logged:
			// a password typed into the user field would be.
			s.log.V(1).Info("refused client without valid credentials", "source", r.RemoteAddr, "method", r.Method,
				"target", r.Host, "credentials", ok)
			w.Header().Set("Proxy-Authenticate", clientauth.Challenge)
			http.Error(w, textAuthRequired, http.StatusProxyAuthRequired)
			return
		}
		a.user(user)
	}
	switch {
	case r.Method == http.MethodConnect:
		s.tunnel(w, r)
	case !r.URL.IsAbs():
		http.Error(w, "this is a forward proxy: send absolute-URI requests (http://host/path) or CONNECT", http.StatusBadRequest)
	default:
		// The scheme and port are decided here; the addresses when dial
		// has resolved them.
		port, err := targetPort(r.URL.Port(), r.URL.Scheme)
		if err == nil {
			err = s.acl.Load().policy.CheckRequest(false, r.URL.Scheme, port)
		}
		if err != nil {
			s.refuse(w, r, r.URL.Host, err)
			return
		}
		s.forwarder().ServeHTTP(w, r)
	}
}

// targetPort is a URL's port, or its scheme's default.
func targetPort(port, scheme string) (uint16, error) {
	if port == "" {
		if scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q is not a TCP port", port)
	}
	return uint16(n), nil
}

// refuse answers 403 for a destination the policy refuses, with the fixed
// text of its class; why goes to the log. No connection to it was made.
func (s *server) refuse(w http.ResponseWriter, r *http.Request, target string, err error) {
	s.log.V(1).Info("refused destination", "source", r.RemoteAddr, "method", r.Method, "target", target, "reason", err.Error())
	text := textRefused
	var refusal *egress.Refusal
	if errors.As(err, &refusal) {
		accessOf(r.Context()).decide(egress.DecisionRefused, refusal.Class.Rule())
		if refusal.Class == egress.RefusedUnresolved {
			text = textUnresolved
		}
	}
	http.Error(w, text, http.StatusForbidden)
}

// upstreamError answers a forwarded request whose origin could not be
// reached. It always writes a status: a handler that writes nothing makes
// net/http answer 200.
func (s *server) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	s.fail(w, r, r.URL.Host, err)
}

// fail answers a request whose upstream failed: 503 when the instance is
// going away, 504 on a timeout, else 502, each with its fixed text. It
// logs only failures someone is still waiting for.
func (s *server) fail(w http.ResponseWriter, r *http.Request, target string, err error) {
	var refusal *egress.Refusal
	if errors.As(err, &refusal) {
		s.refuse(w, r, target, refusal)
		return
	}
	if s.closing.Load() {
		w.Header().Set("Connection", "close")
		http.Error(w, textShuttingDown, http.StatusServiceUnavailable)
		return
	}
	if r.Context().Err() == nil {
		s.log.V(1).Info("upstream failed", "source", r.RemoteAddr, "method", r.Method, "target", target, "error", err.Error())
	}
	status := gatewayStatus(err)
	text := textCannotReach
	if status == http.StatusGatewayTimeout {
		text = textTimeout
	}
	http.Error(w, text, status)
}

// gatewayStatus is 504 for an upstream that timed out, else 502.
func gatewayStatus(err error) int {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// dial makes upstream connections, for forwarded requests and tunnels
// alike. It resolves the host once, checks every address against the
// destination policy and dials only the addresses it checked, so a name
// that resolves anew between check and dial (DNS rebinding) cannot reach
// an address the policy refuses; one refused address refuses the whole
// name, before any connection, and so does a name with no address. A loopback destination is dialled from the
// instance's own address, so an origin on this host sees each Proxy's
// distinct IP, as it would a VM's; other destinations keep the kernel's
// choice, since a 127/8 source cannot leave the host.
func (s *server) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := targetPort(portText, "")
	if err != nil {
		return nil, err
	}
	addrs, err := s.resolve(ctx, host)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err // the request or the instance ended, not the name
		}
		// A name that does not resolve is refused, as Squid's rules do;
		// the lookup's error says why, in the log only.
		return nil, &egress.Refusal{Class: egress.RefusedUnresolved, Reason: "the name does not resolve: " + err.Error()}
	}
	rule, err := s.acl.Load().policy.AllowedBy(host, addrs, port)
	if err != nil {
		return nil, err
	}
	// Allowed, whether or not the connection then succeeds (as Squid's
	// annotation is made before it connects).
	accessOf(ctx).decide(egress.DecisionAllowed, rule)
	var first error
	for _, a := range addrs {
		conn, err := s.dialAddr(ctx, netip.AddrPortFrom(a.WithZone("").Unmap(), port))
		if err == nil {
			return &allowedConn{Conn: conn, rule: rule}, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// resolve is host's addresses: an IP literal as it is, a name through the
// resolver, once.
func (s *server) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	var addrs []netip.Addr
	var err error
	if s.up.lookup != nil {
		addrs, err = s.up.lookup(ctx, host)
	} else {
		addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("lookup %s: no addresses", host)
	}
	return addrs, nil
}

// dialAddr connects to one checked address.
func (s *server) dialAddr(ctx context.Context, remote netip.AddrPort) (net.Conn, error) {
	var local netip.Addr
	if own, ok := s.ln.Addr().(*net.TCPAddr); ok && remote.Addr().Is4() && remote.Addr().IsLoopback() {
		local, _ = netip.AddrFromSlice(own.IP.To4())
	}
	if s.up.dial != nil {
		return s.up.dial(ctx, remote, local)
	}
	d := *s.dialer
	if local.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
	}
	return d.DialContext(ctx, "tcp", remote.String())
}

// tunnel serves CONNECT: dial the target, hijack the client connection and
// copy both ways until either side ends, the client goes or the server
// closes. The handler stays until the tunnel ends, so close can wait for it.
func (s *server) tunnel(w *recordingWriter, r *http.Request) {
	target := r.Host
	_, portText, err := net.SplitHostPort(target)
	if err != nil || portText == "" {
		http.Error(w, "CONNECT needs a host:port target", http.StatusBadRequest)
		return
	}
	port, err := targetPort(portText, "")
	if err == nil {
		err = s.acl.Load().policy.CheckRequest(true, "", port)
	}
	if err != nil {
		s.refuse(w, r, target, err)
		return
	}
	dctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
	up, err := s.dial(dctx, "tcp", target)
	cancel()
	if err != nil {
		s.fail(w, r, target, err)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		http.Error(w, "cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	// r's context is derived from s.ctx and lives while this handler runs,
	// so closing the server (or the client going) ends the tunnel.
	stop := context.AfterFunc(r.Context(), func() {
		_ = client.Close()
		_ = up.Close()
	})
	defer stop()
	defer func() { _ = client.Close(); _ = up.Close() }()

	// The server may have left read deadlines on the hijacked connection.
	_ = client.SetDeadline(time.Time{})
	w.status = http.StatusOK
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent right behind the CONNECT (a TLS ClientHello)
	// already sit in the server's read buffer.
	var fromClient io.Reader = client
	if n := brw.Reader.Buffered(); n > 0 {
		fromClient = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), client)
	}
	s.log.V(2).Info("tunnel open", "source", r.RemoteAddr, "target", target)
	a := accessOf(r.Context())
	splice(countingConn{client, &a.bytesOut}, up, countingReader{fromClient, &a.bytesIn})
}

// splice copies client to up and up to client. A side that ends cleanly is
// half-closed so the other direction can finish; an error ends both.
func splice(client, up net.Conn, fromClient io.Reader) {
	abort := func() { _ = client.Close(); _ = up.Close() }
	done := make(chan struct{}, 2)
	pipe := func(dst net.Conn, src io.Reader) {
		defer func() { done <- struct{}{} }()
		if _, err := io.Copy(dst, src); err != nil {
			abort()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
			return
		}
		abort()
	}
	go pipe(up, fromClient)
	go pipe(client, up)
	<-done
	<-done
}
