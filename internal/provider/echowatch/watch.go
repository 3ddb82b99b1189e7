// Package echowatch keeps one observation of an egress address, as an
// entry's egress-IP echo (egress.Echo) answers it, refreshed in the
// background at the reporters' pace (servingreport.EchoInterval). The
// local provider asks the echo directly from the operator's host; the
// kubernetes provider asks it through each Pod's own proxy, with the
// operator's probe token in a header.
//
// It is a shared leaf: it imports only internal/provider, its egress and
// servingreport packages and the standard library.
package echowatch

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// interval is how often the echo is asked, answered or not: the pace of
// the guests' reporters, since it is an outside service.
const interval = servingreport.EchoInterval

// timeout bounds one ask, as the reporter's reads are bounded.
const timeout = 10 * time.Second

// bodyLimit is as much of the answer as is read: an address is a line.
const bodyLimit = 512

// Clipping of what an echo or a proxy said, as the reporter clips it (the
// answer and the status line become a condition's message).
const (
	maxAnswerShown = 48
	maxStatusShown = 80
	// maxErrorShown clips a Header func's error, written by the caller.
	maxErrorShown = 160
)

// redacted stands in shown text for a header value the ask sent: an echo
// or proxy that reflects the request must not carry the token into Error.
const redacted = "[redacted]"

// Via is the instance's own egress path the ask goes through; nil asks
// directly.
type Via struct {
	// Proxy is the instance's HTTP forward proxy (http://host:port).
	Proxy *url.URL
	// Header returns extra request headers for the proxy (the operator's
	// probe token), called before each ask; an error is the ask's failure,
	// said in Observe's Error (so its text must be safe to show: never
	// include a header value). Nil sends none. The ask is plain HTTP, so
	// the headers travel in the request itself: the proxy must strip them
	// before forwarding it to the echo. Any value an echo or a proxy
	// reflects is replaced in Error.
	Header func(ctx context.Context) (http.Header, error)
}

// Watch holds one observation of an egress address. Its goroutine starts
// on the first Observe (a watch no one reads makes no requests) and asks
// the echo whenever an Observe finds the last ask interval old.
type Watch struct {
	echo   egress.Echo
	via    *Via // nil: directly
	client *http.Client
	// now is the clock, a test seam; time.Now in production.
	now func() time.Time

	// wake asks the goroutine for one ask; one pending ask is enough.
	wake chan struct{}
	// cancel ends the goroutine and its ask in flight; set when it starts.
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu sync.Mutex
	// started says the goroutine runs (or ran); stopped that Stop was
	// called, after which nothing starts.
	started, stopped bool
	// asked is when the last ask was requested, and requested how many
	// were (tests read it: the requests the pace allowed).
	asked     time.Time
	requested int
	// seen is the observation Observe copies: before the first answer,
	// the source alone (provider.Egress.Awaited).
	seen provider.Egress
}

// New returns a watch of echo e, asked through via, or directly when via
// is nil. It does no I/O and starts nothing. A Via without a Proxy is a
// programming error: New panics.
func New(e egress.Echo, via *Via) *Watch {
	proxy := func(*http.Request) (*url.URL, error) { return nil, nil }
	if via != nil {
		if via.Proxy == nil {
			panic("echowatch: Via without a Proxy")
		}
		v := *via
		via = &v
		proxy = http.ProxyURL(via.Proxy)
	}
	return &Watch{
		echo: e,
		via:  via,
		client: &http.Client{
			Timeout: timeout,
			Transport: &http.Transport{
				// Directly, whatever HTTP_PROXY says: the answer must be
				// the address this host's own dials leave from; through
				// a proxy, that instance's proxy and no other.
				Proxy:       proxy,
				DialContext: (&net.Dialer{Timeout: timeout}).DialContext,
				// One request a minute: no connection worth keeping, and
				// none left behind once stopped.
				DisableKeepAlives: true,
			},
			// A redirect is not an answer; the reporter follows none
			// either.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		now:  time.Now,
		wake: make(chan struct{}, 1),
	}
}

// Observe returns the observation, and requests an ask when the last was
// requested interval ago or none was. It never waits for the echo. After
// Stop it returns the last observation and asks nothing.
func (w *Watch) Observe() provider.Egress {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return w.seen
	}
	now := w.now()
	if since := now.Sub(w.asked); !w.started || since >= interval || since < 0 {
		if !w.started {
			w.start()
			// Asked, not answered yet: Awaited until the first answer.
			w.seen.Source = provider.EgressFromEcho
		}
		w.asked = now
		w.requested++
		select {
		case w.wake <- struct{}{}:
		default: // an ask is pending already
		}
	}
	return w.seen
}

// start runs the goroutine; the caller holds w.mu.
func (w *Watch) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.started, w.cancel = true, cancel
	w.done.Add(1)
	go w.run(ctx)
}

// run asks the echo each time it is woken, until ctx ends.
func (w *Watch) run(ctx context.Context) {
	defer w.done.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		ip, why := w.ask(ctx)
		if ctx.Err() != nil {
			return // stopped mid-ask: the answer is the cancel's, not the echo's
		}
		at := w.now()
		w.mu.Lock()
		if why == "" {
			w.seen = provider.Egress{IP: ip.String(), Source: provider.EgressFromEcho, Confirmed: at}
		} else {
			// The last good address and when it was confirmed stand.
			w.seen.Source, w.seen.Error = provider.EgressFromEcho, why
		}
		w.mu.Unlock()
	}
}

// Stop ends the goroutine, cancelling its ask, and waits for it. It may be
// called more than once, and when nothing started.
func (w *Watch) Stop() {
	w.mu.Lock()
	w.stopped = true // no goroutine starts after this
	cancel := w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	w.done.Wait()
	w.client.CloseIdleConnections()
}

// ask GETs the echo and returns the address it answered, or why there is
// none in a few words.
func (w *Watch) ask(ctx context.Context) (netip.Addr, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.echo.URL, nil)
	if err != nil {
		// egress.ParseEcho admitted the URL, so this does not happen.
		return netip.Addr{}, "the echo's URL cannot be asked"
	}
	// sent are the extra headers' values: never shown.
	var sent []string
	if w.via != nil && w.via.Header != nil {
		h, err := w.via.Header(ctx)
		if err != nil {
			// The caller's text, which its contract keeps free of values.
			if why := printable(err.Error(), maxErrorShown, nil); why != "" {
				return netip.Addr{}, why
			}
			return netip.Addr{}, "the proxy's request headers could not be made"
		}
		for k, vs := range h {
			for _, v := range vs {
				req.Header.Add(k, v)
				sent = append(sent, v)
			}
		}
	}
	// After the extra headers, so that they cannot replace these.
	req.Header.Set("User-Agent", "egress-proxies-operator")
	req.Header.Set("Accept", "text/plain")
	resp, err := w.client.Do(req)
	if err != nil {
		return netip.Addr{}, w.transportProblem(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		status := printable(resp.Status, maxStatusShown, sent)
		if w.proxyAnswered(resp) {
			if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusProxyAuthRequired {
				return netip.Addr{}, "the proxy refused the ask: " + status
			}
			// Squid's own page for a dial, a lookup or a read that failed
			// (ERR_CONNECT_FAIL, ERR_DNS_FAIL, ERR_READ_TIMEOUT: 5xx).
			return netip.Addr{}, "the proxy got no answer from the echo: " + status
		}
		return netip.Addr{}, "the echo answered: " + status
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, bodyLimit))
	if err != nil {
		return netip.Addr{}, w.transportProblem(err)
	}
	line, _, _ := strings.Cut(string(body), "\n")
	line = strings.TrimSpace(line)
	ip, err := netip.ParseAddr(line)
	if err != nil || ip.Zone() != "" {
		shown := printable(line, maxAnswerShown, sent)
		if shown == "" {
			shown = "(empty)"
		}
		return netip.Addr{}, "the echo's answer is not an address: " + shown
	}
	return ip.Unmap(), ""
}

// proxyAnswered says a response that is not the echo's answer came from
// the proxy itself: Squid marks the pages it writes with X-Squid-Error,
// and a 407 is a proxy's by definition. Directly there is no proxy.
func (w *Watch) proxyAnswered(resp *http.Response) bool {
	return w.via != nil &&
		(resp.Header.Get("X-Squid-Error") != "" || resp.StatusCode == http.StatusProxyAuthRequired)
}

// transportProblem names the kind of a failed exchange and the party that
// failed, and nothing else (the URLs are the admin's and the instance's,
// and say nothing the condition needs). Through a proxy, this host dials
// only the proxy, so a refusal or a name that does not resolve is the
// proxy's; a silence may be either's.
func (w *Watch) transportProblem(err error) string {
	party, wait := "the echo", "the echo"
	if w.via != nil {
		party, wait = "the proxy", "the proxy or the echo"
	}
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &dns):
		return party + "'s host name does not resolve"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer from " + wait + " within " + timeout.String()
	case errors.Is(err, syscall.ECONNREFUSED):
		return party + " refused the connection"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return party + " closed the connection before answering"
	}
	return party + " could not be reached"
}

// printable keeps s's printable ASCII characters with every value of
// hidden replaced, at most max of them. The values go after the filter
// (which could join a value split by a control character) and before the
// clip, so no prefix of one survives it either.
func printable(s string, max int, hidden []string) string {
	kept := printableOnly(s)
	for _, v := range hidden {
		if v = printableOnly(v); v != "" {
			kept = strings.ReplaceAll(kept, v, redacted)
		}
	}
	if len(kept) > max {
		kept = kept[:max]
	}
	return kept
}

// printableOnly is s without the characters outside printable ASCII.
func printableOnly(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= ' ' && c <= '~' {
			b.WriteByte(c)
		}
	}
	return b.String()
}
