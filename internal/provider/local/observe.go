package local

import (
	"context"
	"strings"

	"github.com/go-logr/logr"
)

// Logging tiers: V(1) one line per operation outcome and per refused client,
// V(2) detail (addresses, ranges, upstream failures). CloudInit is never
// passed to a logger: nothing in this package reads it.

// logger is the call's logger: the method boundary (provider.WithBoundary,
// applied by the registry) has named it and tagged it with the provider,
// and writes each call's outcome line.
func (p *Provider) logger(ctx context.Context) logr.Logger {
	return logr.FromContextOrDiscard(ctx)
}

// serverLog routes the standard library's log lines (http.Server and
// httputil.ReverseProxy report through a *log.Logger) to the instance's logr
// at V(2). It drops them once the server is closing: the teardown's "use of
// closed connection" noise says nothing, and a line written after Delete
// returned would outlive the caller's logger.
type serverLog struct{ s *server }

func (w serverLog) Write(b []byte) (int, error) {
	if !w.s.closing.Load() {
		w.s.log.V(2).Info("http server", "detail", strings.TrimSpace(string(b)))
	}
	return len(b), nil
}
