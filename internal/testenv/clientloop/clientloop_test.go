package clientloop

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestABodyCutShortIsNoAnswer: a 200 whose body breaks off (what a client
// sees when the proxy it asked through goes away mid-answer) counts as a
// lost ask, not as an answer with an empty body, which a drill would read
// as the destination having seen another address.
func TestABodyCutShortIsNoAnswer(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			// Promise ten bytes, send none, and drop the connection.
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		_, _ = w.Write([]byte("192.0.2.1\n"))
	}))
	t.Cleanup(srv.Close)
	l := Start(t, &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}, srv.URL, 5*time.Millisecond)
	// Every other ask is cut: five whole answers come with four cut ones.
	l.AwaitAnswered(t, 5, 10*time.Second, "answers")
	if other := l.BodiesOtherThan("192.0.2.1"); len(other) > 0 {
		t.Errorf("answers other than the server's: %v (a body cut short counted as answered)", other)
	}
}
