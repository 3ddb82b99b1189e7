package local

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// The egress address of a local instance. Every instance's proxy runs in
// the operator's process and dials its destinations from the operator's
// host, so all of them egress from the same address: what the entry's
// egressIPEcho answers to this host. The provider keeps one observation
// for all its instances and refreshes it in the background; Get only reads
// it.

// echoInterval is how often the echo is asked, answered or not: the pace
// of the guests' reporters, since it is an outside service.
const echoInterval = servingreport.EchoInterval

// echoTimeout bounds one ask, as the reporter's reads are bounded.
const echoTimeout = 10 * time.Second

// echoBodyLimit is as much of the answer as is read: an address is a line.
const echoBodyLimit = 512

// Clipping of what an echo said, as the reporter clips it (the answer
// and the status line become a condition's message).
const (
	maxAnswerShown = 48
	maxStatusShown = 80
)

// echoWatch holds the provider's one observation of its egress address.
// Its goroutine starts on the first read (a provider no one asks about
// makes no requests) and asks the echo whenever a read finds the last ask
// echoInterval old.
type echoWatch struct {
	echo   egress.Echo
	client *http.Client
	// now is the clock, a test seam; time.Now in production.
	now func() time.Time

	// wake asks the goroutine for one ask; one pending ask is enough.
	wake chan struct{}
	// cancel ends the goroutine and its ask in flight; set when it starts.
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu sync.Mutex
	// started says the goroutine runs (or ran: stop does not reset it).
	started bool
	// asked is when the last ask was requested, and requested how many
	// were (tests read it: the requests the pace allowed).
	asked     time.Time
	requested int
	// seen is the observation reads copy: zero before the first answer.
	seen provider.Egress
}

func newEchoWatch(e egress.Echo) *echoWatch {
	return &echoWatch{
		echo: e,
		client: &http.Client{
			Timeout: echoTimeout,
			Transport: &http.Transport{
				// Directly, whatever HTTP_PROXY says: the answer must be
				// the address this host's own dials leave from.
				Proxy:       nil,
				DialContext: (&net.Dialer{Timeout: echoTimeout}).DialContext,
				// One request a minute: no connection worth keeping, and
				// none left behind once the provider is closed.
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

// observe returns the observation, and requests an ask when the last was
// requested echoInterval ago or none was. It never waits for the echo. The
// caller holds p.mu and has seen p.closed false, so no goroutine starts
// after Close's stop.
func (w *echoWatch) observe() provider.Egress {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if since := now.Sub(w.asked); !w.started || since >= echoInterval || since < 0 {
		if !w.started {
			w.start()
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
func (w *echoWatch) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.started, w.cancel = true, cancel
	w.done.Add(1)
	go w.run(ctx)
}

// run asks the echo each time it is woken, until ctx ends.
func (w *echoWatch) run(ctx context.Context) {
	defer w.done.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		ip, why := w.ask(ctx)
		if ctx.Err() != nil {
			return // closed mid-ask: the answer is the cancel's, not the echo's
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

// stop ends the goroutine, cancelling its ask, and waits for it. It may be
// called more than once, and when nothing started.
func (w *echoWatch) stop() {
	w.mu.Lock()
	cancel := w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	w.done.Wait()
	w.client.CloseIdleConnections()
}

// ask GETs the echo and returns the address it answered, or why there is
// none in a few words. It asks directly from this host, not through an
// instance's listener: the local proxy dials from this host, so the direct
// answer is the same address, and the policy, which refuses an internal
// echo to a proxy's clients, would refuse this request too.
func (w *echoWatch) ask(ctx context.Context) (netip.Addr, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.echo.URL, nil)
	if err != nil {
		// egress.ParseEcho admitted the URL, so this does not happen.
		return netip.Addr{}, "the echo's URL cannot be asked"
	}
	req.Header.Set("User-Agent", "egress-proxies-operator")
	req.Header.Set("Accept", "text/plain")
	resp, err := w.client.Do(req)
	if err != nil {
		return netip.Addr{}, transportProblem(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return netip.Addr{}, "the echo answered: " + printable(resp.Status, maxStatusShown)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, echoBodyLimit))
	if err != nil {
		return netip.Addr{}, transportProblem(err)
	}
	line, _, _ := strings.Cut(string(body), "\n")
	line = strings.TrimSpace(line)
	ip, err := netip.ParseAddr(line)
	if err != nil || ip.Zone() != "" {
		shown := printable(line, maxAnswerShown)
		if shown == "" {
			shown = "(empty)"
		}
		return netip.Addr{}, "the echo's answer is not an address: " + shown
	}
	return ip.Unmap(), ""
}

// transportProblem names the kind of a failed exchange and nothing else
// (the URL is the admin's, and says nothing the condition needs).
func transportProblem(err error) string {
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &dns):
		return "the echo's host name does not resolve"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer from the echo within " + echoTimeout.String()
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the echo refused the connection"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the echo closed the connection before answering"
	}
	return "the echo could not be reached"
}

// printable keeps s's printable ASCII characters, at most max of them.
func printable(s string, max int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < max; i++ {
		if c := s[i]; c >= ' ' && c <= '~' {
			b.WriteByte(c)
		}
	}
	return b.String()
}
