package servingreport

import (
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func TestFormatParseRoundTrip(t *testing.T) {
	for _, r := range []Report{
		{Serving: true, Checked: time.Unix(1764700000, 0).UTC(), Answered: time.Unix(1764700000, 0).UTC(), Version: "5.7", CloudInit: "done"},
		{Checked: time.Unix(1764700000, 0).UTC(), CloudInit: "running"},
		{Checked: time.Unix(1764700010, 0).UTC(), Answered: time.Unix(1764700000, 0).UTC(), CloudInit: "error", CloudInitError: "('scripts-user', RuntimeError('x'))"},
		{Serving: true, Checked: time.Unix(1764700000, 0).UTC(), EgressIP: "2001:db8::7", EgressConfirmed: time.Unix(1764699990, 0).UTC(),
			EgressChecked: time.Unix(1764700000, 0).UTC(), EgressError: "the echo answered: HTTP/1.1 503 Service Unavailable"},
	} {
		got, err := Parse(Format(r))
		if err != nil {
			t.Fatalf("Parse(Format(%+v)): %v", r, err)
		}
		if got != r {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Report
		err      string
	}{
		{name: "a newer reporter's keys are skipped", in: "v=1\nserving=yes\nchecked=10\nanswered=10\nlatency_ms=3\n",
			want: Report{Serving: true, Checked: time.Unix(10, 0).UTC(), Answered: time.Unix(10, 0).UTC()}},
		{name: "CRLF lines", in: "v=1\r\nserving=no\r\ncloud_init=running\r\n", want: Report{CloudInit: "running"}},
		{name: "control characters and length are cut from the error line",
			in:   "serving=no\ncloud_init=error\ncloud_init_error=\x1b[31mbad\x07 " + strings.Repeat("x", 300) + "\n",
			want: Report{CloudInit: "error", CloudInitError: "[31mbad " + strings.Repeat("x", maxErrorLen-len("[31mbad ")-3) + "..."}},
		{name: "an echo's answer that is no address is kept out, and said",
			in:   "serving=yes\negress_ip=<html>\negress_ip_confirmed=10\n",
			want: Report{Serving: true, EgressConfirmed: time.Unix(10, 0).UTC(), EgressError: `the echo's answer "<html>" is not an address`}},
		{name: "an IPv4-mapped answer is the IPv4 address", in: "serving=yes\negress_ip=::ffff:203.0.113.7\n",
			want: Report{Serving: true, EgressIP: "203.0.113.7"}},
		{name: "no serving line", in: "v=1\nchecked=10\n", err: "no serving= line"},
		{name: "empty", in: "", err: "no serving= line"},
		{name: "another version", in: "v=2\nserving=yes\n", err: `report version "2"`},
		{name: "serving is yes or no", in: "serving=true\n", err: `serving="true"`},
		{name: "a time that is no epoch", in: "serving=yes\nchecked=yesterday\n", err: "checked:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestSignal(t *testing.T) {
	now := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name     string
		r        Report
		serving  provider.Serving
		detail   string
		setupErr string
		// noLastAnswered: the signal says nothing of an earlier answer.
		noLastAnswered bool
	}{
		{name: "answering", r: Report{Serving: true, Checked: ago(5 * time.Second), Answered: ago(5 * time.Second), CloudInit: "done"},
			serving: provider.ServingAnswering},
		{name: "not yet, cloud-init running", r: Report{Checked: ago(3 * time.Second), CloudInit: "running"},
			serving: provider.ServingNotAnswering, detail: "not answering yet (cloud-init: running)"},
		{name: "answering while cloud-init runs: still starting", r: Report{Serving: true, Checked: ago(time.Second), Answered: ago(time.Second), CloudInit: "running"},
			serving: provider.ServingNotAnswering, detail: "the proxy answers; waiting for cloud-init to finish", noLastAnswered: true},
		{name: "a pause while cloud-init runs (runcmd restarts Squid) is no stop", r: Report{Checked: ago(time.Second), Answered: ago(20 * time.Second), CloudInit: "running"},
			serving: provider.ServingNotAnswering, detail: "not answering yet (cloud-init: running)", noLastAnswered: true},
		{name: "stopped answering", r: Report{Checked: ago(3 * time.Second), Answered: ago(33 * time.Second), CloudInit: "done"},
			serving: provider.ServingNotAnswering, detail: "it last answered at 2026-12-02T20:59:27Z (cloud-init: done)"},
		{name: "cloud-init failed, nothing answers", r: Report{Checked: ago(time.Second), CloudInit: "error", CloudInitError: "('scripts-user', RuntimeError('x'))"},
			serving: provider.ServingNotAnswering, detail: "not answering yet (cloud-init: error)", setupErr: "('scripts-user', RuntimeError('x'))"},
		{name: "cloud-init failed without a line", r: Report{Checked: ago(time.Second), CloudInit: "error"},
			serving: provider.ServingNotAnswering, detail: "not answering yet (cloud-init: error)", setupErr: "cloud-init status: error"},
		{name: "cloud-init failed, the proxy answers anyway", r: Report{Serving: true, Checked: ago(time.Second), Answered: ago(time.Second), CloudInit: "error", CloudInitError: "e"},
			serving: provider.ServingAnswering, setupErr: "e"},
		{name: "a stale report is not believed", r: Report{Serving: true, Checked: ago(StaleAfter + time.Second), Answered: ago(StaleAfter + time.Second)},
			serving: provider.ServingNotAnswering, detail: "the guest's last report is from 2026-12-02T20:57:59Z, 2m1s ago: its reporter or the guest has stopped"},
		{name: "a report from a clock ahead is believed", r: Report{Serving: true, Checked: now.Add(time.Hour), Answered: now.Add(time.Hour)},
			serving: provider.ServingAnswering},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.r.Signal(now)
			wantLast := tc.r.Answered
			if tc.noLastAnswered {
				wantLast = time.Time{}
			}
			if s.Serving != tc.serving || s.Detail != tc.detail || s.SetupError != tc.setupErr || !s.LastAnswered.Equal(wantLast) {
				t.Errorf("Signal:\n got %+v\nwant serving %q detail %q setup error %q last answered %v", s, tc.serving, tc.detail, tc.setupErr, wantLast)
			}
			var inst provider.Instance
			s.Apply(&inst)
			if inst.Serving != s.Serving || inst.ServingDetail != s.Detail || inst.SetupError != s.SetupError || !inst.LastAnswered.Equal(s.LastAnswered) {
				t.Errorf("Apply: %+v from %+v", inst, s)
			}
		})
	}
}

// TestHoldsGroupAddress: the line round-trips, a value other than yes or
// no is refused, and a stale report says nothing of now.
func TestHoldsGroupAddress(t *testing.T) {
	now := time.Unix(1_800_000_000, 0).UTC()
	for _, v := range []string{"yes", "no"} {
		r, err := Parse(Format(Report{Serving: true, Checked: now, HoldsGroupAddress: v}))
		if err != nil || r.HoldsGroupAddress != v {
			t.Fatalf("round trip of %q: %+v, %v", v, r, err)
		}
		s := r.Signal(now.Add(time.Second))
		if s.HoldsGroupAddress == nil || *s.HoldsGroupAddress != (v == "yes") {
			t.Errorf("signal of %q: %v", v, s.HoldsGroupAddress)
		}
		var inst provider.Instance
		s.Apply(&inst)
		if inst.HoldsGroupAddress == nil || *inst.HoldsGroupAddress != (v == "yes") {
			t.Errorf("Apply of %q: %v", v, inst.HoldsGroupAddress)
		}
		if stale := r.Signal(now.Add(StaleAfter + time.Second)); stale.HoldsGroupAddress != nil {
			t.Errorf("a stale report of %q still says %v", v, *stale.HoldsGroupAddress)
		}
	}
	if _, err := Parse("v=1\nserving=yes\nholds_group_address=maybe\n"); err == nil || !strings.Contains(err.Error(), "holds_group_address") {
		t.Errorf("holds_group_address=maybe: %v, want an error naming it", err)
	}
	if r, err := Parse("v=1\nserving=yes\n"); err != nil || r.Signal(now).HoldsGroupAddress != nil {
		t.Errorf("a report without the line: %+v, %v; want nothing said", r, err)
	}
}
